# CODES:
# STYLE: UvA DL course Tutorial 6 / PyTorch-Lightning tutorial port (scaled_dot_product + expand_mask helpers, fused qkv then chunk, xavier _reset_parameters)
## Standard libraries
import math

## PyTorch
import torch
import torch.nn as nn
import torch.nn.functional as F


def head_weight_shape(d, d_total, num_heads):
    if min(d, d_total, num_heads) < 1:
        raise ValueError("All sizes must be positive.")
    if d_total % num_heads != 0:
        raise ValueError("Embedding dimension must be 0 modulo number of heads.")
    return d, d_total // num_heads


def project(H, W):
    return torch.matmul(H, W)


def project_heads(H, W_heads):
    # [Batch, 1, SeqLen, Dims] x [Head, Dims, HeadDim] -> [Batch, Head, SeqLen, HeadDim]
    return torch.matmul(H[:, None], W_heads)


def split_heads(X, num_heads):
    batch_size, seq_length, embed_dim = X.size()
    if num_heads < 1 or embed_dim % num_heads != 0:
        raise ValueError("Embedding dimension must be 0 modulo number of heads.")
    head_dim = embed_dim // num_heads
    X = X.reshape(batch_size, seq_length, num_heads, head_dim)
    return X.permute(0, 2, 1, 3)  # [Batch, Head, SeqLen, Dims]


def concat_heads(X):
    batch_size, num_heads, seq_length, head_dim = X.size()
    X = X.permute(0, 2, 1, 3)  # [Batch, SeqLen, Head, Dims]
    return X.reshape(batch_size, seq_length, num_heads * head_dim)


def expand_mask(valid_lens, attn_logits):
    """Turns valid lengths into a boolean mask that broadcasts against the logits.
    Supports lengths of shape [Batch] or [Batch, SeqLen_q]."""
    seq_k = attn_logits.size(-1)
    valid_lens = valid_lens.to(attn_logits.device)
    arange = torch.arange(seq_k, device=attn_logits.device)
    if valid_lens.ndim == 1:
        mask = arange[None, :] < valid_lens[:, None]          # [Batch, SeqLen_k]
        while mask.ndim < attn_logits.ndim:
            mask = mask.unsqueeze(1)
    else:
        mask = arange[None, None, :] < valid_lens[:, :, None]  # [Batch, SeqLen_q, SeqLen_k]
        while mask.ndim < attn_logits.ndim:
            mask = mask.unsqueeze(1)
    return mask


def masked_softmax(scores, valid_lens=None):
    if valid_lens is None:
        return F.softmax(scores, dim=-1)
    mask = expand_mask(valid_lens, scores)
    # The tutorial fills with -9e15; use the dtype's own lowest value so fp16 works too.
    attn_logits = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
    attention = F.softmax(attn_logits, dim=-1)
    # rows without any valid key would otherwise stay uniform
    return attention.masked_fill(mask == 0, 0.0)


def scaled_dot_product(q, k, v, mask=None):
    d_k = q.size()[-1]
    attn_logits = torch.matmul(q, k.transpose(-2, -1))
    attn_logits = attn_logits / math.sqrt(d_k)
    attention = masked_softmax(attn_logits, mask)
    values = torch.matmul(attention, v)
    return values, attention


def attention_pool(Q, K, V, valid_lens=None):
    return scaled_dot_product(Q, K, V, mask=valid_lens)


class MultiHeadAttention(nn.Module):

    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        embed_dim = d_model if d_total is None else d_total
        _, self.head_dim = head_weight_shape(d_model, embed_dim, num_heads)
        self.embed_dim = embed_dim
        self.num_heads = num_heads

        self.W_q = nn.Linear(d_model, embed_dim, bias=bias)
        self.W_k = nn.Linear(d_model, embed_dim, bias=bias)
        self.W_v = nn.Linear(d_model, embed_dim, bias=bias)
        self.W_o = nn.Linear(embed_dim, d_model, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)
        self.attention_weights = None

        self._reset_parameters()

    def _reset_parameters(self):
        # Original Transformer initialization, see PyTorch documentation
        for layer in (self.W_q, self.W_k, self.W_v, self.W_o):
            nn.init.xavier_uniform_(layer.weight)
            if layer.bias is not None:
                layer.bias.data.fill_(0)

    def _fused_qkv(self, x):
        # Self-attention fast path of the tutorial: one qkv projection, then chunk.
        weight = torch.cat([self.W_q.weight, self.W_k.weight, self.W_v.weight], dim=0)
        bias = None
        if self.W_q.bias is not None:
            bias = torch.cat([self.W_q.bias, self.W_k.bias, self.W_v.bias], dim=0)
        qkv = F.linear(x, weight, bias)                      # [Batch, SeqLen, 3*Embed]
        batch_size, seq_length, _ = qkv.size()
        qkv = qkv.reshape(batch_size, seq_length, 3, self.num_heads, self.head_dim)
        qkv = qkv.permute(2, 0, 3, 1, 4)                    # [3, Batch, Head, SeqLen, Dims]
        q, k, v = qkv.chunk(3, dim=0)
        return q[0], k[0], v[0]

    def forward(self, queries, keys, values, valid_lens=None):
        if queries is keys and keys is values:
            q, k, v = self._fused_qkv(queries)
        else:
            q = split_heads(self.W_q(queries), self.num_heads)
            k = split_heads(self.W_k(keys), self.num_heads)
            v = split_heads(self.W_v(values), self.num_heads)

        d_k = q.size(-1)
        attn_logits = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
        attention = masked_softmax(attn_logits, valid_lens)
        self.attention_weights = attention
        values = torch.matmul(self.attn_dropout(attention), v)
        values = concat_heads(values)                       # [Batch, SeqLen, Embed]
        return self.W_o(values)
