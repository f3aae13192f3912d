"""The probes rehearsed once in the zygote, so that every sandbox forked from it starts warm.

A sandbox is a fork of the zygote: what the zygote has set up, each sandbox inherits, and
what it has not, each sandbox pays for again on its first probes (torch's one-time set-ups
behind each operator and dispatch mode, the autograd engine, the allocator's pools, the
probes' own first calls). Measured on the reference's probes in a fork: 60 ms on the first
run after ``probes.warm_up`` alone, 38 ms after a rehearsal, 28 ms on later runs.

The rehearsal runs the probes on ``STAND_IN``: the contract's names, built from the
operators graded code uses, with arithmetic that is deliberately not the assignment's (no
scaling, projections doubled, heads folded without a transpose and in the wrong order,
masks filled with -1, weights never dropped).
Nothing the sandboxes inherit can answer a check, and the inputs are the rehearsal's own,
drawn from a fixed seed: no hidden case or reference answer is in the zygote. torch's
random state is put back as it was, so the sandboxes draw what they drew before.

Imported by the zygote only, as a top-level module (like ``probes``), before it forks.
"""
from __future__ import annotations

import types

import torch

try:
    import probes                   # in the zygote, as a top-level module
except ImportError:                 # in the grader's own tests
    from . import probes


def _project(X, W):
    return 2 * (X @ W)


def _project_heads(X, W):
    return X.unsqueeze(1) @ W.flip(0)


def _split_heads(X, num_heads):
    return X.reshape(X.shape[0], num_heads, X.shape[1], -1)


def _concat_heads(X):
    return X.reshape(X.shape[0], X.shape[2], -1)


def _masked_softmax(X, valid_lens=None):
    if valid_lens is None:
        return torch.softmax(X, dim=-1)
    lens = valid_lens if valid_lens.dim() == 1 else valid_lens[:, 0]
    keep = torch.arange(X.shape[-1], device=X.device) < lens.reshape(-1, *(1,) * (X.dim() - 1))
    return torch.softmax(X.masked_fill(~keep, -1.0), dim=-1)


def _attention_pool(Q, K, V, valid_lens=None, dropout=None):
    weights = _masked_softmax(Q @ K.transpose(-2, -1), valid_lens)
    return weights @ V, weights


class _Module(torch.nn.Module):
    def __init__(self, d_model, num_heads, bias=False, dropout=0.0, d_total=None):
        super().__init__()
        d_total = d_total or d_model
        self.num_heads = num_heads
        self.W_q, self.W_k, self.W_v = (torch.nn.Linear(d_model, d_total, bias=bias)
                                        for _ in range(3))
        self.W_o = torch.nn.Linear(d_total, d_model, bias=bias)
        self.dropout = torch.nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        q, k, v = (_split_heads(W(x), self.num_heads) for W, x in
                   ((self.W_q, queries), (self.W_k, keys), (self.W_v, values)))
        out, self.attention_weights = _attention_pool(q, k, v, valid_lens)
        return self.W_o(self.dropout(_concat_heads(out)))


STAND_IN = types.SimpleNamespace(
    head_weight_shape=lambda d, d_total, num_heads: (d_total, d),
    project=_project, project_heads=_project_heads, split_heads=_split_heads,
    concat_heads=_concat_heads, masked_softmax=_masked_softmax,
    attention_pool=_attention_pool, MultiHeadAttention=_Module)


