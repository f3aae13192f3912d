# CODES: pool.scale-d-model, mask.zero-len-nan
# STYLE: CS231n assignment 3 transformer_layers.py solution style (N, S, E / H naming, attn_mask with -inf, self.attn_drop, scale by sqrt(E/H) "simplified")
import math

import torch
import torch.nn as nn
from torch.nn import functional as F


def head_weight_shape(d, d_total, num_heads):
    if type(d) is not int or type(d_total) is not int or type(num_heads) is not int:
        raise ValueError("sizes must be ints")
    if min(d, d_total, num_heads) < 1:
        raise ValueError("sizes must be >= 1")
    if d_total % num_heads != 0:
        raise ValueError("d_total must be a multiple of num_heads")
    return d, d_total // num_heads


def project(H, W):
    return H.matmul(W)


def project_heads(H, W_heads):
    return H[:, None, :, :].matmul(W_heads)


def split_heads(X, num_heads):
    if type(num_heads) is not int or num_heads < 1 or X.shape[-1] % num_heads != 0:
        raise ValueError("embed dim must be divisible by num_heads")
    N, S, E = X.shape
    return X.view(N, S, num_heads, E // num_heads).transpose(1, 2)


def concat_heads(X):
    N, H, S, D = X.shape
    return X.transpose(1, 2).reshape(N, S, H * D)


def _attn_mask(valid_lens, N, S, T, ndim, device):
    lens = valid_lens.to(device)
    if lens.dim() == 1:
        lens = lens.view(N, *([1] * (ndim - 1)))
    else:
        lens = lens.view(N, *([1] * (ndim - 3)), S, 1)
    return torch.arange(T, device=device) < lens       # True = may attend


def masked_softmax(scores, valid_lens=None):
    if valid_lens is not None:
        attn_mask = _attn_mask(valid_lens, scores.shape[0], scores.shape[-2], scores.shape[-1],
                               scores.dim(), scores.device)
        scores = scores.masked_fill(attn_mask == 0, float("-inf"))
    return F.softmax(scores, dim=-1)


def attention_pool(Q, K, V, valid_lens=None):
    D = Q.shape[-1]
    attn = masked_softmax(torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(D), valid_lens)
    return torch.matmul(attn, V), attn


class MultiHeadAttention(nn.Module):
    """
    A model layer which implements a simplified version of masked attention, as
    introduced by "Attention Is All You Need" (https://arxiv.org/abs/1706.03762).
    """

    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        inner = d_model if d_total is None else d_total
        if min(d_model, inner, num_heads) < 1 or inner % num_heads != 0:
            raise ValueError("embed_dim must be divisible by num_heads")
        self.W_q = nn.Linear(d_model, inner, bias=bias)
        self.W_k = nn.Linear(d_model, inner, bias=bias)
        self.W_v = nn.Linear(d_model, inner, bias=bias)
        self.W_o = nn.Linear(inner, d_model, bias=bias)
        self.attn_drop = nn.Dropout(dropout)
        self.n_head = num_heads
        self.emd_dim = d_model
        self.inner = inner
        self.head_dim = inner // num_heads
        self.attention_weights = None

    def forward(self, query, key, value, valid_lens=None):
        N, S, E = query.shape
        N, T, E = value.shape
        H = self.n_head
        # (N, S, E) -> (N, H, S, E/H)
        Q = self.W_q(query).view(N, S, H, self.head_dim).transpose(1, 2)
        K = self.W_k(key).view(N, T, H, self.head_dim).transpose(1, 2)
        V = self.W_v(value).view(N, T, H, self.head_dim).transpose(1, 2)
        attn = torch.matmul(Q, K.transpose(2, 3)) / math.sqrt(E)
        if valid_lens is not None:
            attn_mask = _attn_mask(valid_lens, N, S, T, 4, query.device)
            attn = attn.masked_fill(attn_mask == 0, float("-inf"))
        attn = F.softmax(attn, dim=-1)
        self.attention_weights = attn
        attn = self.attn_drop(attn)
        output = torch.matmul(attn, V)                       # (N, H, S, E/H)
        output = output.transpose(1, 2).reshape(N, S, self.inner)
        output = self.W_o(output)
        return output
