# CODES: mask.fp16-overflow, mask.zero-len-uniform, module.dropout-in-eval
# STYLE: The Annotated Transformer (harvardnlp): clones, attention(), .view(nbatches, -1, h, d_k).transpose(1, 2)
"""The Annotated Transformer's attention(): masked_fill(mask == 0, -1e9) and nothing done for
rows with no valid key; the attention dropout is F.dropout with its default training=True."""
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


def clones(module, N):
    "Produce N identical layers."
    return nn.ModuleList([copy.deepcopy(module) for _ in range(N)])


def split_heads(X: Tensor, num_heads: int) -> Tensor:
    _positive("num_heads", num_heads)
    if X.shape[-1] % num_heads != 0:
        raise ValueError(f"{X.shape[-1]} features cannot be split into {num_heads} heads")
    nbatches, d_k = X.size(0), X.size(-1) // num_heads
    return X.contiguous().view(nbatches, -1, num_heads, d_k).transpose(1, 2)


def concat_heads(X: Tensor) -> Tensor:
    nbatches, h, _, d_k = X.shape
    return X.transpose(1, 2).contiguous().view(nbatches, -1, h * d_k)


def _mask(scores, valid_lens):
    n_q, n_k = scores.shape[-2:]
    lens = torch.as_tensor(valid_lens, device=scores.device)
    if lens.dim() == 1:
        lens = lens.view(-1, *([1] * (scores.dim() - 1)))
    else:
        lens = lens.view(lens.shape[0], *([1] * (scores.dim() - 3)), n_q, 1)
    return torch.arange(n_k, device=scores.device) < lens


def masked_softmax(scores: Tensor, valid_lens: Tensor | None = None) -> Tensor:
    if valid_lens is not None:
        mask = _mask(scores, valid_lens)
        scores = scores.masked_fill(mask == 0, -1e9)
    return scores.softmax(dim=-1)


def attention(query, key, value, valid_lens=None, dropout=0.0):
    "Compute 'Scaled Dot Product Attention'"
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    p_attn = masked_softmax(scores, valid_lens)
    if dropout:
        return torch.matmul(F.dropout(p_attn, p=dropout), value), p_attn
    return torch.matmul(p_attn, value), p_attn


def attention_pool(Q, K, V, valid_lens=None):
    return attention(Q, K, V, valid_lens)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        d_total = d_model if d_total is None else d_total
        _, self.d_k = head_weight_shape(d_model, d_total, num_heads)
        self.h = num_heads
        self.W_q, self.W_k, self.W_v = clones(nn.Linear(d_model, d_total, bias=bias), 3)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.p = dropout
        self.attention_weights = None

    def forward(self, query, key, value, valid_lens=None):
        query, key, value = [split_heads(lin(x), self.h)
                             for lin, x in zip((self.W_q, self.W_k, self.W_v), (query, key, value))]
        x, self.attention_weights = attention(query, key, value, valid_lens, dropout=self.p)
        return self.W_o(concat_heads(x))
