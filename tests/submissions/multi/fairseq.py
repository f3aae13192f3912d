# CODES: dtype.forces-float32, shape.no-valueerror, mask.zero-len-nan
# STYLE: fairseq MultiheadAttention: q *= self.scaling, heads folded into bsz * num_heads with .contiguous().view, key_padding_mask filled with -inf, utils.softmax(..., dtype=torch.float32) then type_as, asserts on embed_dim
import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def utils_softmax(x, dim: int, onnx_trace: bool = False):
    if onnx_trace:
        return F.softmax(x.float(), dim=dim)
    else:
        return F.softmax(x, dim=dim, dtype=torch.float32)


def head_weight_shape(d, d_total, num_heads):
    head_dim = d_total // num_heads
    assert d > 0 and head_dim > 0, "sizes must be positive"
    assert head_dim * num_heads == d_total, "embed_dim must be divisible by num_heads"
    return (d, head_dim)


def project(H, W):
    return torch.matmul(H, W)


def project_heads(H, W_heads):
    return torch.matmul(H.unsqueeze(1), W_heads)


def split_heads(x, num_heads):
    bsz, seq_len, embed_dim = x.size()
    head_dim = embed_dim // num_heads
    assert head_dim * num_heads == embed_dim, "embed_dim must be divisible by num_heads"
    return x.contiguous().view(bsz, seq_len, num_heads, head_dim).transpose(1, 2)


def concat_heads(attn):
    bsz, num_heads, tgt_len, head_dim = attn.size()
    return attn.transpose(1, 2).contiguous().view(bsz, tgt_len, num_heads * head_dim)


def _key_padding_mask(valid_lens: Tensor, attn_weights: Tensor) -> Tensor:
    """True at padding positions, broadcastable to attn_weights."""
    tgt_len, src_len = attn_weights.shape[-2:]
    lens = valid_lens.to(attn_weights.device)
    if lens.dim() == 1:
        lens = lens.view(-1, *([1] * (attn_weights.dim() - 1)))
    else:
        lens = lens.view(lens.size(0), *([1] * (attn_weights.dim() - 3)), tgt_len, 1)
    return torch.arange(src_len, device=attn_weights.device) >= lens


def masked_softmax(attn_weights, valid_lens=None):
    if valid_lens is not None:
        attn_weights = attn_weights.masked_fill(_key_padding_mask(valid_lens, attn_weights), float("-inf"))
    return utils_softmax(attn_weights, dim=-1).type_as(attn_weights)


def attention_pool(q, k, v, valid_lens=None):
    scaling = q.size(-1) ** -0.5
    attn_weights = torch.matmul(q, k.transpose(-1, -2)) * scaling
    attn_weights = masked_softmax(attn_weights, valid_lens)
    return torch.matmul(attn_weights, v), attn_weights


class MultiHeadAttention(nn.Module):
    """Multi-headed attention.

    See "Attention Is All You Need" for more details.
    """

    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        self.embed_dim = d_model
        self.inner_dim = d_model if d_total is None else d_total
        self.num_heads = num_heads
        self.dropout_module = nn.Dropout(dropout)

        self.head_dim = self.inner_dim // num_heads
        assert (
            self.head_dim * num_heads == self.inner_dim
        ), "embed_dim must be divisible by num_heads"
        self.scaling = self.head_dim ** -0.5

        self.W_k = nn.Linear(d_model, self.inner_dim, bias=bias)
        self.W_v = nn.Linear(d_model, self.inner_dim, bias=bias)
        self.W_q = nn.Linear(d_model, self.inner_dim, bias=bias)
        self.W_o = nn.Linear(self.inner_dim, d_model, bias=bias)
        self.attention_weights = None

    def forward(self, query, key, value, valid_lens: Optional[Tensor] = None):
        bsz, tgt_len, embed_dim = query.size()
        src_len = key.size(1)
        assert embed_dim == self.embed_dim, f"query dim {embed_dim} != {self.embed_dim}"

        q = self.W_q(query)
        k = self.W_k(key)
        v = self.W_v(value)
        q *= self.scaling

        q = q.contiguous().view(bsz, tgt_len, self.num_heads, self.head_dim).transpose(1, 2) \
            .reshape(bsz * self.num_heads, tgt_len, self.head_dim)
        k = k.contiguous().view(bsz, src_len, self.num_heads, self.head_dim).transpose(1, 2) \
            .reshape(bsz * self.num_heads, src_len, self.head_dim)
        v = v.contiguous().view(bsz, src_len, self.num_heads, self.head_dim).transpose(1, 2) \
            .reshape(bsz * self.num_heads, src_len, self.head_dim)

        attn_weights = torch.bmm(q, k.transpose(1, 2))
        assert list(attn_weights.size()) == [bsz * self.num_heads, tgt_len, src_len]

        if valid_lens is not None:
            # don't attend to padding symbols
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
            attn_weights = attn_weights.masked_fill(
                _key_padding_mask(valid_lens, attn_weights), float("-inf"))
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)

        attn_weights_float = utils_softmax(attn_weights, dim=-1)
        attn_weights = attn_weights_float.type_as(attn_weights)
        attn_probs = self.dropout_module(attn_weights)

        attn = torch.bmm(attn_probs, v)
        assert list(attn.size()) == [bsz * self.num_heads, tgt_len, self.head_dim]
        attn = attn.view(bsz, self.num_heads, tgt_len, self.head_dim).transpose(1, 2) \
            .contiguous().view(bsz, tgt_len, self.inner_dim)
        attn = self.W_o(attn)
        self.attention_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
        return attn
