# CODES: proj.transposed-weight, mask.fp16-overflow, mask.zero-len-uniform
# STYLE: port of keras.layers.MultiHeadAttention (EinsumDense kernels, additive Softmax mask, dense kernels read as (in, out))
"""Multi-head attention, ported from my Keras 3 notebook (keras.layers.MultiHeadAttention).

Keras keeps Dense kernels as (input_dim, units) and masks logits additively inside its
Softmax layer, so I kept the same helpers (_dense, _masked_softmax, _compute_attention).
"""
import math

import torch
from torch import nn


def head_weight_shape(d, d_total, num_heads):
    if d < 1 or d_total < 1 or num_heads < 1:
        raise ValueError("d, d_total and num_heads must all be >= 1")
    if d_total % num_heads:
        raise ValueError(
            f"The query/key/value width ({d_total}) must be divisible by num_heads ({num_heads})")
    return (d, d_total // num_heads)


def project(H, W):
    # EinsumDense("...nd,dp->...np")
    return torch.einsum("...nd,dp->...np", H, W)


def project_heads(H, W_heads):
    # EinsumDense("abc,dce->adbe"): (B, T, dim) x (N, dim, H) -> (B, N, T, H)
    return torch.einsum("abc,dce->adbe", H, W_heads)


def split_heads(X, num_heads):
    if num_heads < 1 or X.shape[-1] % num_heads != 0:
        raise ValueError(f"cannot split {X.shape[-1]} features into {num_heads} heads")
    batch, length, width = X.shape
    X = X.reshape(batch, length, num_heads, width // num_heads)
    return X.permute(0, 2, 1, 3)


def concat_heads(X):
    batch, heads, length, key_dim = X.shape
    return X.permute(0, 2, 1, 3).reshape(batch, length, heads * key_dim)


def _large_negative_number():
    # keras.layers.Softmax: "Use a large negative number so that masked positions vanish"
    return -1e9


def _attention_mask(valid_lens, scores):
    """Bool mask with the rank of `scores`: True where the key may be attended to."""
    length = scores.shape[-1]
    positions = torch.arange(length, device=scores.device)
    valid_lens = valid_lens.to(scores.device)
    if valid_lens.dim() == 1:
        shape = [-1] + [1] * (scores.dim() - 1)
    else:
        shape = [-1] + [1] * (scores.dim() - 3) + [scores.shape[-2], 1]
    return positions < valid_lens.reshape(shape)


def masked_softmax(scores, valid_lens=None):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    mask = _attention_mask(valid_lens, scores)
    # same as keras: adder = (1.0 - cast(mask, inputs.dtype)) * _large_negative_number(...)
    adder = (1.0 - mask.to(scores.dtype)) * _large_negative_number()
    return torch.softmax(scores + adder, dim=-1)


def attention_pool(Q, K, V, valid_lens=None):
    # _compute_attention: scale the query first, like keras does
    key_dim = Q.shape[-1]
    query = Q * (1.0 / math.sqrt(float(key_dim)))
    attention_scores = torch.einsum("...qd,...kd->...qk", query, K)
    attention_scores = masked_softmax(attention_scores, valid_lens)
    attention_output = torch.einsum("...qk,...kd->...qd", attention_scores, V)
    return attention_output, attention_scores


def _dense(x, layer):
    """Dense layer the Keras way: outputs = inputs @ kernel + bias."""
    kernel = layer.weight
    y = torch.matmul(x, kernel)
    if layer.bias is not None:
        y = y + layer.bias
    return y


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        if d_total is None:
            d_total = d_model
        _, self._key_dim = head_weight_shape(d_model, d_total, num_heads)
        self._num_heads = num_heads
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self._dropout_layer = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        query = split_heads(_dense(queries, self.W_q), self._num_heads)
        key = split_heads(_dense(keys, self.W_k), self._num_heads)
        value = split_heads(_dense(values, self.W_v), self._num_heads)

        query = query * (1.0 / math.sqrt(float(self._key_dim)))
        attention_scores = torch.einsum("bhqd,bhkd->bhqk", query, key)
        attention_scores = masked_softmax(attention_scores, valid_lens)
        self.attention_weights = attention_scores
        final_attn = self._dropout_layer(attention_scores)
        attention_output = torch.einsum("bhqk,bhkd->bhqd", final_attn, value)
        return _dense(concat_heads(attention_output), self.W_o)
