# CODES: mask.wrong-axis, module.dropout-in-eval
# STYLE: "The Illustrated Transformer" walk-through (Jay Alammar): numbered steps, Z / Z_heads naming, padding mask built over sequence positions, F.dropout in forward
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def head_weight_shape(d, d_total, num_heads):
    # e.g. d=512, 8 heads -> every head works with 64-dimensional q/k/v vectors
    if d < 1 or d_total < 1 or num_heads < 1:
        raise ValueError("sizes must be positive")
    if d_total % num_heads != 0:
        raise ValueError(f"{d_total} is not divisible by {num_heads} heads")
    return (d, d_total // num_heads)


def project(H, W):
    # "multiplying x1 by the WQ weight matrix produces q1"
    return torch.matmul(H, W)


def project_heads(H, W_heads):
    # every head has its own W^Q_i: stack them and multiply once
    return torch.matmul(H.unsqueeze(1), W_heads)


def split_heads(X, num_heads):
    batch, seq_len, width = X.shape
    if num_heads < 1 or width % num_heads != 0:
        raise ValueError(f"{width} is not divisible by {num_heads} heads")
    return X.view(batch, seq_len, num_heads, width // num_heads).permute(0, 2, 1, 3)


def concat_heads(X):
    # "concat the matrices Z0 ... Z7"
    batch, heads, seq_len, head_dim = X.shape
    return X.permute(0, 2, 1, 3).reshape(batch, seq_len, heads * head_dim)


def padding_mask(valid_lens, scores):
    """True for real tokens, False for padding, as a mask over sequence positions."""
    seq_len = scores.shape[-1]
    positions = torch.arange(seq_len, device=scores.device)
    lens = valid_lens.to(scores.device)
    if lens.dim() == 1:
        lens = lens.reshape(-1, *([1] * (scores.dim() - 2)))      # (batch, 1.., 1)
        mask = positions < lens                                     # (batch, 1.., seq_len)
        return mask.unsqueeze(-1)                                   # one entry per token row
    lens = lens.reshape(lens.shape[0], *([1] * (scores.dim() - 3)), lens.shape[-1], 1)
    return positions < lens                                         # (batch, 1.., n_q, n_k)


def masked_softmax(scores, valid_lens=None):
    # Step 5: softmax -- padded tokens must not get any attention
    if valid_lens is None:
        return F.softmax(scores, dim=-1)
    mask = padding_mask(valid_lens, scores)
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return F.softmax(scores, dim=-1).masked_fill(~mask, 0.0)


def attention_pool(Q, K, V, valid_lens=None):
    d_k = Q.shape[-1]
    # Step 2: score every word against the current word
    scores = torch.matmul(Q, K.transpose(-2, -1))
    # Steps 3 and 4: divide by sqrt(d_k)
    scores = scores / math.sqrt(d_k)
    # Step 5: softmax
    weights = masked_softmax(scores, valid_lens)
    # Step 6: multiply each value vector by its softmax score and sum up
    return torch.matmul(weights, V), weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        d_total = d_model if d_total is None else d_total
        _, self.d_k = head_weight_shape(d_model, d_total, num_heads)
        self.num_heads = num_heads
        self.W_q = nn.Linear(d_model, d_total, bias=bias)   # W^Q for all heads side by side
        self.W_k = nn.Linear(d_model, d_total, bias=bias)   # W^K
        self.W_v = nn.Linear(d_model, d_total, bias=bias)   # W^V
        self.W_o = nn.Linear(d_total, d_model, bias=bias)   # W^O
        self.dropout_p = dropout
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        # Step 1: create the query, key and value matrices for every head
        Q = split_heads(self.W_q(queries), self.num_heads)
        K = split_heads(self.W_k(keys), self.num_heads)
        V = split_heads(self.W_v(values), self.num_heads)
        # Steps 2-5
        scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(self.d_k)
        weights = masked_softmax(scores, valid_lens)
        self.attention_weights = weights
        weights = F.dropout(weights, self.dropout_p)
        # Step 6: Z_i for every head i
        Z_heads = torch.matmul(weights, V)
        # concat Z0..Z7 and multiply by W^O
        Z = concat_heads(Z_heads)
        return self.W_o(Z)
