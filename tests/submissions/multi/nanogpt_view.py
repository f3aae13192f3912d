# CODES: split.no-transpose, mask.zero-len-nan, module.dropout-in-eval
# STYLE: nanoGPT (karpathy) CausalSelfAttention: .view(B, T, nh, hs).transpose(1, 2), masked_fill(-inf), F.dropout
"""nanoGPT's attention: split_heads views (B, T, C) straight as (B, nh, T, hs), the padding is
filled with -inf (empty rows NaN), and the attention dropout ignores self.training."""
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
    B, T, C = X.size()
    return X.view(B, num_heads, T, C // num_heads)


def concat_heads(X: Tensor) -> Tensor:
    B, nh, T, hs = X.size()
    return X.transpose(1, 2).contiguous().view(B, T, nh * hs)


def masked_softmax(scores: Tensor, valid_lens: Tensor | None = None) -> Tensor:
    att = scores
    if valid_lens is not None:
        T_q, T = scores.shape[-2:]
        lens = torch.as_tensor(valid_lens, device=scores.device)
        if lens.dim() == 1:
            lens = lens.view(-1, *([1] * (scores.dim() - 1)))
        else:
            lens = lens.view(lens.shape[0], *([1] * (scores.dim() - 3)), T_q, 1)
        att = att.masked_fill(torch.arange(T, device=scores.device) >= lens, float("-inf"))
    return F.softmax(att, dim=-1)


def attention_pool(q, k, v, valid_lens=None):
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    att = masked_softmax(att, valid_lens)
    return att @ v, att


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
        self.n_head = num_heads
        self.dropout = dropout
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        q = split_heads(self.W_q(queries), self.n_head)
        k = split_heads(self.W_k(keys), self.n_head)
        v = split_heads(self.W_v(values), self.n_head)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = masked_softmax(att, valid_lens)
        self.attention_weights = att
        y = F.dropout(att, p=self.dropout) @ v
        return self.W_o(concat_heads(y))
