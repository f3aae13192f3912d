# CODES: mask.repeat-not-interleave, proj.qkv-aliased, shape.no-valueerror, pool.softmax-wrong-axis
# STYLE: D2L (d2l-ai/d2l-en) MultiHeadAttention: heads folded into the batch, (batch*heads, n, p) bmm, valid_lens repeated per head
"""D2L's MHA with the heads folded into the batch axis: the lengths copied per head with
.repeat (not repeat_interleave), one Linear for W_q, W_k and W_v (chained assignment), asserts
for the head count, and a softmax over dim=1."""
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
    assert X.shape[-1] % num_heads == 0, "num_hiddens must be divisible by num_heads"
    X = X.reshape(X.shape[0], X.shape[1], num_heads, -1)
    return X.permute(0, 2, 1, 3)


def concat_heads(X: Tensor) -> Tensor:
    X = X.permute(0, 2, 1, 3)
    return X.reshape(X.shape[0], X.shape[1], -1)


def masked_softmax(X, valid_lens=None):
    if valid_lens is None:
        return nn.functional.softmax(X, dim=1)
    shape = X.shape
    valid_lens = torch.as_tensor(valid_lens, device=X.device)
    if valid_lens.dim() == 1:
        rows = shape[:-1].numel() // shape[0]
        valid_lens = torch.repeat_interleave(valid_lens, rows)
    else:
        per = valid_lens.reshape(shape[0], *([1] * (len(shape) - 3)), shape[-2])
        valid_lens = per.expand(shape[:-1]).reshape(-1)
    X = X.reshape(-1, shape[-1])
    keep = torch.arange(shape[-1], device=X.device)[None, :] < valid_lens[:, None]
    X = X.masked_fill(~keep, torch.finfo(X.dtype).min)
    weights = nn.functional.softmax(X.reshape(shape), dim=1)
    return weights.masked_fill(~keep.reshape(shape), 0.0)


def attention_pool(Q, K, V, valid_lens=None):
    scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(Q.shape[-1])
    weights = masked_softmax(scores, valid_lens)
    return torch.matmul(weights, V), weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        num_hiddens = d_model if d_total is None else d_total
        assert num_hiddens % num_heads == 0, "num_hiddens must be divisible by num_heads"
        self.num_heads = num_heads
        self.W_q = self.W_k = self.W_v = nn.Linear(d_model, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def transpose_qkv(self, X):
        X = X.reshape(X.shape[0], X.shape[1], self.num_heads, -1)
        X = X.permute(0, 2, 1, 3)
        return X.reshape(-1, X.shape[2], X.shape[3])          # (batch*heads, n, p)

    def forward(self, queries, keys, values, valid_lens=None):
        batch = queries.shape[0]
        queries = self.transpose_qkv(self.W_q(queries))
        keys = self.transpose_qkv(self.W_k(keys))
        values = self.transpose_qkv(self.W_v(values))
        if valid_lens is not None:
            valid_lens = torch.as_tensor(valid_lens, device=queries.device)
            valid_lens = valid_lens.repeat(self.num_heads, *([1] * (valid_lens.dim() - 1)))
        d = queries.shape[-1]
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
        weights = masked_softmax(scores, valid_lens)
        self.attention_weights = weights.reshape(batch, self.num_heads, *weights.shape[1:])
        output = torch.bmm(self.dropout(weights), values)
        output = output.reshape(batch, self.num_heads, *output.shape[1:])
        return self.W_o(concat_heads(output))
