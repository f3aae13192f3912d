# ATTACK: none: a correct module that ends with the student's own self-test under if __name__ == "__main__": it imports sys and traceback, puts the folder on sys.path, prints shapes and a traceback when something fails; a source reader that guesses from names would call it tampering.
# HONEST: full
# EXPECT: full marks, no diagnosis, no code rule broken (the block never runs when the module is imported for grading).
import math

import torch
from torch import nn


def head_weight_shape(d, d_total, num_heads):
    for value in (d, d_total, num_heads):
        if type(value) is not int or value < 1:
            raise ValueError(f"expected a positive integer, got {value!r}")
    if d_total % num_heads:
        raise ValueError(f"d_total={d_total} must be a multiple of num_heads={num_heads}")
    return (d, d_total // num_heads)


def project(H, W):
    return H @ W


def project_heads(H, W_heads):
    return H[:, None] @ W_heads


def split_heads(X, num_heads):
    if type(num_heads) is not int or num_heads < 1:
        raise ValueError(f"num_heads must be a positive integer, got {num_heads!r}")
    if X.shape[-1] % num_heads:
        raise ValueError(f"{X.shape[-1]} columns cannot be split into {num_heads} heads")
    return X.unflatten(-1, (num_heads, X.shape[-1] // num_heads)).transpose(-3, -2)


def concat_heads(X):
    return X.transpose(-3, -2).flatten(-2)


def masked_softmax(scores, valid_lens=None):
    if valid_lens is None:
        return scores.softmax(-1)
    lens = torch.as_tensor(valid_lens).to(scores.device)
    if lens.dim() == 1:
        lens = lens.view(-1, *[1] * (scores.dim() - 1))
    else:
        lens = lens.view(lens.shape[0], *[1] * (scores.dim() - 3), lens.shape[1], 1)
    mask = torch.arange(scores.shape[-1], device=scores.device) >= lens
    weights = scores.masked_fill(mask, torch.finfo(scores.dtype).min).softmax(-1)
    return weights.masked_fill(mask, 0)


def attention_pool(Q, K, V, valid_lens=None):
    weights = masked_softmax(Q @ K.mT / math.sqrt(Q.shape[-1]), valid_lens)
    return weights @ V, weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        d_total = d_total or d_model
        self.head_dim = head_weight_shape(d_model, d_total, num_heads)[1]
        self.num_heads = num_heads
        self.W_q, self.W_k, self.W_v = (nn.Linear(d_model, d_total, bias=bias) for _ in range(3))
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        Q = split_heads(self.W_q(queries), self.num_heads)
        K = split_heads(self.W_k(keys), self.num_heads)
        V = split_heads(self.W_v(values), self.num_heads)
        weights = masked_softmax(Q @ K.mT / math.sqrt(self.head_dim), valid_lens)
        self.attention_weights = weights
        return self.W_o(concat_heads(self.dropout(weights) @ V))


if __name__ == "__main__":
    import os
    import sys
    import traceback

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        model = MultiHeadAttention(16, 4, dropout=0.1).eval()
        x = torch.randn(3, 5, 16)
        out = model(x, x, x, torch.tensor([5, 2, 0]))
        print("out", tuple(out.shape), "weights", tuple(model.attention_weights.shape))
        assert torch.isfinite(out).all()
    except Exception:
        traceback.print_exc()
        sys.exit(1)
