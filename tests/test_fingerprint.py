"""The key the reference's answers are cached by: equal for the same request, different
for any other (a cached answer given to another question would be a wrong verdict)."""
from __future__ import annotations

import torch

from autograder.fingerprint import fingerprint
from autograder.sandbox import probes


def test_the_same_request_has_the_same_key_however_its_tensors_are_laid_out():
    a = torch.arange(6.0).reshape(2, 3)
    assert fingerprint({"x": a, "n": 2}) == fingerprint({"n": 2, "x": a.clone()})
    t = torch.arange(6.0).reshape(3, 2).t()             # not contiguous
    assert not t.is_contiguous()
    assert fingerprint([t]) == fingerprint([t.contiguous()])


def test_any_difference_gives_another_key():
    base = {"args": [torch.ones(2, 3), 2], "fn": "split_heads"}
    others = [
        {"args": [torch.ones(2, 3), 3], "fn": "split_heads"},                # a number
        {"args": [torch.ones(3, 2), 2], "fn": "split_heads"},                # a shape
        {"args": [torch.ones(2, 3, dtype=torch.float64), 2], "fn": "split_heads"},  # a dtype
        {"args": [torch.ones(2, 3).index_fill(1, torch.tensor([2]), 1.5), 2],
         "fn": "split_heads"},                                               # one value
        {"args": [torch.ones(2, 3), 2.0], "fn": "split_heads"},              # 2.0 is not 2
        {"args": [torch.ones(2, 3), True], "fn": "split_heads"},             # True is not 1
        {"args": (torch.ones(2, 3), 2), "fn": "split_heads"},                # a tuple, a list
        {"args": [torch.ones(2, 3), 2], "fn": "concat_heads"},
    ]
    keys = {fingerprint(v) for v in [base] + others}
    assert len(keys) == len(others) + 1
    assert fingerprint({"w": torch.ones(2, dtype=torch.bfloat16)}) != \
        fingerprint({"w": torch.ones(2, dtype=torch.float16)})


def test_taking_a_key_is_no_host_read():
    """The key reads a tensor's bytes with torch's own method, not the one the probes count
    host reads with."""
    with probes.OpTrace("cpu") as trace:
        fingerprint({"x": torch.ones(3), "y": torch.arange(6.0).reshape(2, 3).t()})
    assert "numpy" not in trace.counts
