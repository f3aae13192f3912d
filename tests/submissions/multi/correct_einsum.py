# CODES: 
# STYLE: einsum everywhere (opt_einsum / lucidrains style), unflatten/movedim for the heads
"""CORRECT: every product an einsum, the head axis moved with unflatten/movedim."""
from __future__ import annotations

import copy
import math
import numbers

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def head_weight_shape(d: int, d_total: int, num_heads: int) -> tuple[int, int]:
    for name, value in (("d", d), ("d_total", d_total), ("num_heads", num_heads)):
        _positive(name, value)
    if d_total % num_heads != 0:
        raise ValueError(f"d_total={d_total} is not divisible by num_heads={num_heads}")
    return (d, d_total // num_heads)


def project(H: Tensor, W: Tensor) -> Tensor:
    return torch.einsum("...nd,dp->...np", H, W)


def project_heads(H: Tensor, W_heads: Tensor) -> Tensor:
    return torch.einsum("bnd,hdp->bhnp", H, W_heads)


def split_heads(X: Tensor, num_heads: int) -> Tensor:
    _positive("num_heads", num_heads)
    if X.shape[-1] % num_heads != 0:
        raise ValueError(f"{X.shape[-1]} features cannot be split into {num_heads} heads")
    return X.unflatten(-1, (num_heads, X.shape[-1] // num_heads)).movedim(-2, -3)


def concat_heads(X: Tensor) -> Tensor:
    return X.movedim(-3, -2).flatten(-2)


def masked_softmax(scores: Tensor, valid_lens: Tensor | None = None) -> Tensor:
    if valid_lens is None:
        return F.softmax(scores, dim=-1)
    n_q, n_k = scores.shape[-2:]
    lens = torch.as_tensor(valid_lens, device=scores.device)
    if lens.dim() == 1:
        lens = lens.view(-1, *([1] * (scores.dim() - 1)))
    else:
        lens = lens.view(lens.shape[0], *([1] * (scores.dim() - 3)), n_q, 1)
    keep = torch.arange(n_k, device=scores.device) < lens
    out = F.softmax(scores.masked_fill(~keep, torch.finfo(scores.dtype).min), dim=-1)
    return out.masked_fill(~keep, 0.0)


def attention_pool(Q, K, V, valid_lens=None):
    sim = torch.einsum("...id,...jd->...ij", Q, K) / math.sqrt(Q.shape[-1])
    attn = masked_softmax(sim, valid_lens)
    return torch.einsum("...ij,...jd->...id", attn, V), attn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        d_total = d_model if d_total is None else d_total
        _, self.head_dim = head_weight_shape(d_model, d_total, num_heads)
        self.num_heads = num_heads
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    @staticmethod
    def _proj(layer, X):
        Y = torch.einsum("bnd,ed->bne", X, layer.weight)
        return Y if layer.bias is None else Y + layer.bias

    def forward(self, queries, keys, values, valid_lens=None):
        q = split_heads(self._proj(self.W_q, queries), self.num_heads)
        k = split_heads(self._proj(self.W_k, keys), self.num_heads)
        v = split_heads(self._proj(self.W_v, values), self.num_heads)
        sim = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(self.head_dim)
        attn = masked_softmax(sim, valid_lens)
        self.attention_weights = attn
        out = torch.einsum("bhij,bhjd->bhid", self.dropout(attn), v)
        return self.W_o(concat_heads(out))
