# CODES: proj.ignores-bias, split.wrong-head-order
# STYLE: by-hand torch.nn.functional.linear on the layers' .weight, unflatten/flatten helpers, heads factored (p, h)
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def head_weight_shape(d: int, d_total: int, num_heads: int) -> tuple[int, int]:
    if d <= 0 or d_total <= 0 or num_heads <= 0:
        raise ValueError(f"sizes must be positive: d={d}, d_total={d_total}, num_heads={num_heads}")
    if d_total % num_heads:
        raise ValueError(f"{d_total} columns do not split into {num_heads} equal heads")
    return d, d_total // num_heads


def project(H: Tensor, W: Tensor) -> Tensor:
    # F.linear wants (out, in), so hand it W^T
    return F.linear(H, W.transpose(0, 1))


def project_heads(H: Tensor, W_heads: Tensor) -> Tensor:
    return torch.matmul(H.unsqueeze(1), W_heads)


def split_heads(X: Tensor, num_heads: int) -> Tensor:
    if num_heads <= 0 or X.size(-1) % num_heads:
        raise ValueError(f"last axis ({X.size(-1)}) is not divisible by num_heads={num_heads}")
    head_dim = X.size(-1) // num_heads
    # (b, n, h*p) -> (b, n, p, h) -> (b, h, n, p)
    return X.unflatten(-1, (head_dim, num_heads)).permute(0, 3, 1, 2)


def concat_heads(X: Tensor) -> Tensor:
    # exact inverse of split_heads: (b, h, n, p) -> (b, n, p, h) -> (b, n, p*h)
    return X.permute(0, 2, 3, 1).flatten(-2)


def masked_softmax(scores: Tensor, valid_lens: Optional[Tensor] = None) -> Tensor:
    if valid_lens is None:
        return F.softmax(scores, dim=-1)
    n_q, n_k = scores.shape[-2:]
    lens = valid_lens.to(device=scores.device)
    lens = lens.view(lens.size(0), *([1] * (scores.dim() - lens.dim() - 1)), *lens.shape[1:], 1)
    keep = torch.arange(n_k, device=scores.device) < lens
    filled = scores.masked_fill(keep.logical_not(), torch.finfo(scores.dtype).min)
    return F.softmax(filled, dim=-1).masked_fill(keep.logical_not(), 0.0)


def attention_pool(Q: Tensor, K: Tensor, V: Tensor,
                   valid_lens: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    logits = torch.matmul(Q, K.transpose(-1, -2)) / math.sqrt(Q.size(-1))
    attn = masked_softmax(logits, valid_lens)
    return torch.matmul(attn, V), attn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int, *, d_total: Optional[int] = None,
                 bias: bool = False, dropout: float = 0.0):
        super().__init__()
        d_total = d_total or d_model
        _, self.head_dim = head_weight_shape(d_model, d_total, num_heads)
        self.num_heads = num_heads
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.p_drop = dropout
        self.attention_weights: Optional[Tensor] = None

    def _in(self, x: Tensor, layer: nn.Linear) -> Tensor:
        return split_heads(F.linear(x, layer.weight), self.num_heads)

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor,
                valid_lens: Optional[Tensor] = None) -> Tensor:
        q = self._in(queries, self.W_q)
        k = self._in(keys, self.W_k)
        v = self._in(values, self.W_v)
        logits = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        attn = masked_softmax(logits, valid_lens)
        self.attention_weights = attn
        attn = F.dropout(attn, p=self.p_drop, training=self.training)
        out = concat_heads(torch.matmul(attn, v))
        return F.linear(out, self.W_o.weight)
