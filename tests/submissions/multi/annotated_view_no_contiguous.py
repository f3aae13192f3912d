# CODES: concat.view-noncontiguous, mask.after-softmax, module.missing-out-proj
# STYLE: The Annotated Transformer (harvardnlp): self.linears, x.transpose(1, 2).view(...) without .contiguous()
"""The Annotated Transformer's MHA with .contiguous() left out of the concat, the padding masked
after the softmax (no renormalisation), and the last linear never applied."""
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
    return X.reshape(X.size(0), -1, num_heads, X.size(-1) // num_heads).transpose(1, 2)


def concat_heads(X: Tensor) -> Tensor:
    nbatches, h, _, d_k = X.shape
    return X.transpose(1, 2).view(nbatches, -1, h * d_k)


def masked_softmax(scores: Tensor, valid_lens: Tensor | None = None) -> Tensor:
    p_attn = scores.softmax(dim=-1)
    if valid_lens is None:
        return p_attn
    n_q, n_k = scores.shape[-2:]
    lens = torch.as_tensor(valid_lens, device=scores.device)
    if lens.dim() == 1:
        lens = lens.view(-1, *([1] * (scores.dim() - 1)))
    else:
        lens = lens.view(lens.shape[0], *([1] * (scores.dim() - 3)), n_q, 1)
    mask = torch.arange(n_k, device=scores.device) < lens
    return p_attn.masked_fill(mask == 0, 0)


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
        self.linears = nn.ModuleList([self.W_q, self.W_k, self.W_v, self.W_o])
        self.dropout = nn.Dropout(p=dropout)
        self.attention_weights = None

    def forward(self, query, key, value, valid_lens=None):
        query, key, value = [split_heads(lin(x), self.num_heads)
                             for lin, x in zip(self.linears, (query, key, value))]
        d_k = query.size(-1)
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
        self.attention_weights = masked_softmax(scores, valid_lens)
        x = torch.matmul(self.dropout(self.attention_weights), value)
        return concat_heads(x)
