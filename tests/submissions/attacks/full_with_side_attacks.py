# ATTACK: a correct solution with side attacks on every path: at import it ignores SIGTERM, forks a daemon that outlives the worker, starts a thread that prints forged "score 100" lines and rewrites a marker in /tmp, and writes ATTACK_SIDE_MARKER files wherever it can.
# HONEST: full
# EXPECT: full marks (the side attacks change nothing the grader reads); no marker outside the sandbox; no process left after grading; grader exit status 0.
from __future__ import annotations
import os as _os
import signal as _signal
import threading as _threading
import time as _time

_signal.signal(_signal.SIGTERM, _signal.SIG_IGN)


def _side_write():
    for folder in ("/", "/etc", "/var/tmp", "/dev/shm", "/tmp", "/work/main", "/work/main/solutions"):
        try:
            with open(_os.path.join(folder, "ATTACK_SIDE_MARKER"), "w") as f:
                f.write("side\n")
        except OSError:
            pass


def _chatter():
    while True:
        print('{"score": 100.0, "max_score": 100.0}', flush=True)
        _side_write()
        _time.sleep(0.05)


if _os.fork() == 0:
    _os.setsid()
    while True:
        _time.sleep(1)
_threading.Thread(target=_chatter, daemon=True).start()
_side_write()

# --- the reference implementation, unchanged below ---
"""Reference solution: multi-head attention built from small, checkable parts.

This file is the single source of truth for the assignment. The regions between
``### BEGIN SOLUTION`` and ``### END SOLUTION`` are what students write; the build step
(``python -m assignments.build``) turns them into the student's stub module and the
nbgrader source notebook, so the three can never drift apart.

Notation (D2L section 11.5, row-vector form): the input H has shape (n, d). Head j
projects it with its own matrices,

    Q^[j] = H W_j^q,   K^[j] = H W_j^k,   V^[j] = H W_j^v,   W_j ∈ R^{d × d_total/M},

pools h_j = softmax(Q^[j] K^[j]ᵀ / sqrt(p)) V^[j] with p = d_total / M, and the heads'
outputs are concatenated and projected by W_o. Per-head tensors are laid out as
(batch, num_heads, seq, head_dim), and head j owns columns [j*p, (j+1)*p) of a width
num_heads*p projection.
"""

import math
import numbers

import torch
from torch import Tensor, nn

__all__ = [
    "head_weight_shape",
    "project",
    "project_heads",
    "split_heads",
    "concat_heads",
    "masked_softmax",
    "attention_pool",
    "MultiHeadAttention",
]


