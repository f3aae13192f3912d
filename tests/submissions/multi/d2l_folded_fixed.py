# CODES:
# STYLE: D2L 11.5 kept almost verbatim (transpose_qkv/transpose_output, repeat_interleave of valid_lens, bmm, _sequence_mask with X[~mask] = value) but on a copy, with the dtype's lowest value and empty rows zeroed afterwards
import math
import numbers

import torch
from torch import nn


def head_weight_shape(d, d_total, num_heads):
    for value in (d, d_total, num_heads):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"sizes must be positive integers, got {value!r}")
    if d_total % num_heads:
        raise ValueError(f"num_hiddens={d_total} is not divisible by num_heads={num_heads}")
    return d, d_total // num_heads


def project(H, W):
    return torch.matmul(H, W)


def project_heads(H, W_heads):
    return torch.matmul(H.unsqueeze(1), W_heads)


def transpose_qkv(X, num_heads):
    """Transposition for parallel computation of multiple attention heads."""
    X = X.reshape(X.shape[0], X.shape[1], num_heads, -1)
    X = X.permute(0, 2, 1, 3)
    return X.reshape(-1, X.shape[2], X.shape[3])


def transpose_output(X, num_heads):
    """Reverse the operation of transpose_qkv."""
    X = X.reshape(-1, num_heads, X.shape[1], X.shape[2])
    X = X.permute(0, 2, 1, 3)
    return X.reshape(X.shape[0], X.shape[1], -1)


def split_heads(X, num_heads):
    if isinstance(num_heads, bool) or not isinstance(num_heads, numbers.Integral) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive integer, got {num_heads!r}")
    if X.shape[-1] % num_heads:
        raise ValueError(f"{X.shape[-1]} features do not split into {num_heads} heads")
    return X.reshape(*X.shape[:-1], num_heads, -1).permute(0, 2, 1, 3)


def concat_heads(X):
    return X.permute(0, 2, 1, 3).reshape(X.shape[0], X.shape[2], -1)


def _sequence_mask(X, valid_len, value=0):
    """Mask irrelevant entries in sequences (on a copy of X)."""
    maxlen = X.size(1)
    mask = torch.arange(maxlen, device=X.device)[None, :] < valid_len[:, None]
    X = X.clone()
    X[~mask] = value
    return X, mask


def masked_softmax(X, valid_lens=None):
    """Perform softmax operation by masking elements on the last axis."""
    if valid_lens is None:
        return nn.functional.softmax(X, dim=-1)
    shape = X.shape
    valid_lens = torch.as_tensor(valid_lens, device=X.device)
    if valid_lens.dim() == 1:
        valid_lens = torch.repeat_interleave(valid_lens, math.prod(shape[1:-1]))
    else:
        valid_lens = valid_lens.reshape(
            shape[0], *([1] * (len(shape) - 3)), shape[-2]).expand(shape[:-1]).reshape(-1)
    X, mask = _sequence_mask(X.reshape(-1, shape[-1]), valid_lens,
                             value=torch.finfo(X.dtype).min)
    # rows with no valid key would be uniform: give them zero weight
    Y = nn.functional.softmax(X, dim=-1) * mask
    return Y.reshape(shape)


def attention_pool(Q, K, V, valid_lens=None):
    d = Q.shape[-1]
    scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(d)
    weights = masked_softmax(scores, valid_lens)
    return torch.matmul(weights, V), weights


class DotProductAttention(nn.Module):
    """Scaled dot product attention."""

    def __init__(self, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens=None):
        d = queries.shape[-1]
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
        self.attention_weights = masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


class MultiHeadAttention(nn.Module):
    """Multi-head attention."""

    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        num_hiddens = d_model if d_total is None else d_total
        head_weight_shape(d_model, num_hiddens, num_heads)
        self.num_heads = num_heads
        self.attention = DotProductAttention(dropout)
        self.W_q = nn.Linear(d_model, num_hiddens, bias=bias)
        self.W_k = nn.Linear(d_model, num_hiddens, bias=bias)
        self.W_v = nn.Linear(d_model, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, d_model, bias=bias)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        batch, n_q, n_k = queries.shape[0], queries.shape[1], keys.shape[1]
        queries = transpose_qkv(self.W_q(queries), self.num_heads)
        keys = transpose_qkv(self.W_k(keys), self.num_heads)
        values = transpose_qkv(self.W_v(values), self.num_heads)
        if valid_lens is not None:
            # On axis 0, copy the first item (scalar or vector) for num_heads
            # times, then copy the next item, and so on
            valid_lens = torch.repeat_interleave(
                torch.as_tensor(valid_lens, device=queries.device), repeats=self.num_heads, dim=0)
        output = self.attention(queries, keys, values, valid_lens)
        self.attention_weights = self.attention.attention_weights.reshape(
            batch, self.num_heads, n_q, n_k)
        output_concat = transpose_output(output, self.num_heads)
        return self.W_o(output_concat)
