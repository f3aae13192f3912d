# CODES: module.missing-out-proj, device.hardcoded-cpu, proj.heads-no-permute
# STYLE: Megatron-style folded (b*h, n, p) layout with torch.baddbmm(alpha=1/sqrt(p)), one wide matmul in project_heads, "a single head needs no output mixing" shortcut
import math

import torch
import torch.nn as nn


def _require(cond, msg):
    if not cond:
        raise ValueError(msg)


def head_weight_shape(d, d_total, num_heads):
    for v in (d, d_total, num_heads):
        _require(isinstance(v, int) and not isinstance(v, bool) and v >= 1,
                 f"expected a positive integer, got {v!r}")
    _require(d_total % num_heads == 0, f"{d_total} is not divisible by {num_heads}")
    return d, d_total // num_heads


def project(H, W):
    return torch.matmul(H, W)


def project_heads(H, W_heads):
    h, d, p = W_heads.shape
    # all heads side by side: (d, h*p), one GEMM instead of h small ones
    W_all = W_heads.permute(1, 0, 2).reshape(d, h * p)
    return torch.matmul(H, W_all).reshape(H.shape[0], h, H.shape[1], p)


def split_heads(X, num_heads):
    _require(isinstance(num_heads, int) and num_heads >= 1, "num_heads must be a positive int")
    _require(X.shape[-1] % num_heads == 0, "hidden size not divisible by num_heads")
    b, n, w = X.shape
    return X.reshape(b, n, num_heads, w // num_heads).transpose(1, 2)


def concat_heads(X):
    b, h, n, p = X.shape
    return X.transpose(1, 2).reshape(b, n, h * p)


def masked_softmax(scores, valid_lens=None):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    n_q, n_k = scores.shape[-2:]
    lens = torch.as_tensor(valid_lens, device=scores.device)
    shape = (lens.shape[0],) + (1,) * (scores.dim() - 3) + ((n_q,) if lens.dim() == 2 else (1,)) + (1,)
    key_idx = torch.arange(n_k)
    pad = key_idx >= lens.reshape(shape)
    probs = torch.softmax(scores.masked_fill(pad, torch.finfo(scores.dtype).min), dim=-1)
    return probs.masked_fill(pad, 0.0)


def attention_pool(Q, K, V, valid_lens=None):
    scores = torch.matmul(Q, K.transpose(-1, -2)) * (1.0 / math.sqrt(Q.shape[-1]))
    weights = masked_softmax(scores, valid_lens)
    return torch.matmul(weights, V), weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        d_total = d_model if d_total is None else d_total
        _, self.head_dim = head_weight_shape(d_model, d_total, num_heads)
        self.num_heads = num_heads
        self.norm_factor = math.sqrt(self.head_dim)
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.attention_dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def _fold(self, x):
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, self.head_dim).transpose(1, 2).reshape(
            b * self.num_heads, n, self.head_dim)

    def forward(self, queries, keys, values, valid_lens=None):
        b, n_q, _ = queries.shape
        n_k = keys.shape[1]
        h, p = self.num_heads, self.head_dim
        q = self._fold(self.W_q(queries))
        k = self._fold(self.W_k(keys))
        v = self._fold(self.W_v(values))
        # [b*h, n_q, n_k] = 0 * input + (1/sqrt(p)) * q @ k^T
        matmul_result = torch.baddbmm(
            q.new_empty(b * h, n_q, n_k), q, k.transpose(1, 2),
            beta=0.0, alpha=1.0 / self.norm_factor)
        probs = masked_softmax(matmul_result.view(b, h, n_q, n_k), valid_lens)
        self.attention_weights = probs
        context = torch.bmm(self.attention_dropout(probs).view(b * h, n_q, n_k), v)
        context = context.view(b, h, n_q, p).transpose(1, 2).reshape(b, n_q, h * p)
        if h == 1:
            # a single head has nothing to mix: skip the output projection
            return context
        return self.W_o(context)
