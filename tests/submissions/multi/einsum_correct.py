# CODES:
# STYLE: einsum everywhere, the module contracts against W.weight viewed as (heads, p, d) instead of calling the Linears; torch.where masking
import math
import operator
import torch
from torch import nn


def _positive(name, v):
    try:
        v = operator.index(v)
    except TypeError:
        raise ValueError(f"{name} must be an integer") from None
    if v < 1:
        raise ValueError(f"{name} must be >= 1")
    return v


def head_weight_shape(d, d_total, num_heads):
    d, d_total, num_heads = (_positive(n, v) for n, v in (("d", d), ("d_total", d_total), ("num_heads", num_heads)))
    if d_total % num_heads:
        raise ValueError("d_total must be a multiple of num_heads")
    return (d, d_total // num_heads)


def project(H, W):
    return torch.einsum("...nd,dp->...np", H, W)


def project_heads(H, W_heads):
    return torch.einsum("bnd,hdp->bhnp", H, W_heads)


def split_heads(X, num_heads):
    num_heads = _positive("num_heads", num_heads)
    if X.shape[-1] % num_heads:
        raise ValueError(f"{X.shape[-1]} features cannot be split into {num_heads} heads")
    return torch.einsum("bnhp->bhnp", X.unflatten(-1, (num_heads, -1)))


def concat_heads(X):
    return torch.einsum("bhnp->bnhp", X).flatten(-2)


def masked_softmax(scores, valid_lens=None):
    if valid_lens is None:
        return scores.softmax(dim=-1)
    n_q, n_k = scores.shape[-2:]
    lens = valid_lens.to(device=scores.device)
    middle = [1] * (scores.dim() - 3)
    lens = lens[(...,) + (None,) * (scores.dim() - 1)] if lens.dim() == 1 else lens.view(lens.shape[0], *middle, n_q, 1)
    keep = torch.arange(n_k, device=scores.device) < lens
    floor = torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype, device=scores.device)
    w = torch.where(keep, scores, floor).softmax(dim=-1)
    return torch.where(keep, w, torch.zeros((), dtype=w.dtype, device=w.device))


def attention_pool(Q, K, V, valid_lens=None):
    scores = torch.einsum("...qp,...kp->...qk", Q, K) / math.sqrt(Q.shape[-1])
    w = masked_softmax(scores, valid_lens)
    return torch.einsum("...qk,...kv->...qv", w, V), w


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        d_total = d_model if d_total is None else d_total
        _, self.p = head_weight_shape(d_model, d_total, num_heads)
        self.h = num_heads
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def _heads(self, lin, x):
        # W_j = lin.weight[j*p:(j+1)*p].T, so weight.view(h, p, d)[j] is head j's (p, d) block
        y = torch.einsum("bnd,hpd->bhnp", x, lin.weight.view(self.h, self.p, -1))
        if lin.bias is not None:
            y = y + lin.bias.view(self.h, 1, self.p)
        return y

    def forward(self, queries, keys, values, valid_lens=None):
        Q, K, V = self._heads(self.W_q, queries), self._heads(self.W_k, keys), self._heads(self.W_v, values)
        out, w = attention_pool(Q, K, V, valid_lens)
        self.attention_weights = w
        if self.dropout.p > 0 and self.training:
            out = torch.einsum("bhqk,bhkp->bhqp", self.dropout(w), V)
        y = torch.einsum("bhnp,ehp->bne", out, self.W_o.weight.view(self.W_o.out_features, self.h, self.p))
        return y if self.W_o.bias is None else y + self.W_o.bias
