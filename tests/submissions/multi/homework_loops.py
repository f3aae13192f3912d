# CODES: mask.zero-len-uniform, mask.fp16-overflow, api.mutates-input
# STYLE: course homework solution, D2L helpers copied in (sequence_mask / -1e6), explicit loop over batch elements in forward
import math
import torch
from torch import nn


def head_weight_shape(d, d_total, num_heads):
    # TODO(student): each head gets d_total / num_heads columns
    if d < 1 or d_total < 1 or num_heads < 1:
        raise ValueError("sizes must be positive")
    if d_total % num_heads != 0:
        raise ValueError("d_total must be divisible by num_heads")
    return (d, d_total // num_heads)


def project(H, W):
    return torch.matmul(H, W)


def project_heads(H, W_heads):
    # H: (batch, n, d), W_heads: (num_heads, d, p)
    return torch.matmul(H.unsqueeze(1), W_heads)


def split_heads(X, num_heads):
    if X.shape[-1] % num_heads != 0:
        raise ValueError("last dim not divisible by num_heads")
    batch, n, width = X.shape
    X = X.reshape(batch, n, num_heads, width // num_heads)
    return X.permute(0, 2, 1, 3)


def concat_heads(X):
    batch, num_heads, n, p = X.shape
    X = X.permute(0, 2, 1, 3)
    return X.reshape(batch, n, num_heads * p)


def sequence_mask(X, valid_len, value=0):
    """Mask irrelevant entries in sequences (from d2l)."""
    maxlen = X.size(1)
    mask = torch.arange((maxlen), dtype=torch.float32,
                        device=X.device)[None, :] < valid_len[:, None]
    X[~mask] = value
    return X


def masked_softmax(X, valid_lens=None):
    """Perform softmax operation by masking elements on the last axis (from d2l)."""
    # X: 3D or 4D tensor, valid_lens: 1D or 2D tensor
    if valid_lens is None:
        return nn.functional.softmax(X, dim=-1)
    else:
        shape = X.shape
        if valid_lens.dim() == 1:
            valid_lens = torch.repeat_interleave(valid_lens, X[0].numel() // shape[-1])
        else:
            # (batch, n_q) -> one length per row, shared by the heads
            valid_lens = valid_lens.reshape(shape[0], *([1] * (X.dim() - 3)), shape[-2])
            valid_lens = valid_lens.expand(*shape[:-1]).reshape(-1)
        # On the last axis, replace masked elements with a very large negative
        # value, whose exponentiation outputs 0
        X = sequence_mask(X.reshape(-1, shape[-1]), valid_lens, value=-1e6)
        return nn.functional.softmax(X.reshape(shape), dim=-1)


def attention_pool(Q, K, V, valid_lens=None):
    d = Q.shape[-1]
    scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(d)
    attention_weights = masked_softmax(scores, valid_lens)
    return torch.matmul(attention_weights, V), attention_weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        if d_total is None:
            d_total = d_model
        _, self.head_dim = head_weight_shape(d_model, d_total, num_heads)
        self.num_heads = num_heads
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        outputs = []
        all_weights = []
        # process one example of the batch at a time (easier to debug)
        for b in range(queries.shape[0]):
            q = self.W_q(queries[b:b + 1])      # (1, n_q, d_total)
            k = self.W_k(keys[b:b + 1])
            v = self.W_v(values[b:b + 1])
            q = split_heads(q, self.num_heads)  # (1, h, n_q, p)
            k = split_heads(k, self.num_heads)
            v = split_heads(v, self.num_heads)
            vl = None if valid_lens is None else valid_lens[b:b + 1]
            scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
            w = masked_softmax(scores, vl)
            all_weights.append(w)
            out = torch.matmul(self.dropout(w), v)
            outputs.append(self.W_o(concat_heads(out)))
        self.attention_weights = torch.cat(all_weights, dim=0)
        return torch.cat(outputs, dim=0)
