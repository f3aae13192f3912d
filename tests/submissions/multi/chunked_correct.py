# CODES:
# STYLE: xformers / "memory-efficient attention" style: softmax computed chunk by chunk over the keys with a running max and running sum
import math
import numbers
import torch
from torch import nn

KEY_CHUNK = 2  # tiny on purpose so the tests exercise several chunks


def _check_pos_int(name, v):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        raise ValueError(f"{name} must be a positive int, got {v!r}")


def head_weight_shape(d, d_total, num_heads):
    for name, v in (("d", d), ("d_total", d_total), ("num_heads", num_heads)):
        _check_pos_int(name, v)
    q, r = divmod(d_total, num_heads)
    if r:
        raise ValueError(f"num_heads={num_heads} does not divide d_total={d_total}")
    return d, q


def project(H, W):
    return torch.matmul(H, W)


def project_heads(H, W_heads):
    return torch.matmul(H[:, None], W_heads)


def split_heads(X, num_heads):
    _check_pos_int("num_heads", num_heads)
    *lead, width = X.shape
    if width % num_heads:
        raise ValueError(f"width {width} not divisible by {num_heads} heads")
    return X.unflatten(-1, (num_heads, width // num_heads)).movedim(-2, -3)


def concat_heads(X):
    return X.movedim(-3, -2).flatten(-2)


def _keep_mask(scores, valid_lens):
    """Boolean (batch, 1.., n_q|1, n_k) mask of attendable keys, or None."""
    if valid_lens is None:
        return None
    n_q, n_k = scores.shape[-2:]
    lens = valid_lens.to(scores.device)
    if lens.dim() == 1:
        lens = lens.view(-1, *([1] * (scores.dim() - 1)))
    else:
        lens = lens.view(lens.shape[0], *([1] * (scores.dim() - 3)), n_q, 1)
    return torch.arange(n_k, device=scores.device) < lens


def masked_softmax(scores, valid_lens=None, chunk=None):
    chunk = chunk or KEY_CHUNK
    keep = _keep_mask(scores, valid_lens)
    n_k = scores.shape[-1]
    lowest = torch.finfo(scores.dtype).min
    if keep is not None:
        keep = keep.expand(scores.shape)
        scores = scores.masked_fill(~keep, lowest)
    # pass 1: running max over key chunks
    m = None
    for s in range(0, n_k, chunk):
        blk = scores[..., s:s + chunk].amax(dim=-1, keepdim=True)
        m = blk if m is None else torch.maximum(m, blk)
    # pass 2: exponentials and running sum, chunk by chunk
    pieces, total = [], None
    for s in range(0, n_k, chunk):
        e = torch.exp(scores[..., s:s + chunk] - m)
        if keep is not None:
            e = e * keep[..., s:s + chunk]
        pieces.append(e)
        part = e.sum(dim=-1, keepdim=True)
        total = part if total is None else total + part
    # a row with no valid key has total == 0 and all-zero numerators -> zero weights
    denom = total + (total == 0).to(total.dtype)
    return torch.cat([p / denom for p in pieces], dim=-1)


def attention_pool(Q, K, V, valid_lens=None):
    scale = 1.0 / math.sqrt(Q.shape[-1])
    scores = torch.matmul(Q * scale, K.transpose(-1, -2))
    w = masked_softmax(scores, valid_lens)
    return torch.matmul(w, V), w


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        d_total = d_model if d_total is None else d_total
        _, self.head_dim = head_weight_shape(d_model, d_total, num_heads)
        self.num_heads = num_heads
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.attn_drop = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        q = split_heads(self.W_q(queries), self.num_heads)
        k = split_heads(self.W_k(keys), self.num_heads)
        v = split_heads(self.W_v(values), self.num_heads)
        scores = torch.matmul(q, k.transpose(-1, -2)) * (self.head_dim ** -0.5)
        w = masked_softmax(scores, valid_lens)
        self.attention_weights = w
        return self.W_o(concat_heads(torch.matmul(self.attn_drop(w), v)))
