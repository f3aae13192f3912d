# CODES: cost.python-loop-over-heads, shape.head-weight-full-width, shape.no-valueerror
# STYLE: CS231n/course-notes style: asserts for the head count, a per-head Python loop in forward
"""A course-notes MHA: head_weight_shape returns the full width and checks with assert,
split_heads and the module assert too, and forward pools the heads one at a time."""
from __future__ import annotations

import copy
import math
import numbers

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def head_weight_shape(d: int, d_total: int, num_heads: int) -> tuple[int, int]:
    assert d > 0 and d_total > 0 and num_heads > 0, "sizes must be positive"
    assert d_total % num_heads == 0, "d_total must be divisible by num_heads"
    return (d, d_total)


def project(H: Tensor, W: Tensor) -> Tensor:
    return H @ W


def project_heads(H: Tensor, W_heads: Tensor) -> Tensor:
    return torch.matmul(H.unsqueeze(1), W_heads)


def split_heads(X: Tensor, num_heads: int) -> Tensor:
    assert X.shape[-1] % num_heads == 0
    N, S, D = X.shape
    return X.reshape(N, S, num_heads, D // num_heads).transpose(1, 2)


def concat_heads(X: Tensor) -> Tensor:
    N, H, S, Dh = X.shape
    return X.transpose(1, 2).reshape(N, S, H * Dh)


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
        assert d_total % num_heads == 0, "d_total must be divisible by num_heads"
        self.num_heads = num_heads
        self.head_dim = d_total // num_heads
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        Q = split_heads(self.W_q(queries), self.num_heads)
        K = split_heads(self.W_k(keys), self.num_heads)
        V = split_heads(self.W_v(values), self.num_heads)
        outputs, weights = [], []
        for h in range(self.num_heads):
            scores = Q[:, h] @ K[:, h].transpose(-2, -1) / math.sqrt(self.head_dim)
            w = masked_softmax(scores, valid_lens)
            weights.append(w)
            outputs.append(self.drop(w) @ V[:, h])
        self.attention_weights = torch.stack(weights, dim=1)
        return self.W_o(concat_heads(torch.stack(outputs, dim=1)))
