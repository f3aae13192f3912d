# ATTACK: threads that outlive the import: one burns CPU forever, one floods stdout and stderr, one rebinds the module's API names to different stubs a moment after import (so the functions checked change under the grader's feet), and one keeps re-installing itself into sys.modules["mha"].
# HONEST: 0
# EXPECT: the threads die with the sandbox; output is drained and capped; whatever the names point to, no stub earns points; bounded time; score 0; grader exit status 0.
import os
import sys
import threading
import time

import torch

_module = sys.modules[__name__]


def _burn():
    x = 0
    while True:
        x += 1


def _flood():
    line = b"PASSED all checks " * 60 + b"\n"
    while True:
        try:
            os.write(1, line)
            os.write(2, line)
        except OSError:
            time.sleep(0.01)


def _swap():
    time.sleep(0.05)
    while True:
        for name in ("split_heads", "concat_heads", "masked_softmax"):
            setattr(_module, name, lambda *a, **k: torch.zeros(1))
        sys.modules["mha"] = _module
        time.sleep(0.01)


for _target in (_burn, _flood, _swap):
    threading.Thread(target=_target, daemon=True).start()


def _stub(*args, **kwargs):
    raise NotImplementedError


head_weight_shape = project = project_heads = split_heads = concat_heads = _stub
masked_softmax = attention_pool = _stub


class MultiHeadAttention(torch.nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        raise NotImplementedError
