"""Correct, D2L-style: heads flattened into the batch axis inside forward, view + permute."""
import math

import torch
from torch import nn


def head_weight_shape(d: int, d_total: int, num_heads: int):
    if d < 1 or d_total < 1 or num_heads < 1:
        raise ValueError("sizes must be positive")
    if d_total % num_heads != 0:
        raise ValueError(f"{d_total} is not divisible by {num_heads}")
    return (d, d_total // num_heads)


def project(H, W):
    return torch.matmul(H, W)


def project_heads(H, W_heads):
    h, d, p = W_heads.shape
    fused = H @ W_heads.permute(1, 0, 2).reshape(d, h * p)      # (b, n, h*p)
    return fused.view(H.shape[0], H.shape[1], h, p).permute(0, 2, 1, 3)


def split_heads(X, num_heads):
    b, n, w = X.shape
    if w % num_heads != 0:
        raise ValueError("not divisible")
    return X.view(b, n, num_heads, w // num_heads).permute(0, 2, 1, 3)


def concat_heads(X):
    b, h, n, p = X.shape
    return X.permute(0, 2, 1, 3).contiguous().view(b, n, h * p)


def masked_softmax(scores, valid_lens=None):
    if valid_lens is None:
        return nn.functional.softmax(scores, dim=-1)
    shape = scores.shape
    if valid_lens.dim() == 1:
        lens = torch.repeat_interleave(valid_lens, math.prod(shape[1:-1]))
    else:
        lens = valid_lens.reshape(shape[0], 1, shape[-2]).expand(
            shape[0], math.prod(shape[1:-2]) if len(shape) > 3 else 1, shape[-2]).reshape(-1)
    flat = scores.reshape(-1, shape[-1])
    mask = torch.arange(shape[-1], device=scores.device)[None, :] < lens[:, None]
    flat = flat.masked_fill(~mask, -65000.0 if scores.dtype == torch.float16 else -1e30)
    w = nn.functional.softmax(flat, dim=-1) * mask
    return w.reshape(shape)


def attention_pool(Q, K, V, valid_lens=None):
    d = Q.shape[-1]
    w = masked_softmax(torch.matmul(Q, K.transpose(-1, -2)) / math.sqrt(d), valid_lens)
    return torch.matmul(w, V), w


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        if d_total is None:
            d_total = d_model
        if d_total % num_heads:
            raise ValueError("d_total must be divisible by num_heads")
        self.num_heads = num_heads
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def _to_batch(self, X):                        # (b, n, h*p) -> (b*h, n, p)
        b, n, w = X.shape
        return X.reshape(b, n, self.num_heads, -1).permute(0, 2, 1, 3).reshape(b * self.num_heads, n, -1)

    def forward(self, queries, keys, values, valid_lens=None):
        b = queries.shape[0]
        Q, K, V = self._to_batch(self.W_q(queries)), self._to_batch(self.W_k(keys)), self._to_batch(self.W_v(values))
        if valid_lens is not None:
            valid_lens = torch.repeat_interleave(valid_lens, self.num_heads, dim=0)
        scores = torch.bmm(Q, K.transpose(1, 2)) / math.sqrt(Q.shape[-1])
        w = masked_softmax(scores, valid_lens)          # (b*h, n_q, n_k)
        self.attention_weights = w.reshape(b, self.num_heads, *w.shape[1:])
        out = torch.bmm(self.dropout(w), V)             # (b*h, n_q, p)
        out = out.reshape(b, self.num_heads, *out.shape[1:])
        return self.W_o(concat_heads(out))
