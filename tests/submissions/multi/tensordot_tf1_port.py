# CODES:
# STYLE: TF1/Sonnet port: torch.tensordot everywhere, weights reshaped to (d, h, p) kernels, tf.sequence_mask helper, output projection contracts (heads, head_dim) in one tensordot
import math

import torch
from torch import nn


def head_weight_shape(d, d_total, num_heads):
    if d <= 0 or d_total <= 0 or num_heads <= 0:
        raise ValueError("Sizes must be positive, got d=%d d_total=%d num_heads=%d"
                         % (d, d_total, num_heads))
    if d_total % num_heads != 0:
        raise ValueError("d_total (%d) must be a multiple of num_heads (%d)" % (d_total, num_heads))
    return (d, d_total // num_heads)


def project(H, W):
    return torch.tensordot(H, W, dims=1)


def project_heads(H, W_heads):
    # [b, n, d] . [h, d, p] over d -> [b, n, h, p] -> [b, h, n, p]
    return torch.tensordot(H, W_heads, dims=([2], [1])).permute(0, 2, 1, 3)


def split_heads(X, num_heads):
    depth = X.shape[-1]
    if num_heads <= 0 or depth % num_heads != 0:
        raise ValueError("depth (%d) must be a multiple of num_heads (%d)" % (depth, num_heads))
    shape = list(X.shape[:-1]) + [num_heads, depth // num_heads]
    return torch.reshape(X, shape).permute(0, 2, 1, 3)


def concat_heads(X):
    x = X.permute(0, 2, 1, 3)
    shape = list(x.shape[:-2]) + [x.shape[-2] * x.shape[-1]]
    return torch.reshape(x, shape)


def sequence_mask(lengths, maxlen, device):
    """tf.sequence_mask: [..., maxlen] bool, True for positions < length."""
    row = torch.arange(maxlen, device=device)
    return row < lengths.to(device).unsqueeze(-1)


def masked_softmax(scores, valid_lens=None):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    rank = scores.dim()
    mask = sequence_mask(valid_lens, scores.shape[-1], scores.device)   # [b, n_k] or [b, n_q, n_k]
    if valid_lens.dim() == 1:
        mask = mask.reshape([mask.shape[0]] + [1] * (rank - 2) + [mask.shape[-1]])
    else:
        mask = mask.reshape([mask.shape[0]] + [1] * (rank - 3) + list(mask.shape[1:]))
    logits = torch.where(mask, scores, torch.full_like(scores, torch.finfo(scores.dtype).min))
    probs = torch.softmax(logits, dim=-1)
    return probs * mask.to(probs.dtype)


def attention_pool(Q, K, V, valid_lens=None):
    depth = Q.shape[-1]
    logits = torch.matmul(Q, K.transpose(-1, -2)) * (depth ** -0.5)
    weights = masked_softmax(logits, valid_lens)
    return torch.matmul(weights, V), weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super(MultiHeadAttention, self).__init__()
        total = d_model if d_total is None else d_total
        _, self.depth = head_weight_shape(d_model, total, num_heads)
        self.num_heads = num_heads
        self.d_model = d_model
        self.W_q = nn.Linear(d_model, total, bias=bias)
        self.W_k = nn.Linear(d_model, total, bias=bias)
        self.W_v = nn.Linear(d_model, total, bias=bias)
        self.W_o = nn.Linear(total, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def _kernel(self, layer):
        # nn.Linear stores [out, in]; Sonnet kernels are [in, heads, depth]
        return layer.weight.t().reshape(self.d_model, self.num_heads, self.depth)

    def _heads(self, x, layer):
        y = torch.tensordot(x, self._kernel(layer), dims=1)          # [b, n, h, p]
        if layer.bias is not None:
            y = y + layer.bias.reshape(self.num_heads, self.depth)
        return y.permute(0, 2, 1, 3)                                  # [b, h, n, p]

    def forward(self, queries, keys, values, valid_lens=None):
        q = self._heads(queries, self.W_q)
        k = self._heads(keys, self.W_k)
        v = self._heads(values, self.W_v)
        logits = torch.matmul(q, k.transpose(-1, -2)) * (self.depth ** -0.5)
        weights = masked_softmax(logits, valid_lens)
        self.attention_weights = weights
        heads = torch.matmul(self.dropout(weights), v)                # [b, h, n, p]
        # output kernel [h, p, d_model]: contract heads and depth together
        w_o = self.W_o.weight.t().reshape(self.num_heads, self.depth, self.d_model)
        w_o = w_o.to(heads.dtype)   # tensordot is not autocast-aware
        out = torch.tensordot(heads, w_o, dims=([1, 3], [0, 1]))     # [b, n, d_model]
        if self.W_o.bias is not None:
            out = out + self.W_o.bias
        return out
