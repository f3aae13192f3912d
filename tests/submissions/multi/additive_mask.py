# CODES: mask.zero-len-uniform, pool.scale-d-model, api.mutates-input
# STYLE: library-style code with numpy docstrings; lengths turned into an additive float mask (0 / -10000) added in place to the scores, T2T/BERT-era constant
"""Multi-head attention with additive masking.

Notes
-----
Padding is handled the way tensor2tensor and the original BERT code do it: build a float
``attention_bias`` that is 0 for visible keys and -10000 for padded ones, and add it to the
logits before the softmax.
"""
import math

import torch
from torch import nn

_NEG_BIAS = -10000.0


def head_weight_shape(d, d_total, num_heads):
    """Return the shape of one head's projection matrix.

    Parameters
    ----------
    d, d_total, num_heads : int

    Returns
    -------
    tuple of int
        ``(d, d_total // num_heads)``
    """
    if d < 1 or d_total < 1 or num_heads < 1:
        raise ValueError("d, d_total and num_heads must be positive")
    if d_total % num_heads != 0:
        raise ValueError("The hidden size (%d) is not a multiple of the number of attention "
                         "heads (%d)" % (d_total, num_heads))
    return (d, d_total // num_heads)


def project(H, W):
    """Row-vector projection ``H @ W``."""
    return torch.matmul(H, W)


def project_heads(H, W_heads):
    """Project ``H`` (batch, n, d) with ``W_heads`` (heads, d, p) -> (batch, heads, n, p)."""
    return torch.einsum("bnd,hdp->bhnp", H, W_heads)


def split_heads(X, num_heads):
    """(batch, n, heads*p) -> (batch, heads, n, p)."""
    batch, n, width = X.shape
    if num_heads < 1 or width % num_heads != 0:
        raise ValueError("width %d is not a multiple of num_heads %d" % (width, num_heads))
    return X.reshape(batch, n, num_heads, width // num_heads).permute(0, 2, 1, 3)


def concat_heads(X):
    """(batch, heads, n, p) -> (batch, n, heads*p)."""
    batch, heads, n, p = X.shape
    return X.permute(0, 2, 1, 3).reshape(batch, n, heads * p)


def attention_bias(valid_lens, scores):
    """Additive bias broadcastable to ``scores``: 0 where visible, -10000 where padded."""
    n_q, n_k = scores.shape[-2], scores.shape[-1]
    lens = valid_lens.to(scores.device)
    if lens.dim() == 1:
        lens = lens.reshape((-1,) + (1,) * (scores.dim() - 1))
    else:
        lens = lens.reshape((lens.shape[0],) + (1,) * (scores.dim() - 3) + (n_q, 1))
    visible = (torch.arange(n_k, device=scores.device) < lens).to(scores.dtype)
    return (1.0 - visible) * _NEG_BIAS


def masked_softmax(scores, valid_lens=None):
    """Softmax over the key axis with padded keys suppressed.

    Parameters
    ----------
    scores : Tensor, (batch, ..., n_q, n_k)
    valid_lens : Tensor or None, (batch,) or (batch, n_q)
    """
    if valid_lens is not None:
        scores += attention_bias(valid_lens, scores)
    return torch.softmax(scores, dim=-1)


def attention_pool(Q, K, V, valid_lens=None):
    """Scaled dot-product pooling; returns (context, weights)."""
    scores = torch.matmul(Q, K.transpose(-1, -2)) / math.sqrt(Q.shape[-1])
    weights = masked_softmax(scores, valid_lens)
    return torch.matmul(weights, V), weights


class MultiHeadAttention(nn.Module):
    """Multi-head attention (Vaswani et al., 2017) with additive masking.

    Parameters
    ----------
    d_model : int
    num_heads : int
    d_total : int, optional
        total width of the query/key/value projections (default ``d_model``)
    bias : bool
    dropout : float
        dropout on the attention probabilities
    """

    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        if d_total is None:
            d_total = d_model
        _, self.attention_head_size = head_weight_shape(d_model, d_total, num_heads)
        self.d_model = d_model
        self.num_attention_heads = num_heads
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        q = split_heads(self.W_q(queries), self.num_attention_heads)
        k = split_heads(self.W_k(keys), self.num_attention_heads)
        v = split_heads(self.W_v(values), self.num_attention_heads)
        # Take the dot product between "query" and "key" to get the raw attention scores.
        scores = torch.matmul(q, k.transpose(-1, -2))
        scores = scores / math.sqrt(self.d_model)
        probs = masked_softmax(scores, valid_lens)
        self.attention_weights = probs
        context = torch.matmul(self.dropout(probs), v)
        return self.W_o(concat_heads(context))
