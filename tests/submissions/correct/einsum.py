"""Correct, written with einsum everywhere and torch.where for the mask."""
import math

import torch
from torch import nn


def head_weight_shape(d, d_total, num_heads):
    if min(d, d_total, num_heads) < 1 or d_total % num_heads:
        raise ValueError("bad sizes")
    return d, d_total // num_heads


def project(H, W):
    return torch.einsum("...nd,dp->...np", H, W)


def project_heads(H, W_heads):
    return torch.einsum("bnd,hdp->bhnp", H, W_heads)


def split_heads(X, num_heads):
    if X.shape[-1] % num_heads:
        raise ValueError("width not divisible by num_heads")
    b, n, w = X.shape
    return torch.einsum("bnhp->bhnp", X.reshape(b, n, num_heads, w // num_heads))


def concat_heads(X):
    b, h, n, p = X.shape
    return torch.einsum("bhnp->bnhp", X).reshape(b, n, h * p)


def masked_softmax(scores, valid_lens=None):
    if valid_lens is None:
        return scores.softmax(-1)
    n_q, n_k = scores.shape[-2:]
    if valid_lens.dim() == 1:
        lens = valid_lens.view(-1, *([1] * (scores.dim() - 1)))
    else:
        lens = valid_lens.view(valid_lens.shape[0], *([1] * (scores.dim() - 3)), n_q, 1)
    keep = torch.arange(n_k, device=scores.device) < lens
    neg = torch.full_like(scores, torch.finfo(scores.dtype).min)
    w = torch.where(keep, scores, neg).softmax(-1)
    return torch.where(keep, w, torch.zeros_like(w))


def attention_pool(Q, K, V, valid_lens=None):
    scores = torch.einsum("...qp,...kp->...qk", Q, K) / math.sqrt(Q.shape[-1])
    w = masked_softmax(scores, valid_lens)
    return torch.einsum("...qk,...kv->...qv", w, V), w


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        d_total = d_total or d_model
        head_weight_shape(d_model, d_total, num_heads)
        self.h = num_heads
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        Q = split_heads(self.W_q(queries), self.h)
        K = split_heads(self.W_k(keys), self.h)
        V = split_heads(self.W_v(values), self.h)
        scores = torch.einsum("bhqp,bhkp->bhqk", Q, K) / math.sqrt(Q.shape[-1])
        self.attention_weights = masked_softmax(scores, valid_lens)
        out = torch.einsum("bhqk,bhkp->bhqp", self.drop(self.attention_weights), V)
        return self.W_o(concat_heads(out))
