# CODES:
# STYLE: folded (b*h, n, p) layout with torch.baddbmm(beta=0, alpha=1/sqrt(p)); a loop over the three roles (never over heads) builds q/k/v; attention_pool flattens any leading axes to one batch axis; torch.where with a 0-d zero
import math
from numbers import Integral

import torch
from torch import nn


def _positive(**kw):
    for k, v in kw.items():
        if isinstance(v, bool) or not isinstance(v, Integral) or v < 1:
            raise ValueError(f"{k} must be a positive integer (got {v!r})")


def head_weight_shape(d, d_total, num_heads):
    _positive(d=d, d_total=d_total, num_heads=num_heads)
    if d_total % num_heads != 0:
        raise ValueError(f"d_total={d_total} is not a multiple of num_heads={num_heads}")
    return (d, d_total // num_heads)


def project(H, W):
    return torch.matmul(H, W)


def project_heads(H, W_heads):
    h, d, p = W_heads.shape
    b, n, _ = H.shape
    # (h, b*n, d) x (h, d, p) -> (h, b*n, p): one bmm, every head its own matrix
    out = torch.bmm(H.reshape(1, b * n, d).expand(h, b * n, d), W_heads)
    return out.view(h, b, n, p).transpose(0, 1)


def split_heads(X, num_heads):
    _positive(num_heads=num_heads)
    *lead, width = X.shape
    if width % num_heads != 0:
        raise ValueError(f"cannot split {width} features into {num_heads} heads")
    return X.reshape(*lead, num_heads, width // num_heads).transpose(-3, -2)


def concat_heads(X):
    *lead, h, n, p = X.shape
    return X.transpose(-3, -2).reshape(*lead, n, h * p)


def masked_softmax(scores, valid_lens=None):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    n_q, n_k = scores.shape[-2:]
    lens = torch.as_tensor(valid_lens, device=scores.device)
    rows = n_q if lens.dim() == 2 else 1
    lens = lens.reshape((lens.shape[0],) + (1,) * (scores.dim() - 3) + (rows, 1))
    valid = torch.arange(n_k, device=scores.device) < lens
    probs = torch.softmax(scores.masked_fill(~valid, torch.finfo(scores.dtype).min), dim=-1)
    return torch.where(valid, probs, scores.new_zeros(()))


def _bmm_scores(q, k):
    """(B, n_q, p), (B, n_k, p) -> (B, n_q, n_k) = q k^T / sqrt(p)."""
    out = q.new_empty(q.shape[0], q.shape[1], k.shape[1])
    return torch.baddbmm(out, q, k.transpose(1, 2), beta=0.0, alpha=1.0 / math.sqrt(q.shape[-1]))


def attention_pool(Q, K, V, valid_lens=None):
    lead = torch.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    n_q, p = Q.shape[-2:]
    n_k, p_v = V.shape[-2:]
    q = Q.expand(*lead, n_q, p).reshape(-1, n_q, p)
    k = K.expand(*lead, n_k, p).reshape(-1, n_k, p)
    v = V.expand(*lead, n_k, p_v).reshape(-1, n_k, p_v)
    weights = masked_softmax(_bmm_scores(q, k).view(*lead, n_q, n_k), valid_lens)
    out = torch.bmm(weights.reshape(-1, n_q, n_k), v)
    return out.view(*lead, n_q, p_v), weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        d_total = d_model if d_total is None else d_total
        _, self.p = head_weight_shape(d_model, d_total, num_heads)
        self.h = num_heads
        for role in ("q", "k", "v"):
            setattr(self, f"W_{role}", nn.Linear(d_model, d_total, bias=bias))
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        b = queries.shape[0]
        folded = {}
        for role, x in (("q", queries), ("k", keys), ("v", values)):
            y = getattr(self, f"W_{role}")(x)                        # (b, n, h*p)
            n = y.shape[1]
            folded[role] = y.view(b, n, self.h, self.p).permute(0, 2, 1, 3).reshape(b * self.h, n, self.p)
        q, k, v = folded["q"], folded["k"], folded["v"]
        n_q, n_k = q.shape[1], k.shape[1]
        weights = masked_softmax(_bmm_scores(q, k).view(b, self.h, n_q, n_k), valid_lens)
        self.attention_weights = weights
        ctx = torch.bmm(self.dropout(weights).reshape(b * self.h, n_q, n_k), v)
        ctx = ctx.view(b, self.h, n_q, self.p).permute(0, 2, 1, 3).reshape(b, n_q, self.h * self.p)
        return self.W_o(ctx)
