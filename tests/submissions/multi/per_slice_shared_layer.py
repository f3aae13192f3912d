# CODES: heads.shared-weights, mask.repeat-not-interleave
# STYLE: per-slice heads (Kyubyong/transformer-like tutorials): one small Linear applied to each head's slice of the input; D2L-like flattened masked_softmax
"""Each head projects its own slice of the input with ONE shared (d_model/h -> p) layer, and
masked_softmax expands the lengths with .repeat where repeat_interleave is needed."""
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
    B, n, D = X.shape
    return X.reshape(B, n, num_heads, D // num_heads).transpose(1, 2)


def concat_heads(X: Tensor) -> Tensor:
    B, h, n, p = X.shape
    return X.transpose(1, 2).reshape(B, n, h * p)


def masked_softmax(scores: Tensor, valid_lens: Tensor | None = None) -> Tensor:
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    shape = scores.shape
    lens = torch.as_tensor(valid_lens, device=scores.device)
    if lens.dim() == 1:
        lens = lens.repeat(shape[:-1].numel() // shape[0])       # one length per row
    else:
        per = lens.reshape(shape[0], *([1] * (len(shape) - 3)), shape[-2])
        lens = per.expand(shape[:-1]).reshape(-1)
    X = scores.reshape(-1, shape[-1])
    keep = torch.arange(shape[-1], device=scores.device)[None, :] < lens[:, None]
    X = torch.softmax(X.masked_fill(~keep, torch.finfo(X.dtype).min), dim=-1)
    return X.masked_fill(~keep, 0.0).reshape(shape)


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
        width = d_model // num_heads
        self.W_q = nn.Linear(width, self.head_dim, bias=bias)   # shared by every head's slice
        self.W_k = nn.Linear(width, self.head_dim, bias=bias)
        self.W_v = nn.Linear(width, self.head_dim, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        h = self.num_heads
        Q = self.W_q(split_heads(queries, h))
        K = self.W_k(split_heads(keys, h))
        V = self.W_v(split_heads(values, h))
        out, self.attention_weights = attention_pool(Q, K, V, valid_lens)
        weights = self.attention_weights
        out = self.dropout(weights) @ V
        return self.W_o(concat_heads(out))
