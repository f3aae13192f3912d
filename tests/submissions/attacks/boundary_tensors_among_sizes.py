# ATTACK: answers numbers with tensors and tensors with numbers, to crash the grader's comparisons: head_weight_shape returns, case by case, (d, tensor([p, p])), (d, tensor(p)) (0-d, which `==` would take for p), tensor([d, p]), [d, [p]], a tuple nested ten deep, (10**60, p), (nan, inf), a string and None; the functions return (d, tensor) tuples, a 60-digit int, NaN, a 5000-character string, None and a tuple of one tensor nested five deep; forward returns a float.
# HONEST: 0
# EXPECT: each answer is judged, never `bool(tensor)`: a tensor among the sizes is an error that names it ("a tensor is not a size"), the rest fail with what was returned and what was expected; score 0; grader exit status 0, valid JSON.
import math

import torch

_seen = {"n": 0}


def head_weight_shape(d, d_total, num_heads):
    if num_heads < 1 or d < 1 or d_total % num_heads:
        raise ValueError("impossible head count")
    p = d_total // num_heads
    _seen["n"] += 1
    deep = (p,)
    for _ in range(9):
        deep = (deep,)
    answers = [(d, torch.tensor([float(p), float(p)])), (d, torch.tensor(p)),
               torch.tensor([d, p]), [d, [p]], deep, (10**60, p), (math.nan, math.inf),
               f"({d}, {p})", None]
    return answers[_seen["n"] % len(answers)]


def project(H, W):
    return (H.shape[0], torch.zeros(2))


def project_heads(H, W_heads):
    return 10**60


def split_heads(X, num_heads):
    return math.nan


def concat_heads(X):
    return "x" * 5000


def masked_softmax(scores, valid_lens=None):
    return None


def attention_pool(Q, K, V, valid_lens=None):
    out = (torch.zeros(1),)
    for _ in range(5):
        out = (out,)
    return out


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
        self.attention_weights = 0.5
        return 1.0
