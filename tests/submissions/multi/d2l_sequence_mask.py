# CODES: mask.zero-len-uniform, mask.fp16-overflow, api.mutates-input
# STYLE: D2L (d2l-ai/d2l-en): sequence_mask + masked_softmax with value=-1e6, transpose_qkv / transpose_output
"""D2L's masked_softmax as printed: X[~mask] = -1e6 written into a view of the caller's scores."""
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


def transpose_qkv(X, num_heads):
    _positive("num_heads", num_heads)
    if X.shape[-1] % num_heads != 0:
        raise ValueError(f"{X.shape[-1]} features cannot be split into {num_heads} heads")
    X = X.reshape(X.shape[0], X.shape[1], num_heads, -1)
    return X.permute(0, 2, 1, 3)


def split_heads(X: Tensor, num_heads: int) -> Tensor:
    return transpose_qkv(X, num_heads)


def concat_heads(X: Tensor) -> Tensor:
    X = X.permute(0, 2, 1, 3)
    return X.reshape(X.shape[0], X.shape[1], -1)


def sequence_mask(X, valid_len, value=0):
    maxlen = X.size(1)
    mask = torch.arange((maxlen), dtype=torch.float32, device=X.device)[None, :] < valid_len[:, None]
    X[~mask] = value
    return X


def masked_softmax(scores: Tensor, valid_lens: Tensor | None = None) -> Tensor:
    if valid_lens is None:
        return nn.functional.softmax(scores, dim=-1)
    shape = scores.shape
    valid_lens = torch.as_tensor(valid_lens, device=scores.device)
    if valid_lens.dim() == 1:
        rows = shape[:-1].numel() // shape[0]
        valid_lens = torch.repeat_interleave(valid_lens, rows)
    else:
        per = valid_lens.reshape(shape[0], *([1] * (len(shape) - 3)), shape[-2])
        valid_lens = per.expand(shape[:-1]).reshape(-1)
    # On the last axis, replace masked elements with a very large negative value
    X = sequence_mask(scores.reshape(-1, shape[-1]), valid_lens, value=-1e6)
    return nn.functional.softmax(X.reshape(shape), dim=-1)


class DotProductAttention(nn.Module):
    def __init__(self, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens=None):
        d = queries.shape[-1]
        scores = torch.matmul(queries, keys.transpose(-2, -1)) / math.sqrt(d)
        self.attention_weights = masked_softmax(scores, valid_lens)
        return torch.matmul(self.dropout(self.attention_weights), values)


def attention_pool(Q, K, V, valid_lens=None):
    scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(Q.shape[-1])
    weights = masked_softmax(scores, valid_lens)
    return torch.matmul(weights, V), weights


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
        self.attention = DotProductAttention(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        queries = transpose_qkv(self.W_q(queries), self.num_heads)
        keys = transpose_qkv(self.W_k(keys), self.num_heads)
        values = transpose_qkv(self.W_v(values), self.num_heads)
        output = self.attention(queries, keys, values, valid_lens)
        self.attention_weights = self.attention.attention_weights
        return self.W_o(concat_heads(output))
