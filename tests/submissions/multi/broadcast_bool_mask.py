# CODES: device.hardcoded-cpu, mask.repeat-not-interleave
# STYLE: masks built by broadcasting comparisons (positions[None, :] < lens[:, None]) fed to masked_fill; 1-D lengths widened to per-row lengths; terse numpy-like names
import math

import torch
from torch import nn


def head_weight_shape(d, d_total, num_heads):
    if d < 1 or d_total < 1 or num_heads < 1 or d_total % num_heads:
        raise ValueError(f"bad head configuration: d={d}, d_total={d_total}, num_heads={num_heads}")
    return (d, d_total // num_heads)


def project(H, W):
    return torch.matmul(H, W)


def project_heads(H, W_heads):
    return torch.matmul(H[:, None], W_heads)


def split_heads(X, num_heads):
    b, n, w = X.shape
    if num_heads < 1 or w % num_heads:
        raise ValueError(f"width {w} not divisible by {num_heads} heads")
    return X.reshape(b, n, num_heads, w // num_heads).transpose(1, 2)


def concat_heads(X):
    b, h, n, p = X.shape
    return X.transpose(1, 2).reshape(b, n, h * p)


def _row_lengths(valid_lens, n_q):
    """Bring lengths to one entry per query row: (B,) -> (B, n_q); (B, n_q) stays."""
    if valid_lens.dim() == 2:
        return valid_lens
    B = valid_lens.shape[0]
    return valid_lens.repeat(n_q).reshape(B, n_q)


def masked_softmax(scores, valid_lens=None):
    if valid_lens is None:
        return scores.softmax(-1)
    B, n_q, n_k = scores.shape[0], scores.shape[-2], scores.shape[-1]
    lens = _row_lengths(valid_lens, n_q)                  # (B, n_q)
    pos = torch.arange(n_k)                               # (n_k,)
    keep = pos[None, None, :] < lens[:, :, None]          # (B, n_q, n_k)
    keep = keep.reshape(B, *([1] * (scores.dim() - 3)), n_q, n_k)
    lo = torch.finfo(scores.dtype).min
    w = scores.masked_fill(~keep, lo).softmax(-1)
    return w.masked_fill(~keep, 0.0)


def attention_pool(Q, K, V, valid_lens=None):
    s = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    w = masked_softmax(s, valid_lens)
    return w @ V, w


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        D = d_model if d_total is None else d_total
        _, self.p = head_weight_shape(d_model, D, num_heads)
        self.h = num_heads
        self.W_q = nn.Linear(d_model, D, bias=bias)
        self.W_k = nn.Linear(d_model, D, bias=bias)
        self.W_v = nn.Linear(d_model, D, bias=bias)
        self.W_o = nn.Linear(D, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        q = split_heads(self.W_q(queries), self.h)
        k = split_heads(self.W_k(keys), self.h)
        v = split_heads(self.W_v(values), self.h)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.p)
        w = masked_softmax(s, valid_lens)
        self.attention_weights = w
        return self.W_o(concat_heads(self.drop(w) @ v))
