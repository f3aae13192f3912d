# CODES: api.forbidden-sdpa, module.dropout-in-eval
# STYLE: nanoGPT CausalSelfAttention (karpathy/nanoGPT model.py): self.flash fast path through scaled_dot_product_attention with dropout_p=self.dropout, .view + transpose(1, 2), F.dropout in the slow path
import math

import torch
import torch.nn as nn
from torch.nn import functional as F


def head_weight_shape(d, d_total, num_heads):
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (d, d_total, num_heads)):
        raise ValueError("d, d_total and num_heads must be positive integers")
    if d_total % num_heads != 0:
        raise ValueError("n_embd must be divisible by n_head")
    return (d, d_total // num_heads)


def project(H, W):
    return H @ W


def project_heads(H, W_heads):
    return H.unsqueeze(1) @ W_heads


def split_heads(X, num_heads):
    if not isinstance(num_heads, int) or num_heads < 1 or X.size(-1) % num_heads != 0:
        raise ValueError("n_embd must be divisible by n_head")
    B, T, C = X.size()
    return X.view(B, T, num_heads, C // num_heads).transpose(1, 2)  # (B, nh, T, hs)


def concat_heads(X):
    B, nh, T, hs = X.size()
    return X.transpose(1, 2).contiguous().view(B, T, nh * hs)  # re-assemble all head outputs side by side


def masked_softmax(att, valid_lens=None):
    if valid_lens is None:
        return F.softmax(att, dim=-1)
    T_q, T_k = att.shape[-2:]
    lens = valid_lens.to(att.device)
    if lens.dim() == 1:
        lens = lens.view(-1, *([1] * (att.dim() - 1)))
    else:
        lens = lens.view(lens.size(0), *([1] * (att.dim() - 3)), T_q, 1)
    keep = torch.arange(T_k, device=att.device) < lens
    att = att.masked_fill(~keep, torch.finfo(att.dtype).min)
    att = F.softmax(att, dim=-1)
    return att.masked_fill(~keep, 0.0)


def attention_pool(Q, K, V, valid_lens=None):
    att = (Q @ K.transpose(-2, -1)) * (1.0 / math.sqrt(K.size(-1)))
    att = masked_softmax(att, valid_lens)
    return att @ V, att


class MultiHeadAttention(nn.Module):

    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        n_embd = d_model if d_total is None else d_total
        if min(d_model, n_embd, num_heads) < 1 or n_embd % num_heads != 0:
            raise ValueError("n_embd must be divisible by n_head")
        # key, query, value projections for all heads
        self.W_q = nn.Linear(d_model, n_embd, bias=bias)
        self.W_k = nn.Linear(d_model, n_embd, bias=bias)
        self.W_v = nn.Linear(d_model, n_embd, bias=bias)
        # output projection
        self.W_o = nn.Linear(n_embd, d_model, bias=bias)
        self.n_head = num_heads
        self.n_embd = n_embd
        self.dropout = dropout
        # flash attention make GPU go brrrrr but support is only in PyTorch >= 2.0
        self.flash = hasattr(torch.nn.functional, 'scaled_dot_product_attention')
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        B, T, _ = queries.size()  # batch size, sequence length
        S = keys.size(1)
        hs = self.n_embd // self.n_head

        # calculate query, key, values for all heads in batch and move head forward to be the batch dim
        q = self.W_q(queries).view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = self.W_k(keys).view(B, S, self.n_head, hs).transpose(1, 2)     # (B, nh, S, hs)
        v = self.W_v(values).view(B, S, self.n_head, hs).transpose(1, 2)   # (B, nh, S, hs)

        # the weights are kept for plotting, the flash kernel does not return them
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = masked_softmax(att, valid_lens)
        self.attention_weights = att
        if self.flash and valid_lens is None:
            # efficient attention using Flash Attention CUDA kernels
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=self.dropout, is_causal=False)
        else:
            # manual implementation of attention
            att = F.dropout(att, p=self.dropout)
            y = att @ v  # (B, nh, T, S) x (B, nh, S, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, self.n_embd)  # re-assemble all head outputs side by side

        # output projection
        y = self.W_o(y)
        return y
