# CODES:
# STYLE: vision-transformer/conv style: heads kept channels-first (b, h, p, n) internally, rearrange-like permutes ('b n (h p) -> b h p n'), einsum 'bhpi,bhpj->bhij', scale multiplied as p ** -0.5
import torch
from torch import nn


def head_weight_shape(d, d_total, num_heads):
    if d < 1 or d_total < 1 or num_heads < 1:
        raise ValueError('sizes must be positive')
    if d_total % num_heads:
        raise ValueError('dim_head * heads must equal d_total')
    return d, d_total // num_heads


def project(H, W):
    return torch.einsum('...nd,dp->...np', H, W)


def project_heads(H, W_heads):
    return torch.einsum('bnd,hdp->bhnp', H, W_heads)


def _to_channels_first(x, heads):
    # 'b n (h p) -> b h p n'
    b, n, c = x.shape
    return x.transpose(1, 2).reshape(b, heads, c // heads, n)


def _from_channels_first(x):
    # 'b h p n -> b n (h p)'
    b, h, p, n = x.shape
    return x.reshape(b, h * p, n).transpose(1, 2)


def split_heads(X, num_heads):
    if num_heads < 1 or X.shape[-1] % num_heads:
        raise ValueError('last axis must be divisible by num_heads')
    return _to_channels_first(X, num_heads).transpose(-1, -2)   # b h n p


def concat_heads(X):
    return _from_channels_first(X.transpose(-1, -2))            # b n (h p)


def _keep(sim, valid_lens):
    i, j = sim.shape[-2:]
    lens = valid_lens.to(sim.device)
    if lens.ndim == 1:
        lens = lens.reshape(-1, *((1,) * (sim.ndim - 1)))
    else:
        lens = lens.reshape(lens.shape[0], *((1,) * (sim.ndim - 3)), i, 1)
    return lens > torch.arange(j, device=sim.device)


def masked_softmax(scores, valid_lens=None):
    if valid_lens is None:
        return scores.softmax(dim=-1)
    keep = _keep(scores, valid_lens)
    mask_value = -torch.finfo(scores.dtype).max
    attn = scores.masked_fill(~keep, mask_value).softmax(dim=-1)
    return attn * keep


def attention_pool(Q, K, V, valid_lens=None):
    scale = Q.shape[-1] ** -0.5
    sim = torch.einsum('...id,...jd->...ij', Q, K) * scale
    attn = masked_softmax(sim, valid_lens)
    return torch.einsum('...ij,...jd->...id', attn, V), attn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        inner_dim = d_total if d_total is not None else d_model
        _, dim_head = head_weight_shape(d_model, inner_dim, num_heads)
        self.heads = num_heads
        self.scale = dim_head ** -0.5
        self.W_q = nn.Linear(d_model, inner_dim, bias=bias)
        self.W_k = nn.Linear(d_model, inner_dim, bias=bias)
        self.W_v = nn.Linear(d_model, inner_dim, bias=bias)
        self.W_o = nn.Linear(inner_dim, d_model, bias=bias)
        self.attn_drop = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        h = self.heads
        q = _to_channels_first(self.W_q(queries), h)   # b h p i
        k = _to_channels_first(self.W_k(keys), h)      # b h p j
        v = _to_channels_first(self.W_v(values), h)    # b h p j

        sim = torch.einsum('bhpi,bhpj->bhij', q, k) * self.scale
        attn = masked_softmax(sim, valid_lens)
        self.attention_weights = attn

        out = torch.einsum('bhij,bhpj->bhpi', self.attn_drop(attn), v)   # b h p i
        return self.W_o(_from_channels_first(out))
