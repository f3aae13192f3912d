# CODES: cost.python-loop-over-heads, module.missing-out-proj, shape.head-weight-full-width
# STYLE: heavy OOP: helper classes (HeadSpec, AttentionHead, HeadCombiner) and an nn.ModuleList of parameter-free heads that read their block of W_q/W_k/W_v
import math
from dataclasses import dataclass
import torch
from torch import nn


def head_weight_shape(d, d_total, num_heads):
    """Every head sees the whole projection width (d x d_total)."""
    if d < 1 or d_total < 1 or num_heads < 1:
        raise ValueError("sizes must be >= 1")
    if d_total % num_heads != 0:
        raise ValueError("d_total must be divisible by num_heads")
    return (d, d_total)


def project(H, W):
    return H @ W


def project_heads(H, W_heads):
    return H.unsqueeze(1) @ W_heads


def split_heads(X, num_heads):
    if X.shape[-1] % num_heads != 0:
        raise ValueError("not divisible")
    b, n, w = X.shape
    return X.reshape(b, n, num_heads, w // num_heads).permute(0, 2, 1, 3)


def concat_heads(X):
    b, h, n, p = X.shape
    return X.permute(0, 2, 1, 3).reshape(b, n, h * p)


class LengthMask:
    """Wraps valid_lens and turns it into a boolean key mask for a given score tensor."""

    def __init__(self, valid_lens):
        self.valid_lens = valid_lens

    def keep(self, scores):
        n_q, n_k = scores.shape[-2:]
        lens = self.valid_lens.to(scores.device)
        if lens.dim() == 1:
            lens = lens.reshape(-1, *([1] * (scores.dim() - 1)))
        else:
            lens = lens.reshape(lens.shape[0], *([1] * (scores.dim() - 3)), n_q, 1)
        return torch.arange(n_k, device=scores.device) < lens


def masked_softmax(scores, valid_lens=None):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    keep = LengthMask(valid_lens).keep(scores)
    w = torch.softmax(scores.masked_fill(~keep, torch.finfo(scores.dtype).min), dim=-1)
    return w.masked_fill(~keep, 0.0)


class ScaledDotProduct:
    def __call__(self, Q, K, V, valid_lens=None):
        scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
        w = masked_softmax(scores, valid_lens)
        return w @ V, w


def attention_pool(Q, K, V, valid_lens=None):
    return ScaledDotProduct()(Q, K, V, valid_lens)


@dataclass(frozen=True)
class HeadSpec:
    index: int
    width: int

    @property
    def rows(self):
        return slice(self.index * self.width, (self.index + 1) * self.width)


class AttentionHead(nn.Module):
    """One head. Holds no parameters of its own: it reads its row block of the shared Linears."""

    def __init__(self, spec, dropout):
        super().__init__()
        self.spec = spec
        self.dropout = nn.Dropout(dropout)
        self.pool = ScaledDotProduct()

    @staticmethod
    def _block(linear, rows, x):
        b = None if linear.bias is None else linear.bias[rows]
        return nn.functional.linear(x, linear.weight[rows], b)

    def forward(self, parent, queries, keys, values, valid_lens):
        r = self.spec.rows
        q = self._block(parent.W_q, r, queries)
        k = self._block(parent.W_k, r, keys)
        v = self._block(parent.W_v, r, values)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.spec.width)
        w = masked_softmax(scores, valid_lens)
        return self.dropout(w) @ v, w


class HeadCombiner:
    @staticmethod
    def combine(head_outputs):
        return torch.cat(head_outputs, dim=-1)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        d_total = d_model if d_total is None else d_total
        if num_heads < 1 or d_total % num_heads != 0:
            raise ValueError(f"d_total={d_total} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.head_dim = d_total // num_heads
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.heads = nn.ModuleList(AttentionHead(HeadSpec(j, self.head_dim), dropout) for j in range(num_heads))
        self.combiner = HeadCombiner()
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        outs, weights = [], []
        for head in self.heads:
            o, w = head(self, queries, keys, values, valid_lens)
            outs.append(o)
            weights.append(w)
        self.attention_weights = torch.stack(weights, dim=1)
        return self.combiner.combine(outs)