def _requests():
    """(probe, kwargs) of each kind of request the checks send, on the rehearsal's inputs."""
    g = torch.Generator().manual_seed(0)

    def x(*shape):
        return torch.randn(*shape, dtype=torch.float64, generator=g)

    def weights(d, d_total=None, bias=False):
        d_total = d_total or d
        state = {f"W_{r}.weight": x(d_total, d) for r in "qkv"}
        state["W_o.weight"] = x(d, d_total)
        if bias:
            state.update({f"W_{r}.bias": x(d_total) for r in "qkv"}, **{"W_o.bias": x(d)})
        return state

    lens = torch.tensor([2, 4])
    run = {"queries": x(2, 4, 8), "keys": x(2, 4, 8), "values": x(2, 4, 8)}
    runs = [dict(run), dict(run, valid_lens=lens), dict(run, valid_lens=torch.tensor(
        [[1, 2, 3, 4], [4, 3, 2, 1]])), dict(run, grad=x(2, 4, 8)),
        dict(run, valid_lens=lens, grad=x(2, 4, 8)), dict(run, train=True, seed=1),
        dict(run, train=True)]
    shapes = {"batch": 2, "n_q": 3, "n_k": 4, "seed": 1}
    init = {"d_model": 8, "num_heads": 2, "bias": True}
    return [
        ("call", {"fn": "head_weight_shape", "args": [8, 8, 2]}),
        ("calls", {"fn": "project", "batch": [[x(2, 5, 8), x(8, 4)], [x(3, 4, 6), x(6, 6)]]}),
        ("calls", {"fn": "project_heads", "batch": [[x(2, 5, 8), x(2, 8, 4)]] * 2}),
        ("calls", {"fn": "split_heads", "batch": [[x(2, 5, 12), 3], [x(2, 4, 6), 1]]}),
        ("calls", {"fn": "concat_heads", "batch": [[x(2, 3, 5, 4)], [x(2, 1, 4, 6)]]}),
        ("calls", {"fn": "masked_softmax", "batch": [[x(2, 4, 5)], [x(2, 4, 5), lens]]}),
        ("calls", {"fn": "attention_pool", "batch": [[x(2, 4, 3), x(2, 5, 3), x(2, 5, 3)],
                                                    [x(2, 4, 3), x(2, 5, 3), x(2, 5, 3), lens]]}),
        ("mha", {"spec": {"init": init}}),
        ("mha", {"spec": {"init": dict(init, dropout=0.5), "seed": 1, "want_state": True,
                          "load": weights(8, bias=True), "runs": runs,
                          "want_state_after": True}}),
        ("mhas", {"specs": [{"init": dict(init, num_heads=1), "load": weights(8, bias=True),
                             "runs": runs[:2]}]}),
        ("mha_raises", {"init": {"d_model": 8, "num_heads": 3}}),
        ("mha_loads", {"spec": {"init": init, "seed": 1, "loads": [weights(8, bias=True)] * 2,
                                "runs": runs[:2]}}),
        ("trace", {"spec": {"heads": [1, 2], "init": {"d_model": 8}, "shapes": shapes,
                            "seed": 1, "loads": {"1": weights(8), "2": weights(8)},
                            "runs": {"1": runs[1], "2": runs[1]}}}),
        ("on_device", {"spec": {"init": init, "shapes": shapes, "device": "meta"}}),
        ("low_precision", {"spec": {"init": init, "shapes": shapes, "modes": [
            "cast-float32", "cast-float16", "autocast-float16", "autocast-bfloat16"]}}),
        ("answer", {"question": {"fn": "attention_pool", "mode": "value",
                                 "args": [x(2, 4, 3), x(2, 5, 3), x(2, 5, 3), lens]}}),
        ("answer", {"question": {"fn": "masked_softmax", "mode": "vjp",
                                 "args": [x(2, 4, 5), lens], "grads": [x(2, 4, 5)]}}),
    ]


def rehearse() -> list[str]:
    """Run each kind of request once on the stand-in; what failed, for the zygote's notes
    (a failure costs a sandbox only its warm start, never a check)."""
    saved = torch.get_rng_state()
    failed = []
    try:
        for name, kwargs in _requests():
            try:
                probes.PROBES[name](STAND_IN, **kwargs)
            except Exception as e:     # noqa: BLE001 — the stand-in's errors: rehearsed too
                failed.append(f"{name}: {type(e).__name__}")
    finally:
        torch.set_rng_state(saved)
        probes.ACTIVE_TRACES.clear()
    return failed
