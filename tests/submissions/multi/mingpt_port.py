# CODES: module.self-attention-only, mask.zero-len-nan, concat.view-noncontiguous
# STYLE: minGPT CausalSelfAttention port (B, T, C = x.size(), .view(...).transpose(1, 2), -inf masked_fill, attn_drop), causal buffer swapped for valid_lens
"""
A vanilla multi-head masked self-attention layer, adapted from minGPT
(https://github.com/karpathy/minGPT/blob/master/mingpt/model.py) to the course API.
"""

import math

import torch
import torch.nn as nn
from torch.nn import functional as F


def head_weight_shape(d, d_total, num_heads):
    if d < 1 or d_total < 1 or num_heads < 1:
        raise ValueError("sizes must be >= 1")
    if d_total % num_heads != 0:
        raise ValueError("n_embd must be divisible by n_head")
    return (d, d_total // num_heads)


def project(H, W):
    return H @ W


def project_heads(H, W_heads):
    return H[:, None, :, :] @ W_heads


def split_heads(X, num_heads):
    B, T, C = X.size()
    if num_heads < 1 or C % num_heads != 0:
        raise ValueError("n_embd must be divisible by n_head")
    return X.view(B, T, num_heads, C // num_heads).transpose(1, 2)  # (B, nh, T, hs)


def concat_heads(X):
    B, nh, T, hs = X.size()
    return X.transpose(1, 2).view(B, T, nh * hs)  # re-assemble all head outputs side by side


def masked_softmax(scores, valid_lens=None):
    if valid_lens is not None:
        T_k = scores.size(-1)
        lens = valid_lens.to(scores.device)
        if lens.dim() == 1:
            lens = lens.view(-1, *([1] * (scores.dim() - 1)))
        else:
            lens = lens.view(lens.size(0), *([1] * (scores.dim() - 3)), lens.size(1), 1)
        mask = torch.arange(T_k, device=scores.device) < lens
        scores = scores.masked_fill(mask == 0, float('-inf'))
    return F.softmax(scores, dim=-1)


def attention_pool(Q, K, V, valid_lens=None):
    att = (Q @ K.transpose(-2, -1)) * (1.0 / math.sqrt(K.size(-1)))
    att = masked_softmax(att, valid_lens)
    return att @ V, att


class MultiHeadAttention(nn.Module):

    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        n_embd = d_model if d_total is None else d_total
        head_weight_shape(d_model, n_embd, num_heads)
        # key, query, value projections for all heads
        self.W_k = nn.Linear(d_model, n_embd, bias=bias)
        self.W_q = nn.Linear(d_model, n_embd, bias=bias)
        self.W_v = nn.Linear(d_model, n_embd, bias=bias)
        # output projection
        self.W_o = nn.Linear(n_embd, d_model, bias=bias)
        # regularization
        self.attn_drop = nn.Dropout(dropout)
        self.n_head = num_heads
        self.n_embd = n_embd
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        x = queries
        B, T, _ = x.size()  # batch size, sequence length, embedding dimensionality (n_embd)
        C = self.n_embd

        # calculate query, key, values for all heads in batch and move head forward to be the batch dim
        k = self.W_k(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = self.W_q(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = self.W_v(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)

        # attention; (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = masked_softmax(att, valid_lens)
        self.attention_weights = att
        att = self.attn_drop(att)
        y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble all head outputs side by side

        # output projection
        return self.W_o(y)
