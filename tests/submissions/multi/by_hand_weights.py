# CODES: proj.transposed-weight, proj.heads-no-permute, mask.wrong-axis
# STYLE: lecture-notes row-vector style: X @ W by hand with the nn.Linear weights, one fused matmul in project_heads
"""Projections written by hand in the row-vector form with nn.Linear's (out, in) weight used as
(in, out); project_heads fuses the heads and reshapes without moving the head axis; the length
mask blanks query rows instead of keys."""
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
    h, d, p = W_heads.shape
    W_all = W_heads.permute(1, 0, 2).reshape(d, h * p)          # (d, h*p), head j in block j
    Y = H @ W_all                                                 # (batch, n, h*p)
    return Y.reshape(H.shape[0], h, H.shape[1], p)


def split_heads(X: Tensor, num_heads: int) -> Tensor:
    _positive("num_heads", num_heads)
    if X.shape[-1] % num_heads != 0:
        raise ValueError(f"{X.shape[-1]} features cannot be split into {num_heads} heads")
    return X.unflatten(-1, (num_heads, -1)).transpose(-3, -2)


def concat_heads(X: Tensor) -> Tensor:
    return X.transpose(-3, -2).flatten(-2)


def masked_softmax(scores: Tensor, valid_lens: Tensor | None = None) -> Tensor:
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    n_q, n_k = scores.shape[-2:]
    lens = torch.as_tensor(valid_lens, device=scores.device)
    if lens.dim() == 1:
        lens = lens.view(-1, *([1] * (scores.dim() - 1)))
    else:
        lens = lens.view(lens.shape[0], *([1] * (scores.dim() - 3)), n_q, 1)
    rows = torch.arange(n_q, device=scores.device).unsqueeze(-1)   # (n_q, 1)
    keep = (rows < lens).expand(scores.shape)
    weights = torch.softmax(scores, dim=-1)
    return weights.masked_fill(~keep, 0.0)


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
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    @staticmethod
    def _linear(X, layer):
        Y = project(X, layer.weight)
        return Y if layer.bias is None else Y + layer.bias

    def forward(self, queries, keys, values, valid_lens=None):
        Q = split_heads(self._linear(queries, self.W_q), self.num_heads)
        K = split_heads(self._linear(keys, self.W_k), self.num_heads)
        V = split_heads(self._linear(values, self.W_v), self.num_heads)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.head_dim)
        weights = masked_softmax(scores, valid_lens)
        self.attention_weights = weights
        return self.W_o(concat_heads(self.dropout(weights) @ V))
