"""Multi-head attention, part by part: your implementation.

Fill in every function that raises NotImplementedError; the message points to the
section of mha.ipynb that explains it. Run ``pytest`` in this folder for the public
tests (small examples you can check by hand); the graders run many more.

Notation (D2L section 11.5, row-vector form): the input H has shape (n, d). Head j
projects it with its own matrices,

    Q^[j] = H W_j^q,   K^[j] = H W_j^k,   V^[j] = H W_j^v,   W_j ∈ R^{d × d_total/M},

pools h_j = softmax(Q^[j] K^[j]ᵀ / sqrt(p)) V^[j] with p = d_total / M, and the heads'
outputs are concatenated and projected by W_o. Per-head tensors are laid out as
(batch, num_heads, seq, head_dim), and head j owns columns [j*p, (j+1)*p) of a width
num_heads*p projection.
"""
from __future__ import annotations

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
    raise NotImplementedError("implement head_weight_shape: see section 1 (shape rules) of mha.ipynb")


def project(H: Tensor, W: Tensor) -> Tensor:
    """Project rows of H with W (row-vector convention): ``H (..., n, d) @ W (d, p)``.

    Returns a tensor of shape (..., n, p): Q^[j] = H W_j^q is ``project(H, W_q_j)``.
    """
    raise NotImplementedError("implement project: see section 2 (projection) of mha.ipynb")


def project_heads(H: Tensor, W_heads: Tensor) -> Tensor:
    """Project H with every head's matrix at once.

    Args:
        H: (batch, n, d), the shared input.
        W_heads: (num_heads, d, p), W_heads[j] = W_j.

    Returns:
        (batch, num_heads, n, p), where out[:, j] = H @ W_heads[j] uses head j's matrix only.
    """
    raise NotImplementedError("implement project_heads: see section 2 (projection) of mha.ipynb")


def split_heads(X: Tensor, num_heads: int) -> Tensor:
    """Split the last axis into heads: ``(batch, n, num_heads*p) -> (batch, num_heads, n, p)``.

    Head j gets columns [j*p, (j+1)*p) of every position.

    Raises:
        ValueError: if the last axis is not divisible by num_heads.
    """
    raise NotImplementedError("implement split_heads: see section 3 (per-head split) of mha.ipynb")


def concat_heads(X: Tensor) -> Tensor:
    """Concatenate the heads: ``(batch, num_heads, n, p) -> (batch, n, num_heads*p)``.

    The inverse of :func:`split_heads`: head j lands in columns [j*p, (j+1)*p).
    """
    raise NotImplementedError("implement concat_heads: see section 5 (concat) of mha.ipynb")


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
    raise NotImplementedError("implement masked_softmax: see section 4 (pooling) of mha.ipynb")


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
    raise NotImplementedError("implement attention_pool: see section 4 (pooling) of mha.ipynb")


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
        raise NotImplementedError("implement MultiHeadAttention.__init__: see section 6 (the module) of mha.ipynb")
        self.attention_weights: Tensor | None = None

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor,
                valid_lens: Tensor | None = None) -> Tensor:
        """queries (batch, n_q, d_model), keys and values (batch, n_k, d_model).

        Returns (batch, n_q, d_model) and keeps this call's attention weights,
        (batch, num_heads, n_q, n_k), in ``self.attention_weights``.
        """
        raise NotImplementedError("implement MultiHeadAttention.forward: see section 6 (the module) of mha.ipynb")
