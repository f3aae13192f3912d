# CODES: 
# STYLE: Annotated Transformer style done right: .contiguous().view(...).transpose(1, 2), clones-free
"""CORRECT: Annotated-Transformer-style .view calls, each on a contiguous tensor."""
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
    nbatches, d_k = X.size(0), X.size(-1) // num_heads
    return X.contiguous().view(nbatches, -1, num_heads, d_k).transpose(1, 2)


def concat_heads(X: Tensor) -> Tensor:
    nbatches, h, _, d_k = X.shape
    return X.transpose(1, 2).contiguous().view(nbatches, -1, h * d_k)


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


def attention_pool(query, key, value, valid_lens=None):
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    p_attn = masked_softmax(scores, valid_lens)
    return torch.matmul(p_attn, value), p_attn


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
        self.linears = nn.ModuleList([self.W_q, self.W_k, self.W_v])
        self.dropout = nn.Dropout(p=dropout)
        self.attention_weights = None

    def forward(self, query, key, value, valid_lens=None):
        nbatches = query.size(0)
        query, key, value = [lin(x).view(nbatches, -1, self.num_heads, self.head_dim).transpose(1, 2)
                             for lin, x in zip(self.linears, (query, key, value))]
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(self.head_dim)
        p_attn = masked_softmax(scores, valid_lens)
        self.attention_weights = p_attn
        x = torch.matmul(self.dropout(p_attn), value)
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.num_heads * self.head_dim)
        return self.W_o(x)
