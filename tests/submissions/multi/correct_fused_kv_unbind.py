# CODES: 
# STYLE: timm cross-attention style: fused kv projection, reshape/permute/unbind(0)
"""CORRECT: keys and values projected in one batched matmul (timm's fused kv), split with
reshape/permute and taken apart with unbind(0)."""
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
    B, N, C = X.shape
    return X.reshape(B, N, num_heads, C // num_heads).permute(0, 2, 1, 3)


def concat_heads(X: Tensor) -> Tensor:
    B, H, N, D = X.shape
    return X.transpose(1, 2).reshape(B, N, H * D)


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
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    weights = masked_softmax(scores, valid_lens)
    return weights @ V, weights


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
        self.scale = self.head_dim ** -0.5
        self.attn_drop = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        B, N, _ = queries.shape
        M = keys.shape[1]
        q = self.W_q(queries).reshape(B, N, self.num_heads, self.head_dim).permute(0, 2, 1, 3)
        w_kv = torch.stack([self.W_k.weight, self.W_v.weight])             # (2, C, d)
        kv = torch.stack([keys, values]) @ w_kv.transpose(-2, -1).unsqueeze(1)  # (2, B, M, C)
        if self.W_k.bias is not None:
            kv = kv + torch.stack([self.W_k.bias, self.W_v.bias])[:, None, None, :]
        kv = kv.reshape(2, B, M, self.num_heads, self.head_dim).permute(0, 1, 3, 2, 4)
        k, v = kv.unbind(0)
        attn = masked_softmax((q @ k.transpose(-2, -1)) * self.scale, valid_lens)
        self.attention_weights = attn
        x = (self.attn_drop(attn) @ v).transpose(1, 2).reshape(B, N, -1)
        return self.W_o(x)
