# CODES: mask.after-softmax, pool.no-scale, heads.identical-init
# STYLE: Performer / linear-attention student who kept softmax but writes it by hand with exp/sum, kernel-feature-map vocabulary, custom per-head init
import math
import torch
from torch import nn


def head_weight_shape(d, d_total, num_heads):
    if not (d >= 1 and d_total >= 1 and num_heads >= 1):
        raise ValueError("all sizes must be >= 1")
    if d_total % num_heads:
        raise ValueError("d_total % num_heads != 0")
    return (d, d_total // num_heads)


def project(H, W):
    return torch.einsum("...nd,dp->...np", H, W)


def project_heads(H, W_heads):
    return torch.einsum("bnd,hdp->bhnp", H, W_heads)


def split_heads(X, num_heads):
    if X.shape[-1] % num_heads:
        raise ValueError("feature dim must be divisible by num_heads")
    b, n, f = X.shape
    return X.view(b, n, num_heads, f // num_heads).transpose(1, 2)


def concat_heads(X):
    b, h, n, p = X.shape
    return X.transpose(1, 2).reshape(b, n, h * p)


def _positive_kernel(scores):
    # phi(q)^T phi(k) = exp(q.k): the softmax kernel, stabilised by the row max
    return torch.exp(scores - scores.amax(dim=-1, keepdim=True))


def masked_softmax(scores, valid_lens=None):
    A = _positive_kernel(scores)
    A = A / A.sum(dim=-1, keepdim=True)            # row-normalise (D^-1 A)
    if valid_lens is not None:
        n_q, n_k = scores.shape[-2:]
        idx = torch.arange(n_k, device=scores.device)
        if valid_lens.dim() == 1:
            lens = valid_lens.view(-1, *([1] * (scores.dim() - 1)))
        else:
            lens = valid_lens.view(valid_lens.shape[0], *([1] * (scores.dim() - 3)), n_q, 1)
        A = A * (idx < lens).to(A.dtype)          # drop padded keys
    return A


def attention_pool(Q, K, V, valid_lens=None):
    # the kernel trick needs exp(q.k); no temperature here
    A = masked_softmax(Q @ K.transpose(-1, -2), valid_lens)
    return A @ V, A


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        d_total = d_total or d_model
        _, p = head_weight_shape(d_model, d_total, num_heads)
        self.h, self.p = num_heads, p
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)
        self._init_heads()
        self.attention_weights = None

    @torch.no_grad()
    def _init_heads(self):
        # Xavier per head (fan_out = p, not d_total), same draw reused for every head block
        for lin in (self.W_q, self.W_k, self.W_v):
            block = torch.empty(self.p, lin.in_features)
            nn.init.xavier_uniform_(block)
            lin.weight.copy_(block.repeat(self.h, 1))

    def forward(self, queries, keys, values, valid_lens=None):
        Q = split_heads(self.W_q(queries), self.h)
        K = split_heads(self.W_k(keys), self.h)
        V = split_heads(self.W_v(values), self.h)
        out, A = attention_pool(Q, K, V, valid_lens)
        self.attention_weights = A
        out = self.drop(A) @ V
        return self.W_o(concat_heads(out))
