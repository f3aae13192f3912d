# CODES: mask.repeat-not-interleave, mask.zero-len-nan
# STYLE: hand re-implementation of torch.nn.functional.multi_head_attention_forward (packed in_proj split with chunk, q scaled before bmm, bsz*num_heads fold, key_padding_mask filled with -inf)
import math
import torch
import torch.nn.functional as F
from torch import nn


def head_weight_shape(d, d_total, num_heads):
    if min(d, d_total, num_heads) < 1:
        raise ValueError("embed_dim, d_total and num_heads must be >= 1")
    head_dim = d_total // num_heads
    if head_dim * num_heads != d_total:
        raise ValueError("embed_dim must be divisible by num_heads")
    return (d, head_dim)


def project(H, W):
    return H.matmul(W)


def project_heads(H, W_heads):
    num_heads, d, p = W_heads.shape
    bsz, n, _ = H.shape
    out = torch.bmm(H.unsqueeze(1).expand(bsz, num_heads, n, d).reshape(bsz * num_heads, n, d),
                    W_heads.repeat(bsz, 1, 1))
    return out.view(bsz, num_heads, n, p)


def split_heads(X, num_heads):
    bsz, n, embed_dim = X.shape
    head_dim = embed_dim // num_heads
    if head_dim * num_heads != embed_dim:
        raise ValueError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    return X.view(bsz, n, num_heads, head_dim).transpose(1, 2)


def concat_heads(X):
    bsz, num_heads, n, head_dim = X.shape
    return X.transpose(1, 2).contiguous().view(bsz, n, num_heads * head_dim)


def _key_padding_mask(valid_lens, n_q, n_k, device):
    """True where the key must be ignored: (bsz, 1|n_q, n_k)."""
    pos = torch.arange(n_k, device=device)
    if valid_lens.dim() == 1:
        return pos[None, None, :] >= valid_lens[:, None, None]
    return pos[None, None, :] >= valid_lens[:, :, None]


def masked_softmax(scores, valid_lens=None):
    if valid_lens is None:
        return F.softmax(scores, dim=-1)
    n_q, n_k = scores.shape[-2:]
    mask = _key_padding_mask(valid_lens.to(scores.device), n_q, n_k, scores.device)
    mask = mask.view(mask.shape[0], *([1] * (scores.dim() - 3)), mask.shape[1], n_k)
    scores = scores.masked_fill(mask, float("-inf"))
    return F.softmax(scores, dim=-1)


def attention_pool(Q, K, V, valid_lens=None):
    head_dim = Q.shape[-1]
    q = Q * (float(head_dim) ** -0.5)
    attn = masked_softmax(torch.matmul(q, K.transpose(-2, -1)), valid_lens)
    return torch.matmul(attn, V), attn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        self.embed_dim = d_model
        self.d_total = d_model if d_total is None else d_total
        _, self.head_dim = head_weight_shape(d_model, self.d_total, num_heads)
        self.num_heads = num_heads
        self.dropout = dropout
        self.W_q = nn.Linear(d_model, self.d_total, bias=bias)
        self.W_k = nn.Linear(d_model, self.d_total, bias=bias)
        self.W_v = nn.Linear(d_model, self.d_total, bias=bias)
        self.W_o = nn.Linear(self.d_total, d_model, bias=bias)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        bsz, tgt_len, embed_dim = queries.shape
        src_len = keys.shape[1]
        num_heads, head_dim = self.num_heads, self.head_dim
        # in_proj_weight / in_proj_bias as nn.MultiheadAttention packs them
        in_proj_weight = torch.cat([self.W_q.weight, self.W_k.weight, self.W_v.weight])
        w_q, w_k, w_v = in_proj_weight.chunk(3)
        if self.W_q.bias is not None:
            b_q, b_k, b_v = torch.cat([self.W_q.bias, self.W_k.bias, self.W_v.bias]).chunk(3)
        else:
            b_q = b_k = b_v = None
        q = F.linear(queries, w_q, b_q)
        k = F.linear(keys, w_k, b_k)
        v = F.linear(values, w_v, b_v)
        scaling = float(head_dim) ** -0.5
        q = q * scaling
        q = q.contiguous().view(bsz, tgt_len, num_heads, head_dim).transpose(1, 2).reshape(bsz * num_heads, tgt_len, head_dim)
        k = k.contiguous().view(bsz, src_len, num_heads, head_dim).transpose(1, 2).reshape(bsz * num_heads, src_len, head_dim)
        v = v.contiguous().view(bsz, src_len, num_heads, head_dim).transpose(1, 2).reshape(bsz * num_heads, src_len, head_dim)
        attn_output_weights = torch.bmm(q, k.transpose(1, 2))  # (bsz*num_heads, tgt_len, src_len)
        if valid_lens is not None:
            # one length (row) per (batch, head) pair
            lens = valid_lens.to(queries.device)
            lens = lens.repeat(num_heads) if lens.dim() == 1 else lens.repeat(num_heads, 1)
            key_padding_mask = _key_padding_mask(lens, tgt_len, src_len, queries.device)
            attn_output_weights = attn_output_weights.masked_fill(key_padding_mask, float("-inf"))
        attn_output_weights = F.softmax(attn_output_weights, dim=-1)
        self.attention_weights = attn_output_weights.view(bsz, num_heads, tgt_len, src_len)
        attn_output_weights = F.dropout(attn_output_weights, p=self.dropout, training=self.training)
        attn_output = torch.bmm(attn_output_weights, v)
        attn_output = attn_output.view(bsz, num_heads, tgt_len, head_dim).transpose(1, 2).contiguous().view(bsz, tgt_len, self.d_total)
        return self.W_o(attn_output)