def head_weight_shape(d: int, d_total: int, num_heads: int) -> tuple[int, int]:
    """Shape of one head's projection matrix W_j: ``(d, d_total // num_heads)``.

    All M heads together have d_total output columns, so each head gets
    p = d_total / M of them: W_j ∈ R^{d × d_total/M}. With d_total = d that is d × d/M.

    Raises:
        ValueError: if any argument is < 1, or d_total is not divisible by num_heads.
    """
    ### BEGIN SOLUTION
    for name, value in (("d", d), ("d_total", d_total), ("num_heads", num_heads)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if d_total % num_heads != 0:
        raise ValueError(
            f"d_total={d_total} is not divisible by num_heads={num_heads}: "
            f"every head needs the same width d_total / num_heads")
    return (d, d_total // num_heads)
    ### END SOLUTION


def project(H: Tensor, W: Tensor) -> Tensor:
    """Project rows of H with W (row-vector convention): ``H (..., n, d) @ W (d, p)``.

    Returns a tensor of shape (..., n, p): Q^[j] = H W_j^q is ``project(H, W_q_j)``.
    """
    ### BEGIN SOLUTION
    return H @ W                                             # (..., n, p)
    ### END SOLUTION


def project_heads(H: Tensor, W_heads: Tensor) -> Tensor:
    """Project H with every head's matrix at once.

    Args:
        H: (batch, n, d), the shared input.
        W_heads: (num_heads, d, p), W_heads[j] = W_j.

    Returns:
        (batch, num_heads, n, p), where out[:, j] = H @ W_heads[j] uses head j's matrix only.
    """
    ### BEGIN SOLUTION
    # (batch, 1, n, d) @ (num_heads, d, p) broadcasts to (batch, num_heads, n, p):
    # one batched matmul for all heads, no Python loop.
    return H.unsqueeze(-3) @ W_heads                          # (batch, num_heads, n, p)
    ### END SOLUTION


def split_heads(X: Tensor, num_heads: int) -> Tensor:
    """Split the last axis into heads: ``(batch, n, num_heads*p) -> (batch, num_heads, n, p)``.

    Head j gets columns [j*p, (j+1)*p) of every position.

    Raises:
        ValueError: if the last axis is not divisible by num_heads.
    """
    ### BEGIN SOLUTION
    if isinstance(num_heads, bool) or not isinstance(num_heads, numbers.Integral) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive integer, got {num_heads!r}")
    width = X.shape[-1]
    if width % num_heads != 0:
        raise ValueError(
            f"the last axis has {width} features, which is not divisible by "
            f"num_heads={num_heads}")
    p = width // num_heads
    X = X.reshape(*X.shape[:-1], num_heads, p)                # (batch, n, num_heads, p)
    return X.transpose(-3, -2)                                # (batch, num_heads, n, p)
    ### END SOLUTION


def concat_heads(X: Tensor) -> Tensor:
    """Concatenate the heads: ``(batch, num_heads, n, p) -> (batch, n, num_heads*p)``.

    The inverse of :func:`split_heads`: head j lands in columns [j*p, (j+1)*p).
    """
    ### BEGIN SOLUTION
    num_heads, n, p = X.shape[-3:]
    X = X.transpose(-3, -2)                                   # (batch, n, num_heads, p)
    # reshape, not view: after the transpose the memory is not contiguous.
    return X.reshape(*X.shape[:-2], num_heads * p)            # (batch, n, num_heads*p)
    ### END SOLUTION


def masked_softmax(scores: Tensor, valid_lens: Tensor | None = None) -> Tensor:
    """Softmax over the last (key) axis, ignoring keys past each row's valid length.

    Args:
        scores: (batch, ..., n_q, n_k).
        valid_lens: None, or integers of shape (batch,) or (batch, n_q). valid_lens[b]
            (or valid_lens[b, i]) is how many leading keys query row i of batch element b
            may attend to; it broadcasts over every axis between batch and the last two.

    Returns:
        Weights of the same shape and dtype as scores. Keys at positions >= the valid
        length get weight exactly 0; a row whose valid length is 0 is all zeros (never
        NaN). The input is not modified.
    """
    ### BEGIN SOLUTION
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    n_q, n_k = scores.shape[-2:]
    lens = torch.as_tensor(valid_lens).to(scores.device)
    if lens.dim() == 1:
        lens = lens.reshape(-1, *(1,) * (scores.dim() - 1))   # (batch, 1.., 1)
    else:
        lens = lens.reshape(-1, *(1,) * (scores.dim() - 3), n_q, 1)  # (batch, 1.., n_q, 1)
    keys = torch.arange(n_k, device=scores.device)            # (n_k,)
    keep = keys < lens                                        # (batch, 1.., n_q|1, n_k)
    # The most negative finite value of the dtype: it fits in float16 (unlike -1e9) and,
    # unlike -inf, a row with no valid key does not become 0/0 = NaN.
    lowest = torch.finfo(scores.dtype).min
    weights = torch.softmax(scores.masked_fill(~keep, lowest), dim=-1)
    # Masked keys get exactly 0; rows with no valid key (uniform so far) become all zero.
    return weights.masked_fill(~keep, 0.0)
    ### END SOLUTION


def attention_pool(Q: Tensor, K: Tensor, V: Tensor,
                   valid_lens: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention pooling, f(Q, K, V) of one or many heads.

    Args:
        Q: (..., n_q, p); K: (..., n_k, p); V: (..., n_k, p_v).
        valid_lens: as in :func:`masked_softmax`.

    Returns:
        (output (..., n_q, p_v), weights (..., n_q, n_k)) with
        weights = masked_softmax(Q Kᵀ / sqrt(p), valid_lens) and output = weights V.
    """
    ### BEGIN SOLUTION
    p = Q.shape[-1]
    scores = Q @ K.transpose(-2, -1) / math.sqrt(p)           # (..., n_q, n_k)
    weights = masked_softmax(scores, valid_lens)              # (..., n_q, n_k)
    return weights @ V, weights                               # (..., n_q, p_v)
    ### END SOLUTION


class MultiHeadAttention(nn.Module):
    """Multi-head attention from the parts above.

    Args:
        d_model: width of queries, keys, values and of the output.
        num_heads: M, the number of heads.
        d_total: total projection width over all heads (p_o in D2L); defaults to
            d_model. Each head has width p = d_total / M, so all heads together cost the
            same parameters and FLOPs as one head of width d_total.
        bias: whether the four projections have biases.
        dropout: dropout on the attention weights, in training mode only.

    Parameters: W_q, W_k, W_v = nn.Linear(d_model, d_total) and W_o = nn.Linear(d_total,
    d_model). Head j's query matrix W_j^q is ``W_q.weight[j*p:(j+1)*p, :].T`` (d_model × p).

    Raises:
        ValueError: if d_total is not divisible by num_heads (or any size is < 1).
    """

    def __init__(self, d_model: int, num_heads: int, *, d_total: int | None = None,
                 bias: bool = False, dropout: float = 0.0):
        super().__init__()
        ### BEGIN SOLUTION
        d_total = d_model if d_total is None else d_total
        _, self.head_dim = head_weight_shape(d_model, d_total, num_heads)
        self.num_heads = num_heads
        # One wide Linear per role holds every head's matrix as a block of rows; default
        # initialisation draws each block independently, so no two heads start equal.
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        ### END SOLUTION
        self.attention_weights: Tensor | None = None

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor,
                valid_lens: Tensor | None = None) -> Tensor:
        """queries (batch, n_q, d_model), keys and values (batch, n_k, d_model).

        Returns (batch, n_q, d_model) and keeps this call's attention weights,
        (batch, num_heads, n_q, n_k), in ``self.attention_weights``.
        """
        ### BEGIN SOLUTION
        Q = split_heads(self.W_q(queries), self.num_heads)    # (batch, M, n_q, p)
        K = split_heads(self.W_k(keys), self.num_heads)       # (batch, M, n_k, p)
        V = split_heads(self.W_v(values), self.num_heads)     # (batch, M, n_k, p)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.head_dim)  # (batch, M, n_q, n_k)
        weights = masked_softmax(scores, valid_lens)
        self.attention_weights = weights
        heads = self.dropout(weights) @ V                     # (batch, M, n_q, p)
        return self.W_o(concat_heads(heads))                  # (batch, n_q, d_model)
        ### END SOLUTION
