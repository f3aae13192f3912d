# CODES: heads.tiled-block, cost.extra-params, api.mutates-input
# STYLE: nanoGPT/timm-like module with a learned per-head gain tensor, weight[:p].repeat(h, 1), masked_fill_ on the scores
"""Every head uses block 0 of W_q/W_k/W_v (weight[:p].repeat(h, 1)), an unused per-head parameter
adds h*d_model*p parameters, and masked_softmax fills the caller's scores in place."""
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
    B, T, C = X.shape
    return X.reshape(B, T, num_heads, C // num_heads).transpose(1, 2)


def concat_heads(X: Tensor) -> Tensor:
    B, nh, T, hs = X.shape
    return X.transpose(1, 2).reshape(B, T, nh * hs)


def masked_softmax(scores: Tensor, valid_lens: Tensor | None = None) -> Tensor:
    if valid_lens is None:
        return F.softmax(scores, dim=-1)
    T_q, T = scores.shape[-2:]
    lens = torch.as_tensor(valid_lens, device=scores.device)
    if lens.dim() == 1:
        lens = lens.view(-1, *([1] * (scores.dim() - 1)))
    else:
        lens = lens.view(lens.shape[0], *([1] * (scores.dim() - 3)), T_q, 1)
    pad = torch.arange(T, device=scores.device) >= lens
    scores.masked_fill_(pad, torch.finfo(scores.dtype).min)
    return F.softmax(scores, dim=-1).masked_fill(pad, 0.0)


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
        self.head_gain = nn.Parameter(torch.ones(num_heads, d_model, self.head_dim))
        self.attn_dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def _heads(self, layer, x):
        p, h = self.head_dim, self.num_heads
        weight = layer.weight[:p].repeat(h, 1)
        bias = None if layer.bias is None else layer.bias[:p].repeat(h)
        return split_heads(F.linear(x, weight, bias), h)

    def forward(self, queries, keys, values, valid_lens=None):
        q = self._heads(self.W_q, queries)
        k = self._heads(self.W_k, keys)
        v = self._heads(self.W_v, values)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = masked_softmax(att, valid_lens)
        self.attention_weights = att
        y = self.attn_dropout(att) @ v
        return self.W_o(concat_heads(y))
