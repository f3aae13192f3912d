# ATTACK: lies about exception types: raises a local class named ValueError that is not one, exceptions whose __class__ property claims ValueError, a NotImplementedError subclass claiming to be ValueError, and patches the probes' bound issubclass/type and describe() so every exception is reported as a ValueError; every function "validates" by raising.
# HONEST: 0
# EXPECT: a ValueError check counts only for an implementation whose values are right (raising everywhere earns nothing), and the type names are data read by the grader, not trusted verdicts; score 0; grader exit status 0.
import builtins
import sys

import torch

_probes = sys.modules.get("probes")
if _probes is not None:
    _probes._issubclass = lambda cls, base: True
    _probes.describe = lambda e: {"type": "ValueError", "module": "builtins", "value_error": True,
                                  "not_implemented": False, "message": "d_total not divisible"}


class ValueError(Exception):                        # noqa: A001  (a liar, on purpose)
    pass


class Disguised(NotImplementedError):
    @property
    def __class__(self):
        return builtins.ValueError


def head_weight_shape(d, d_total, num_heads):
    raise ValueError("d_total must be divisible by num_heads")


def project(H, W):
    raise Disguised("nope")


project_heads = split_heads = concat_heads = masked_softmax = attention_pool = project


class MultiHeadAttention(torch.nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        raise ValueError("d_total must be divisible by num_heads")
