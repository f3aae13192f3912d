# ATTACK: values of exactly the right shape and dtype that are NaN, +inf, -inf or empty, mixed per case: a grader that compares with `a - e` and `argmax` may index an empty tensor, take nan for "no difference", or call a NaN pattern equal; head_weight_shape returns (nan, nan), then (inf, -inf), then (d, p) as floats of one less; forward returns NaN with an empty attention_weights tensor.
# HONEST: partial 4.1 (head_weight_shape and split_heads raise ValueError where one is due (2 + 2 of 98 points, rescaled: 4.08): a correct ValueError counts on its own, whatever the values)
# EXPECT: NaN where the reference has none fails ("values are NaN, first at index ..."), infinities fail with the greatest difference inf, an empty tensor fails on its shape; nothing raises in the grader; score 0; grader exit status 0, valid JSON.
import itertools
import math

import torch

_turn = itertools.count()


def _bad(shape, like):
    k = next(_turn) % 4
    if k == 3:
        return torch.empty(0, dtype=like.dtype)
    return torch.full(shape, (math.nan, math.inf, -math.inf)[k], dtype=like.dtype)


def head_weight_shape(d, d_total, num_heads):
    if num_heads < 1 or d < 1 or d_total % num_heads:
        raise ValueError("impossible head count")
    return [(math.nan, math.nan), (math.inf, -math.inf),
            (d - 1.0, d_total // num_heads - 1.0)][next(_turn) % 3]


def project(H, W):
    return _bad((*H.shape[:-1], W.shape[-1]), H)


def project_heads(H, W_heads):
    return _bad((H.shape[0], W_heads.shape[0], H.shape[1], W_heads.shape[-1]), H)


def split_heads(X, num_heads):
    b, n, d = X.shape
    if d % num_heads:
        raise ValueError("width not divisible by num_heads")
    return _bad((b, num_heads, n, d // num_heads), X)


def concat_heads(X):
    b, h, n, p = X.shape
    return _bad((b, n, h * p), X)


def masked_softmax(scores, valid_lens=None):
    return _bad(scores.shape, scores)


def attention_pool(Q, K, V, valid_lens=None):
    return _bad((*Q.shape[:-1], V.shape[-1]), Q), _bad((*Q.shape[:-1], K.shape[-2]), Q)


class MultiHeadAttention(torch.nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        d_total = d_model           # d_total ignored, one parameter too many, no ValueError:
        self.num_heads = num_heads  # the module's own checks earn nothing, while loads and
        self.W_q = torch.nn.Linear(d_model, d_total, bias=bias)     # forwards still run
        self.W_k = torch.nn.Linear(d_model, d_total, bias=bias)
        self.W_v = torch.nn.Linear(d_model, d_total, bias=bias)
        self.W_o = torch.nn.Linear(d_total, d_model, bias=bias)
        self.scale = torch.nn.Parameter(torch.ones(()))
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        self.attention_weights = torch.empty(0, dtype=queries.dtype)
        out = self.W_o(self.W_q(queries)) * math.nan
        return out
