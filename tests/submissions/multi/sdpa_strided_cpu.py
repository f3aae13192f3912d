# CODES: api.forbidden-sdpa, split.wrong-head-order, device.hardcoded-cpu
# STYLE: PyTorch-2 tutorial style: F.scaled_dot_product_attention, rearrange-like '(p h)' split, torch.arange(n_k)
"""Forward hands the pooling to F.scaled_dot_product_attention, split_heads factors the features
as (p, h) (head j gets the strided columns), and the key positions are made on the CPU."""
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
    return X.reshape(B, n, D // num_heads, num_heads).permute(0, 3, 1, 2)


def concat_heads(X: Tensor) -> Tensor:
    B, h, n, p = X.shape
    return X.permute(0, 2, 1, 3).reshape(B, n, h * p)


def masked_softmax(scores: Tensor, valid_lens: Tensor | None = None) -> Tensor:
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    n_q, n_k = scores.shape[-2:]
    lens = torch.as_tensor(valid_lens)
    if lens.dim() == 1:
        lens = lens.view(-1, *([1] * (scores.dim() - 1)))
    else:
        lens = lens.view(lens.shape[0], *([1] * (scores.dim() - 3)), n_q, 1)
    keep = torch.arange(n_k) < lens
    out = torch.softmax(scores.masked_fill(~keep, torch.finfo(scores.dtype).min), dim=-1)
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
        self.p = dropout
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        Q = split_heads(self.W_q(queries), self.num_heads)
        K = split_heads(self.W_k(keys), self.num_heads)
        V = split_heads(self.W_v(values), self.num_heads)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.head_dim)
        weights = masked_softmax(scores, valid_lens)
        self.attention_weights = weights
        out = F.scaled_dot_product_attention(Q, K, V, attn_mask=weights > 0,
                                             dropout_p=self.p if self.training else 0.0)
        out = torch.nan_to_num(out) * (weights.sum(-1, keepdim=True) > 0)
        return self.W_o(concat_heads(out))
