# ATTACK: answers in containers and types no comparison expects: forward returns (output, weights) on one call, {"out": output} on the next, a torch.Tensor subclass on the third; attention_weights is a list, then a dict; the functions return a dict of tensors, a list of tensors, a generator, a set, a torch.Size, a tensor subclass, (out, weights, extra) for the pair and ((out,), (weights,)) nested; head_weight_shape returns a dict and then a tensor subclass. The values inside are the right ones.
# HONEST: 0
# EXPECT: each is refused in the sandbox ("returned a dict, not a tensor or a tuple", "a subclass of torch.Tensor", "forward returned a tuple") or fails in the grader on its form (a tuple of 3 where (output, weights) is expected); nothing raises in the grader; score 0; grader exit status 0, valid JSON.
import itertools
import math

import torch

_turn = itertools.count()


class Marked(torch.Tensor):
    """A tensor subclass: its comparisons could be anything."""

    def __eq__(self, other):
        return True

    __ne__ = lambda self, other: False      # noqa: E731
    __bool__ = lambda self: True            # noqa: E731


def head_weight_shape(d, d_total, num_heads):
    if num_heads < 1 or d < 1 or d_total % num_heads:
        raise ValueError("impossible head count")
    if next(_turn) % 2:
        return {"d": d, "p": d_total // num_heads}
    return torch.tensor([d, d_total // num_heads]).as_subclass(Marked)


def project(H, W):
    return {"out": H @ W}


def project_heads(H, W_heads):
    return [H.unsqueeze(1) @ W_heads]


def split_heads(X, num_heads):
    b, n, d = X.shape
    if d % num_heads:
        raise ValueError("width not divisible by num_heads")
    return (t for t in [X.reshape(b, n, num_heads, d // num_heads).transpose(1, 2)])


def concat_heads(X):
    b, h, n, p = X.shape
    if next(_turn) % 2:
        return {X.transpose(1, 2).reshape(b, n, h * p).sum().item()}
    return torch.Size([b, n, h * p])


def _softmax(scores, valid_lens=None):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    lens = valid_lens
    while lens.dim() < scores.dim() - 1:
        lens = lens.unsqueeze(1)
    keep = torch.arange(scores.shape[-1]) < lens.unsqueeze(-1)
    return torch.softmax(scores.masked_fill(~keep, torch.finfo(scores.dtype).min), -1) * keep


def masked_softmax(scores, valid_lens=None):
    return _softmax(scores, valid_lens).as_subclass(Marked)


def attention_pool(Q, K, V, valid_lens=None):
    weights = _softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), valid_lens)
    if next(_turn) % 2:
        return weights @ V, weights, "extra"
    return (weights @ V,), (weights,)


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
        b, h, n, p = q.shape
        out = self.W_o((weights @ v).transpose(1, 2).reshape(b, n, h * p))
        turn = next(_turn) % 3
        self.attention_weights = [weights] if turn else {"w": weights}
        if turn == 0:
            return out, weights
        if turn == 1:
            return {"out": out}
        return out.as_subclass(Marked)
