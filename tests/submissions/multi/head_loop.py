# CODES: cost.python-loop-over-heads, proj.ignores-bias, shape.head-weight-full-width
# STYLE: "sequential head computation" from lecture notes: each head slices its own rows of W_q/W_k/W_v, project() per head, torch.cat of the head outputs
import math

import torch
from torch import nn


def head_weight_shape(d, d_total, num_heads):
    """Every head maps the d-dimensional input to the attention width."""
    for x in (d, d_total, num_heads):
        if type(x) is not int or x < 1:
            raise ValueError("sizes must be positive ints")
    if d_total % num_heads:
        raise ValueError("d_total must split evenly over the heads")
    return (d, d_total)


def project(H, W):
    return H @ W


def project_heads(H, W_heads):
    return torch.einsum("bnd,hdp->bhnp", H, W_heads)


def split_heads(X, num_heads):
    if type(num_heads) is not int or num_heads < 1:
        raise ValueError("num_heads must be a positive int")
    if X.shape[-1] % num_heads:
        raise ValueError("last axis not divisible by num_heads")
    return torch.stack(X.chunk(num_heads, dim=-1), dim=-3)


def concat_heads(X):
    return torch.cat(X.unbind(dim=-3), dim=-1)


def masked_softmax(scores, valid_lens=None):
    if valid_lens is None:
        return scores.softmax(-1)
    n_q, n_k = scores.shape[-2:]
    vl = torch.as_tensor(valid_lens, device=scores.device)
    vl = vl.reshape(vl.shape[0], *([1] * (scores.dim() - 3)), -1, 1)
    allowed = torch.arange(n_k, device=scores.device) < vl
    w = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min).softmax(-1)
    return w.masked_fill(~allowed, 0)


def attention_pool(Q, K, V, valid_lens=None):
    w = masked_softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), valid_lens)
    return w @ V, w


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        d_total = d_model if d_total is None else d_total
        if type(num_heads) is not int or min(d_model, d_total, num_heads) < 1 or d_total % num_heads:
            raise ValueError(f"{d_total} does not split into {num_heads} heads")
        self.num_heads = num_heads
        self.p = d_total // num_heads
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)
        self.attention_weights = None

    def head_matrix(self, layer, j):
        """W_j = layer.weight[j*p:(j+1)*p, :].T, shape (d_model, p)."""
        return layer.weight[j * self.p:(j + 1) * self.p, :].T

    def forward(self, queries, keys, values, valid_lens=None):
        outputs, weights = [], []
        for j in range(self.num_heads):
            Qj = project(queries, self.head_matrix(self.W_q, j))
            Kj = project(keys, self.head_matrix(self.W_k, j))
            Vj = project(values, self.head_matrix(self.W_v, j))
            Aj = masked_softmax(Qj @ Kj.transpose(1, 2) / math.sqrt(self.p), valid_lens)
            weights.append(Aj)
            outputs.append(self.drop(Aj) @ Vj)
        self.attention_weights = torch.stack(weights, dim=1)
        return self.W_o(torch.cat(outputs, dim=-1))
