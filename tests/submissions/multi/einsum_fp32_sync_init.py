# CODES: dtype.forces-float32, device.host-sync, heads.identical-init
# STYLE: lucidrains-style einsum attention: 'b h i d, b h j d -> b h i j', softmax(dtype=torch.float32), head blocks copied at init
"""einsum attention whose softmax is forced to float32, whose forward skips the mask with a
Python branch on the lengths, and whose head blocks all start as a copy of block 0."""
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
        return scores.softmax(dim=-1, dtype=torch.float32).to(scores.dtype)
    n_q, n_k = scores.shape[-2:]
    lens = torch.as_tensor(valid_lens, device=scores.device)
    if lens.dim() == 1:
        lens = lens.view(-1, *([1] * (scores.dim() - 1)))
    else:
        lens = lens.view(lens.shape[0], *([1] * (scores.dim() - 3)), n_q, 1)
    keep = torch.arange(n_k, device=scores.device) < lens
    filled = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    attn = filled.softmax(dim=-1, dtype=torch.float32).to(scores.dtype)
    return attn.masked_fill(~keep, 0.0)


def attention_pool(Q, K, V, valid_lens=None):
    sim = torch.einsum("...id,...jd->...ij", Q, K) * Q.shape[-1] ** -0.5
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
        with torch.no_grad():                        # "start every head from the same point"
            for layer in (self.W_q, self.W_k, self.W_v):
                blocks = layer.weight.view(num_heads, self.head_dim, d_model)
                blocks[1:] = blocks[0]
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        q, k, v = (split_heads(layer(x), self.num_heads)
                   for layer, x in ((self.W_q, queries), (self.W_k, keys), (self.W_v, values)))
        sim = torch.einsum("b h i d, b h j d -> b h i j", q, k) * self.head_dim ** -0.5
        if valid_lens is not None and bool((torch.as_tensor(valid_lens) < sim.shape[-1]).any()):
            attn = masked_softmax(sim, valid_lens)
        else:
            attn = masked_softmax(sim)
        self.attention_weights = attn
        out = torch.einsum("b h i j, b h j d -> b h i d", self.dropout(attn), v)
        return self.W_o(concat_heads(out))
