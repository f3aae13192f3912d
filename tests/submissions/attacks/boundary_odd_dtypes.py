# ATTACK: right values in dtypes the grader's float comparison was not written for: split_heads answers complex128, concat_heads bool, masked_softmax int64, project a 0-d tensor, project_heads float16, attention_pool a complex output with uint8 weights, head_weight_shape (d, a 0-d int tensor); the module's forward returns its correct output as complex128 with bool attention_weights. A comparison that casts to float64 first drops the imaginary part and may call the answer right.
# HONEST: partial 2.1 (split_heads raises ValueError where one is due (2 of 98 points, rescaled: 2.04): a correct ValueError counts on its own, whatever the values)
# EXPECT: every one fails on its dtype ("returned dtype torch.complex128, expected torch.float64"), the sizes with a tensor in them err ("a tensor is not a size"); nothing raises in the grader; score 0; grader exit status 0, valid JSON.
import math

import torch


def head_weight_shape(d, d_total, num_heads):
    if num_heads < 1 or d < 1 or d_total % num_heads:
        raise ValueError("impossible head count")
    return (d, torch.tensor(d_total // num_heads))


def project(H, W):
    return (H @ W).sum()


def project_heads(H, W_heads):
    return (H.unsqueeze(1) @ W_heads).to(torch.float16)


def split_heads(X, num_heads):
    b, n, d = X.shape
    if d % num_heads:
        raise ValueError("width not divisible by num_heads")
    return X.reshape(b, n, num_heads, d // num_heads).transpose(1, 2).to(torch.complex128)


def concat_heads(X):
    b, h, n, p = X.shape
    return X.transpose(1, 2).reshape(b, n, h * p).to(torch.bool)


def _softmax(scores, valid_lens=None):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    n_k = scores.shape[-1]
    lens = valid_lens
    while lens.dim() < scores.dim() - 1:
        lens = lens.unsqueeze(1)
    keep = torch.arange(n_k) < lens.unsqueeze(-1)
    filled = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    return torch.softmax(filled, dim=-1) * keep


def masked_softmax(scores, valid_lens=None):
    return (_softmax(scores, valid_lens) * 1000).to(torch.int64)


def attention_pool(Q, K, V, valid_lens=None):
    weights = _softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), valid_lens)
    return (weights @ V).to(torch.complex128), (weights * 255).to(torch.uint8)


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

    def _split(self, X):
        b, n, d = X.shape
        return X.reshape(b, n, self.num_heads, d // self.num_heads).transpose(1, 2)

    def forward(self, queries, keys, values, valid_lens=None):
        q, k, v = self._split(self.W_q(queries)), self._split(self.W_k(keys)), self._split(self.W_v(values))
        if valid_lens is not None and valid_lens.dim() == 1:
            valid_lens = valid_lens[:, None]
        weights = _softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), valid_lens)
        self.attention_weights = weights.detach() > 0.5
        b, h, n, p = q.shape
        out = self.W_o((weights @ v).transpose(1, 2).reshape(b, n, h * p))
        return out.to(torch.complex128)
