"""Correct: explicit per-role parameters through nn.Linear, F.linear and unflatten/flatten."""
import math

import torch
import torch.nn.functional as F
from torch import nn


def head_weight_shape(d, d_total, num_heads):
    if d <= 0 or d_total <= 0 or num_heads <= 0 or d_total % num_heads:
        raise ValueError(f"impossible: d={d}, d_total={d_total}, num_heads={num_heads}")
    return d, d_total // num_heads


def project(H, W):
    return F.linear(H, W.T)


def project_heads(H, W_heads):
    return torch.matmul(H[:, None], W_heads)


def split_heads(X, num_heads):
    if X.size(-1) % num_heads:
        raise ValueError("last axis not divisible by num_heads")
    return X.unflatten(-1, (num_heads, -1)).movedim(-2, -3)


def concat_heads(X):
    return X.movedim(-3, -2).flatten(-2)


def masked_softmax(scores, valid_lens=None):
    if valid_lens is None:
        return F.softmax(scores, dim=-1)
    n_k = scores.size(-1)
    lens = valid_lens
    while lens.dim() < scores.dim() - 1:
        lens = lens.unsqueeze(1 if valid_lens.dim() == 2 else -1)
    if valid_lens.dim() == 1:
        lens = lens.reshape(lens.shape[0], *([1] * (scores.dim() - 2)))
    mask = torch.arange(n_k, device=scores.device).expand(scores.shape) >= lens.unsqueeze(-1)
    filled = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
    return F.softmax(filled, dim=-1).masked_fill(mask, 0)


def attention_pool(Q, K, V, valid_lens=None):
    A = masked_softmax(Q @ K.mT * (1.0 / math.sqrt(Q.size(-1))), valid_lens)
    return A @ V, A


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        d_total = d_total if d_total is not None else d_model
        head_weight_shape(d_model, d_total, num_heads)
        self.heads = num_heads
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.attn_drop = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        q = split_heads(F.linear(queries, self.W_q.weight, self.W_q.bias), self.heads)
        k = split_heads(F.linear(keys, self.W_k.weight, self.W_k.bias), self.heads)
        v = split_heads(F.linear(values, self.W_v.weight, self.W_v.bias), self.heads)
        out, self.attention_weights = attention_pool(q, k, v, valid_lens)
        if self.training and self.attn_drop.p > 0:
            out = self.attn_drop(self.attention_weights) @ v
        return self.W_o(concat_heads(out))
