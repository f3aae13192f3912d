# CODES: module.self-attention-only, dtype.forces-float32
# STYLE: fairseq MultiheadAttention: time-first, q * scaling, (bsz*heads) bmm, the self_attention branch, utils.softmax in float32 then type_as
"""fairseq-style attention whose softmax runs in float32 and whose forward always takes the
self-attention branch (keys and values projected from the queries).
"""
from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F
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
    for name, value in (("d", d), ("d_total", d_total), ("num_heads", num_heads)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if d_total % num_heads != 0:
        raise ValueError(
            f"d_total={d_total} is not divisible by num_heads={num_heads}: "
            f"every head needs the same width d_total / num_heads")
    return (d, d_total // num_heads)


def project(H: Tensor, W: Tensor) -> Tensor:
    """Project rows of H with W (row-vector convention): ``H (..., n, d) @ W (d, p)``.

    Returns a tensor of shape (..., n, p): Q^[j] = H W_j^q is ``project(H, W_q_j)``.
    """
    return H @ W                                             # (..., n, p)


def project_heads(H: Tensor, W_heads: Tensor) -> Tensor:
    """Project H with every head's matrix at once.

    Args:
        H: (batch, n, d), the shared input.
        W_heads: (num_heads, d, p), W_heads[j] = W_j.

    Returns:
        (batch, num_heads, n, p), where out[:, j] = H @ W_heads[j] uses head j's matrix only.
    """
    # (batch, 1, n, d) @ (num_heads, d, p) broadcasts to (batch, num_heads, n, p):
    # one batched matmul for all heads, no Python loop.
    return H.unsqueeze(-3) @ W_heads                          # (batch, num_heads, n, p)


def split_heads(X: Tensor, num_heads: int) -> Tensor:
    """Split the last axis into heads: ``(batch, n, num_heads*p) -> (batch, num_heads, n, p)``.

    Head j gets columns [j*p, (j+1)*p) of every position.

    Raises:
        ValueError: if the last axis is not divisible by num_heads.
    """
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


def concat_heads(X: Tensor) -> Tensor:
    """Concatenate the heads: ``(batch, num_heads, n, p) -> (batch, n, num_heads*p)``.

    The inverse of :func:`split_heads`: head j lands in columns [j*p, (j+1)*p).
    """
    num_heads, n, p = X.shape[-3:]
    X = X.transpose(-3, -2)                                   # (batch, n, num_heads, p)
    # reshape, not view: after the transpose the memory is not contiguous.
    return X.reshape(*X.shape[:-2], num_heads * p)            # (batch, n, num_heads*p)


def masked_softmax(scores: Tensor, valid_lens: Tensor | None = None) -> Tensor:
    """Softmax over the keys, in float32 "for stability" as fairseq's utils.softmax does."""
    n_q, n_k = scores.shape[-2:]
    x = scores.float()
    if valid_lens is not None:
        lens = torch.as_tensor(valid_lens).to(scores.device)
        lens = lens.reshape(lens.shape[0], *(1,) * (scores.dim() - lens.dim() - 1),
                            *lens.shape[1:], 1)
        pad = torch.arange(n_k, device=scores.device) >= lens      # key_padding_mask
        x = x.masked_fill(pad, torch.finfo(torch.float32).min)
    probs = F.softmax(x, dim=-1, dtype=torch.float32).type_as(scores)
    return probs if valid_lens is None else probs.masked_fill(pad, 0.0)


def attention_pool(Q: Tensor, K: Tensor, V: Tensor,
                   valid_lens: Tensor | None = None) -> tuple[Tensor, Tensor]:
    attn = masked_softmax(torch.matmul(Q * Q.shape[-1] ** -0.5, K.transpose(-1, -2)), valid_lens)
    return torch.matmul(attn, V), attn


class MultiHeadAttention(nn.Module):
    """fairseq's MultiheadAttention, its self_attention branch taken for every call."""

    def __init__(self, d_model: int, num_heads: int, *, d_total: int | None = None,
                 bias: bool = False, dropout: float = 0.0):
        super().__init__()
        embed = d_model if d_total is None else d_total
        _, self.head_dim = head_weight_shape(d_model, embed, num_heads)
        self.num_heads = num_heads
        self.scaling = self.head_dim ** -0.5
        self.W_q = nn.Linear(d_model, embed, bias=bias)
        self.W_k = nn.Linear(d_model, embed, bias=bias)
        self.W_v = nn.Linear(d_model, embed, bias=bias)
        self.W_o = nn.Linear(embed, d_model, bias=bias)
        self.dropout_module = nn.Dropout(dropout)
        self.attention_weights: Tensor | None = None

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor,
                valid_lens: Tensor | None = None) -> Tensor:
        query = queries.transpose(0, 1)                        # (tgt_len, bsz, embed): time first
        tgt_len, bsz, _ = query.shape
        q = self.W_q(query) * self.scaling
        k = self.W_k(query)                                    # self_attention: k, v from query
        v = self.W_v(query)
        fold = lambda x: x.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        q, k, v = fold(q), fold(k), fold(v)                    # (bsz*heads, len, head_dim)
        lens = None if valid_lens is None else \
            torch.as_tensor(valid_lens).repeat_interleave(self.num_heads, dim=0)
        attn_weights = masked_softmax(torch.bmm(q, k.transpose(1, 2)), lens)
        self.attention_weights = attn_weights.view(bsz, self.num_heads, tgt_len, -1)
        attn = torch.bmm(self.dropout_module(attn_weights), v)  # (bsz*heads, tgt_len, head_dim)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, -1)
        return self.W_o(attn).transpose(0, 1)
