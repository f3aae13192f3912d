# CODES:
# STYLE: functional core + thin module; torch.where masking; heads built with X.split(p, -1) + torch.stack and rejoined with torch.cat(X.unbind(1), -1)
"""Multi-head attention, functional style.

Everything numeric lives in pure functions; the nn.Module only owns the parameters and
remembers the last attention weights.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _positive(**sizes: int) -> None:
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")


def head_weight_shape(d: int, d_total: int, num_heads: int) -> tuple[int, int]:
    _positive(d=d, d_total=d_total, num_heads=num_heads)
    width, rest = divmod(d_total, num_heads)
    if rest:
        raise ValueError(f"d_total={d_total} leaves a remainder of {rest} over num_heads={num_heads}")
    return (d, width)


def project(H: Tensor, W: Tensor) -> Tensor:
    return torch.matmul(H, W)


def project_heads(H: Tensor, W_heads: Tensor) -> Tensor:
    return torch.matmul(H.unsqueeze(-3), W_heads)


def split_heads(X: Tensor, num_heads: int) -> Tensor:
    _positive(num_heads=num_heads)
    width, rest = divmod(X.shape[-1], num_heads)
    if rest:
        raise ValueError(f"{X.shape[-1]} features cannot be shared by {num_heads} heads")
    # one (b, n, p) block per head, stacked on a new head axis
    return torch.stack(X.split(width, dim=-1), dim=1)


def concat_heads(X: Tensor) -> Tensor:
    return torch.cat(X.unbind(dim=1), dim=-1)


def _key_mask(scores: Tensor, valid_lens: Tensor) -> Tensor:
    n_q, n_k = scores.shape[-2:]
    lens = valid_lens.to(scores.device)
    middle = [1] * (scores.dim() - 3)
    lens = lens.view(-1, *middle, 1, 1) if lens.dim() == 1 else lens.view(-1, *middle, n_q, 1)
    return torch.arange(n_k, device=scores.device) < lens


def masked_softmax(scores: Tensor, valid_lens: Tensor | None = None) -> Tensor:
    if valid_lens is None:
        return F.softmax(scores, dim=-1)
    keep = _key_mask(scores, valid_lens)
    weights = F.softmax(torch.where(keep, scores, torch.finfo(scores.dtype).min), dim=-1)
    return torch.where(keep, weights, 0.0)


def attention_pool(Q: Tensor, K: Tensor, V: Tensor,
                   valid_lens: Tensor | None = None) -> tuple[Tensor, Tensor]:
    scores = torch.matmul(Q, K.transpose(-1, -2)) / math.sqrt(Q.shape[-1])
    weights = masked_softmax(scores, valid_lens)
    return torch.matmul(weights, V), weights


def multi_head_attention(q: Tensor, k: Tensor, v: Tensor, layers: tuple[nn.Linear, ...],
                         num_heads: int, valid_lens: Tensor | None, dropout: float,
                         training: bool) -> tuple[Tensor, Tensor]:
    W_q, W_k, W_v, W_o = layers
    Q = split_heads(W_q(q), num_heads)
    K = split_heads(W_k(k), num_heads)
    V = split_heads(W_v(v), num_heads)
    scores = torch.matmul(Q, K.transpose(-1, -2)) / math.sqrt(Q.shape[-1])
    weights = masked_softmax(scores, valid_lens)
    pooled = torch.matmul(F.dropout(weights, dropout, training=training), V)
    return W_o(concat_heads(pooled)), weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int, *, d_total: int | None = None,
                 bias: bool = False, dropout: float = 0.0):
        super().__init__()
        d_total = d_model if d_total is None else d_total
        head_weight_shape(d_model, d_total, num_heads)
        self.num_heads = num_heads
        self.dropout = dropout
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.attention_weights: Tensor | None = None

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor,
                valid_lens: Tensor | None = None) -> Tensor:
        out, self.attention_weights = multi_head_attention(
            queries, keys, values, (self.W_q, self.W_k, self.W_v, self.W_o),
            self.num_heads, valid_lens, self.dropout, self.training)
        return out
