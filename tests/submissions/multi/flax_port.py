# CODES: dtype.forces-float32, heads.identical-init
# STYLE: Flax/JAX port (DenseGeneral-style (b, n, h, p) layout with heads on axis 2, einsum 'bqhd,bkhd->bhqk', explicit PRNG-key init, force_fp32_for_softmax)
"""Port of flax.linen.MultiHeadDotProductAttention / dot_product_attention to PyTorch.

Flax keeps heads on axis -2 ([batch..., length, num_heads, head_dim]); I kept that layout
internally and only convert at the API boundary where the course wants heads on axis 1.
"""
import math

import torch
import torch.nn as nn


def head_weight_shape(d, d_total, num_heads):
    if not (d >= 1 and d_total >= 1 and num_heads >= 1):
        raise ValueError(f"invalid sizes d={d} d_total={d_total} num_heads={num_heads}")
    if d_total % num_heads != 0:
        raise ValueError(
            f"Memory dimension ({d_total}) must be divisible by number of heads ({num_heads}).")
    return (d, d_total // num_heads)


def project(H, W):
    # nn.DenseGeneral(features=p, axis=-1): contract the last axis of H with the first of W
    return torch.tensordot(H, W, dims=([-1], [0]))


def project_heads(H, W_heads):
    # kernel (num_heads, d, p) -> flax layout (d, num_heads, p)
    kernel = W_heads.permute(1, 0, 2)
    out = torch.einsum("bnd,dhp->bnhp", H, kernel)   # [batch, length, heads, head_dim]
    return out.swapaxes(1, 2)


def _to_bnhd(X, num_heads):
    b, n, features = X.shape
    return X.reshape(b, n, num_heads, features // num_heads)


def split_heads(X, num_heads):
    if num_heads < 1 or X.shape[-1] % num_heads:
        raise ValueError(f"features ({X.shape[-1]}) must be divisible by num_heads ({num_heads})")
    return _to_bnhd(X, num_heads).swapaxes(1, 2)


def concat_heads(X):
    b, h, n, p = X.shape
    return X.swapaxes(1, 2).reshape(b, n, h * p)


def _make_mask(valid_lens, logits):
    n_q, n_k = logits.shape[-2:]
    lens = valid_lens.to(logits.device)
    key_idx = torch.arange(n_k, device=logits.device)
    if lens.ndim == 1:
        lens = lens.reshape((-1,) + (1,) * (logits.ndim - 1))
    else:
        lens = lens.reshape((lens.shape[0],) + (1,) * (logits.ndim - 3) + (n_q, 1))
    return key_idx < lens


def _softmax(logits, mask=None):
    # force_fp32_for_softmax=True, as in flax: normalise in float32, cast back afterwards
    dtype = logits.dtype
    logits = logits.to(torch.float32)
    if mask is not None:
        big_neg = torch.finfo(logits.dtype).min
        logits = torch.where(mask, logits, big_neg)
    weights = torch.softmax(logits, dim=-1)
    if mask is not None:
        weights = torch.where(mask, weights, 0.0)
    return weights.to(dtype)


def masked_softmax(scores, valid_lens=None):
    mask = None if valid_lens is None else _make_mask(valid_lens, scores)
    return _softmax(scores, mask)


def attention_pool(Q, K, V, valid_lens=None):
    depth = Q.shape[-1]
    query = Q / math.sqrt(depth)
    attn_weights = torch.einsum("...qd,...kd->...qk", query, K)
    attn_weights = masked_softmax(attn_weights, valid_lens)
    return torch.einsum("...qk,...kd->...qd", attn_weights, V), attn_weights


def _lecun_normal_per_head(weight, num_heads, key):
    """kernel_init=lecun_normal(), drawn per head like DenseGeneral's (d, heads, head_dim) kernel."""
    out_features, in_features = weight.shape
    head_dim = out_features // num_heads
    with torch.no_grad():
        for h in range(num_heads):
            # jax.random.split(key) -- fold the head in later
            rng = torch.Generator().manual_seed(key)
            block = torch.randn(head_dim, in_features, generator=rng) / math.sqrt(in_features)
            weight[h * head_dim:(h + 1) * head_dim] = block.to(weight.dtype)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        qkv_features = d_model if d_total is None else d_total
        _, self.head_dim = head_weight_shape(d_model, qkv_features, num_heads)
        self.num_heads = num_heads
        self.dropout_rate = dropout
        self.W_q = nn.Linear(d_model, qkv_features, bias=bias)
        self.W_k = nn.Linear(d_model, qkv_features, bias=bias)
        self.W_v = nn.Linear(d_model, qkv_features, bias=bias)
        self.W_o = nn.Linear(qkv_features, d_model, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)
        self.attention_weights = None
        # flax: kernel_init=lecun_normal(), bias_init=zeros, one PRNG key per Dense
        for layer in (self.W_q, self.W_k, self.W_v):
            key = int(torch.randint(0, 2 ** 31 - 1, ()))
            _lecun_normal_per_head(layer.weight, num_heads, key)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
        nn.init.normal_(self.W_o.weight, std=1.0 / math.sqrt(qkv_features))
        if self.W_o.bias is not None:
            nn.init.zeros_(self.W_o.bias)

    def forward(self, queries, keys, values, valid_lens=None):
        # [batch, length, num_heads, head_dim]
        query = _to_bnhd(self.W_q(queries), self.num_heads)
        key = _to_bnhd(self.W_k(keys), self.num_heads)
        value = _to_bnhd(self.W_v(values), self.num_heads)

        query = query / math.sqrt(self.head_dim)
        attn_weights = torch.einsum("bqhd,bkhd->bhqk", query, key)
        mask = None if valid_lens is None else _make_mask(valid_lens, attn_weights)
        attn_weights = _softmax(attn_weights, mask)
        self.attention_weights = attn_weights
        attn_weights = self.attn_dropout(attn_weights)

        x = torch.einsum("bhqk,bkhd->bqhd", attn_weights, value)   # [batch, length, heads, head_dim]
        b, n_q = x.shape[:2]
        return self.W_o(x.reshape(b, n_q, -1))
