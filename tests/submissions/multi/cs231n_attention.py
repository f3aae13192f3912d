# CODES: mask.zero-len-nan, pool.transpose-wrong-axes, pool.scale-d-model
# STYLE: CS231n assignment solution (MultiHeadAttention with self.key/self.query, view+transpose, masked_fill(-inf))
"""CS231n-style: the mask filled with -inf (empty rows become NaN), attention_pool written for
3-D (N, S, E) tensors with key.transpose(1, 2), and forward scaling by sqrt(embed_dim)."""
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
    return H @ W


def project_heads(H: Tensor, W_heads: Tensor) -> Tensor:
    return torch.matmul(H.unsqueeze(1), W_heads)


def split_heads(X: Tensor, num_heads: int) -> Tensor:
    _positive("num_heads", num_heads)
    if X.shape[-1] % num_heads != 0:
        raise ValueError(f"{X.shape[-1]} features cannot be split into {num_heads} heads")
    N, S, E = X.shape
    return X.reshape(N, S, num_heads, E // num_heads).transpose(1, 2)


def concat_heads(X: Tensor) -> Tensor:
    N, H, S, E_h = X.shape
    return X.transpose(1, 2).reshape(N, S, H * E_h)


def masked_softmax(scores: Tensor, valid_lens: Tensor | None = None) -> Tensor:
    if valid_lens is None:
        return F.softmax(scores, dim=-1)
    T = scores.shape[-1]
    lens = torch.as_tensor(valid_lens, device=scores.device)
    if lens.dim() == 1:
        lens = lens.view(-1, *([1] * (scores.dim() - 1)))
    else:
        lens = lens.view(lens.shape[0], *([1] * (scores.dim() - 3)), scores.shape[-2], 1)
    attn_mask = torch.arange(T, device=scores.device) < lens
    scores = scores.masked_fill(attn_mask == 0, float("-inf"))
    return F.softmax(scores, dim=-1)


def attention_pool(Q, K, V, valid_lens=None):
    E = Q.shape[-1]
    scores = torch.matmul(Q, K.transpose(1, 2)) / math.sqrt(E)
    attn = masked_softmax(scores, valid_lens)
    return torch.matmul(attn, V), attn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        d_total = d_model if d_total is None else d_total
        _, self.head_dim = head_weight_shape(d_model, d_total, num_heads)
        self.n_head = num_heads
        self.emd_dim = d_total
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.attn_drop = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, query, key, value, valid_lens=None):
        N, S, E = query.shape
        N, T, E = value.shape
        H = self.n_head
        q = self.W_q(query).view(N, S, H, -1).transpose(1, 2)
        k = self.W_k(key).view(N, T, H, -1).transpose(1, 2)
        v = self.W_v(value).view(N, T, H, -1).transpose(1, 2)
        dot = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.emd_dim)
        attn = masked_softmax(dot, valid_lens)
        self.attention_weights = attn
        y = torch.matmul(self.attn_drop(attn), v)
        output = y.transpose(1, 2).reshape(N, S, -1)
        return self.W_o(output)
