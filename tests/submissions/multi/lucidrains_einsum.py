# CODES: split.wrong-head-order, pool.softmax-wrong-axis, mask.ignores-valid-lens
# STYLE: lucidrains-style (x-transformers / vit-pytorch) without einops: einsum('b h i d, b h j d -> b h i j'), a hand-written rearrange for 'b n (d h) -> b h n d', sim.softmax over i, forward keeps the mask argument but never uses it
import math
from numbers import Integral

import torch
from torch import nn, einsum


def exists(val):
    return val is not None


def default(val, d):
    return val if exists(val) else d


def _pos_int(x):
    return isinstance(x, Integral) and not isinstance(x, bool) and x > 0


def head_weight_shape(d, d_total, num_heads):
    if not (_pos_int(d) and _pos_int(d_total) and _pos_int(num_heads)):
        raise ValueError('dimensions must be positive integers')
    if d_total % num_heads != 0:
        raise ValueError('inner dimension must be divisible by heads')
    return (d, d_total // num_heads)


def project(H, W):
    return einsum('... n d, d p -> ... n p', H, W)


def project_heads(H, W_heads):
    return einsum('b n d, h d p -> b h n p', H, W_heads)


def split_heads(t, num_heads):
    # rearrange(t, 'b n (d h) -> b h n d', h = num_heads)
    if not _pos_int(num_heads):
        raise ValueError('heads must be a positive integer')
    b, n, hd = t.shape
    if hd % num_heads != 0:
        raise ValueError(f'{hd} not divisible by heads={num_heads}')
    return t.reshape(b, n, hd // num_heads, num_heads).permute(0, 3, 1, 2)


def concat_heads(t):
    # rearrange(t, 'b h n d -> b n (h d)')
    b, h, n, d = t.shape
    return t.permute(0, 2, 1, 3).reshape(b, n, h * d)


def masked_softmax(sim, valid_lens=None):
    mask = None
    if exists(valid_lens):
        i, j = sim.shape[-2:]
        lens = valid_lens.to(sim.device)
        lens = lens.reshape(lens.shape[0], *((1,) * (sim.ndim - 3)), -1, 1)
        mask = torch.arange(j, device=sim.device) < lens
        mask_value = -torch.finfo(sim.dtype).max
        sim = sim.masked_fill(~mask, mask_value)
    attn = sim.softmax(dim=-2)
    if exists(mask):
        attn = attn.masked_fill(~mask, 0.)
    return attn


def attention_pool(q, k, v, valid_lens=None):
    scale = q.shape[-1] ** -0.5
    sim = einsum('... i d, ... j d -> ... i j', q, k) * scale
    attn = masked_softmax(sim, valid_lens)
    return einsum('... i j, ... j d -> ... i d', attn, v), attn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.):
        super().__init__()
        inner_dim = default(d_total, d_model)
        _, dim_head = head_weight_shape(d_model, inner_dim, num_heads)
        self.heads = num_heads
        self.scale = dim_head ** -0.5

        self.W_q = nn.Linear(d_model, inner_dim, bias=bias)
        self.W_k = nn.Linear(d_model, inner_dim, bias=bias)
        self.W_v = nn.Linear(d_model, inner_dim, bias=bias)
        self.W_o = nn.Linear(inner_dim, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        h = self.heads
        q, k, v = (split_heads(fn(t), h) for fn, t in
                   ((self.W_q, queries), (self.W_k, keys), (self.W_v, values)))

        sim = einsum('b h i d, b h j d -> b h i j', q, k) * self.scale
        attn = masked_softmax(sim)
        self.attention_weights = attn
        attn = self.dropout(attn)

        out = einsum('b h i j, b h j d -> b h i d', attn, v)
        out = concat_heads(out)
        return self.W_o(out)
