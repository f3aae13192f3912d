"""Correct: computes internally in float64 and casts back to the input dtype."""
import math

import torch
from torch import nn


def head_weight_shape(d, d_total, num_heads):
    for v in (d, d_total, num_heads):
        if not isinstance(v, int) or v < 1:
            raise ValueError("positive integers please")
    if d_total % num_heads:
        raise ValueError("d_total % num_heads != 0")
    return (d, d_total // num_heads)


def project(H, W):
    return (H.double() @ W.double()).to(H.dtype)


def project_heads(H, W_heads):
    return torch.stack([project(H, W_heads[j]) for j in range(W_heads.shape[0])], dim=1)


def split_heads(X, num_heads):
    if X.shape[-1] % num_heads:
        raise ValueError("cannot split")
    return torch.stack(X.chunk(num_heads, dim=-1), dim=1)


def concat_heads(X):
    return torch.cat(X.unbind(dim=1), dim=-1)


def masked_softmax(scores, valid_lens=None):
    s = scores.double()
    if valid_lens is not None:
        n_k = s.shape[-1]
        L = valid_lens.to(s.device)
        L = L.reshape(L.shape[0], *([1] * (s.dim() - 2))) if L.dim() == 1 else \
            L.reshape(L.shape[0], *([1] * (s.dim() - 3)), L.shape[1])
        keep = torch.arange(n_k, device=s.device) < L.unsqueeze(-1)
        s = s.masked_fill(~keep, -math.inf)
        m = s.amax(dim=-1, keepdim=True).clamp(min=-1e300)
        e = torch.exp(s - m) * keep
        total = e.sum(-1, keepdim=True)
        w = e / torch.where(total > 0, total, torch.ones_like(total))
    else:
        w = torch.softmax(s, -1)
    return w.to(scores.dtype)


def attention_pool(Q, K, V, valid_lens=None):
    w = masked_softmax(Q @ K.transpose(-2, -1) / Q.shape[-1] ** 0.5, valid_lens)
    return w @ V, w


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        d_total = d_model if d_total is None else d_total
        _, self.p = head_weight_shape(d_model, d_total, num_heads)
        self.num_heads = num_heads
        self.W_q, self.W_k, self.W_v = (nn.Linear(d_model, d_total, bias=bias) for _ in range(3))
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.p_drop = dropout

    def forward(self, queries, keys, values, valid_lens=None):
        Q = split_heads(self.W_q(queries), self.num_heads)
        K = split_heads(self.W_k(keys), self.num_heads)
        V = split_heads(self.W_v(values), self.num_heads)
        w = masked_softmax(Q @ K.transpose(-2, -1) / math.sqrt(self.p), valid_lens)
        self.attention_weights = w
        w = nn.functional.dropout(w, self.p_drop, training=self.training)
        return self.W_o(concat_heads(w @ V))
