# CODES: concat.view-noncontiguous, mask.zero-len-uniform, mask.fp16-overflow, shape.no-valueerror
# STYLE: The Annotated Transformer (harvardnlp): clones(), attention() with masked_fill(mask == 0, -1e9), .view + transpose, asserts on sizes
import copy
import math

import torch
import torch.nn as nn


def clones(module, N):
    "Produce N identical layers."
    return nn.ModuleList([copy.deepcopy(module) for _ in range(N)])


def head_weight_shape(d, d_total, num_heads):
    assert d > 0 and d_total > 0 and num_heads > 0, "sizes must be positive"
    assert d_total % num_heads == 0, "d_total must be divisible by the number of heads"
    d_k = d_total // num_heads
    return (d, d_k)


def project(H, W):
    return torch.matmul(H, W)


def project_heads(H, W_heads):
    # (nbatches, 1, n, d) @ (h, d, d_k) -> (nbatches, h, n, d_k)
    return torch.matmul(H.unsqueeze(1), W_heads)


def split_heads(X, num_heads):
    assert X.size(-1) % num_heads == 0
    nbatches = X.size(0)
    d_k = X.size(-1) // num_heads
    return X.view(nbatches, -1, num_heads, d_k).transpose(1, 2)


def concat_heads(X):
    "Concat using a view."
    nbatches, h, _, d_k = X.size()
    return X.transpose(1, 2).view(nbatches, -1, h * d_k)


def length_mask(valid_lens, scores):
    "1 where a key may be attended, 0 for padding: (nbatches, 1.., n_q or 1, n_k)."
    n_q, n_k = scores.shape[-2:]
    lens = torch.as_tensor(valid_lens, device=scores.device)
    if lens.dim() == 1:
        lens = lens.view(-1, *([1] * (scores.dim() - 1)))
    else:
        lens = lens.view(lens.size(0), *([1] * (scores.dim() - 3)), n_q, 1)
    return (torch.arange(n_k, device=scores.device) < lens).long()


def masked_softmax(scores, valid_lens=None):
    if valid_lens is not None:
        mask = length_mask(valid_lens, scores)
        scores = scores.masked_fill(mask == 0, -1e9)
    return scores.softmax(dim=-1)


def attention(query, key, value, mask=None, dropout=None):
    "Compute 'Scaled Dot Product Attention'"
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = scores.softmax(dim=-1)
    if dropout is not None:
        return torch.matmul(dropout(p_attn), value), p_attn
    return torch.matmul(p_attn, value), p_attn


def attention_pool(Q, K, V, valid_lens=None):
    mask = None if valid_lens is None else length_mask(
        valid_lens, Q.new_empty(*Q.shape[:-1], K.size(-2)))
    return attention(Q, K, V, mask=mask)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        "Take in model size and number of heads."
        super(MultiHeadAttention, self).__init__()
        d_total = d_model if d_total is None else d_total
        assert d_total % num_heads == 0
        # We assume d_v always equals d_k
        self.d_k = d_total // num_heads
        self.h = num_heads
        self.W_q, self.W_k, self.W_v = clones(nn.Linear(d_model, d_total, bias=bias), 3)
        for lin in (self.W_q, self.W_k, self.W_v):
            lin.reset_parameters()  # clones() deep-copies: draw fresh weights for each
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.attention_weights = None
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, valid_lens=None):
        "Implements Figure 2"
        nbatches = query.size(0)
        mask = None
        if valid_lens is not None:
            # Same mask applied to all h heads.
            mask = length_mask(valid_lens, query.new_empty(nbatches, 1, query.size(1), key.size(1)))

        # 1) Do all the linear projections in batch from d_model => h x d_k
        query, key, value = [
            lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
            for lin, x in zip((self.W_q, self.W_k, self.W_v), (query, key, value))
        ]

        # 2) Apply attention on all the projected vectors in batch.
        x, self.attention_weights = attention(
            query, key, value, mask=mask, dropout=self.dropout
        )

        # 3) "Concat" using a view and apply a final linear.
        x = (
            x.transpose(1, 2)
            .contiguous()
            .view(nbatches, -1, self.h * self.d_k)
        )
        del query
        del key
        del value
        return self.W_o(x)
