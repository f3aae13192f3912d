# CODES:
# STYLE: all einsum: the module never calls its Linear layers, it contracts the input with weight.view(h, p, d) directly (bias added per head), W_o contracted as weight.view(d_model, h, p); the mask multiplies the softmax by the boolean keep-mask
import math
import operator

import torch
from torch import nn


def _size(name, value):
    if isinstance(value, bool):
        raise ValueError(f"{name}={value!r} is not a size")
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{name}={value!r} is not an integer") from None
    if value < 1:
        raise ValueError(f"{name}={value} must be at least 1")
    return value


def head_weight_shape(d, d_total, num_heads):
    d, d_total, num_heads = _size("d", d), _size("d_total", d_total), _size("num_heads", num_heads)
    p, rest = divmod(d_total, num_heads)
    if rest:
        raise ValueError(f"{num_heads} heads cannot share {d_total} columns evenly")
    return (d, p)


def project(H, W):
    return torch.einsum("...nd,dp->...np", H, W)


def project_heads(H, W_heads):
    return torch.einsum("bnd,hdp->bhnp", H, W_heads)


def split_heads(X, num_heads):
    num_heads = _size("num_heads", num_heads)
    if X.shape[-1] % num_heads:
        raise ValueError(f"width {X.shape[-1]} is not a multiple of num_heads={num_heads}")
    return X.unflatten(-1, (num_heads, X.shape[-1] // num_heads)).movedim(-2, -3)


def concat_heads(X):
    return X.movedim(-3, -2).flatten(-2)


def _keep_mask(scores, valid_lens):
    lens = torch.as_tensor(valid_lens, device=scores.device)
    per_query = lens.dim() == 2
    lens = lens.view(lens.shape[0], *(1,) * (scores.dim() - 3),
                     scores.shape[-2] if per_query else 1, 1)
    return torch.arange(scores.shape[-1], device=scores.device) < lens


def masked_softmax(scores, valid_lens=None):
    if valid_lens is None:
        return scores.softmax(dim=-1)
    keep = _keep_mask(scores, valid_lens)
    lowest = torch.finfo(scores.dtype).min
    return scores.masked_fill(~keep, lowest).softmax(dim=-1) * keep


def attention_pool(Q, K, V, valid_lens=None):
    scores = torch.einsum("...qd,...kd->...qk", Q, K) / math.sqrt(Q.shape[-1])
    weights = masked_softmax(scores, valid_lens)
    return torch.einsum("...qk,...kv->...qv", weights, V), weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        d_total = d_model if d_total is None else d_total
        _, p = head_weight_shape(d_model, d_total, num_heads)
        self.h, self.p = num_heads, p
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def _heads(self, layer, x):
        # layer.weight rows [j*p, (j+1)*p) are head j's matrix (transposed)
        w = layer.weight.view(self.h, self.p, -1)
        out = torch.einsum("bnd,hpd->bhnp", x, w)
        if layer.bias is not None:
            out = out + layer.bias.view(self.h, 1, self.p)
        return out

    def forward(self, queries, keys, values, valid_lens=None):
        q = self._heads(self.W_q, queries)
        k = self._heads(self.W_k, keys)
        v = self._heads(self.W_v, values)
        scores = torch.einsum("bhqp,bhkp->bhqk", q, k) / math.sqrt(self.p)
        weights = masked_softmax(scores, valid_lens)
        self.attention_weights = weights
        heads = torch.einsum("bhqk,bhkp->bhqp", self.attn_dropout(weights), v)
        w_o = self.W_o.weight.view(self.W_o.out_features, self.h, self.p)
        out = torch.einsum("bhqp,ohp->bqo", heads, w_o)
        if self.W_o.bias is not None:
            out = out + self.W_o.bias
        return out
