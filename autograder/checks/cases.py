"""Named input cases, drawn from the run's seed. The names appear in the feedback.

Every case is float64 on the CPU; sizes cover the SPEC's edge cases: one head, head_dim
1, n_q != n_k, batch 1, valid length 0 and full, non-contiguous inputs.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple
    describe: str                 #: the input shapes, for the feedback


def randn(gen, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def lens(gen, batch: int, n_k: int, *, n_q: int | None = None, zero: bool = True) -> torch.Tensor:
    """Valid lengths including 0 (if asked), the full length n_k and, where there is room, a
    partial one."""
    shape = (batch,) if n_q is None else (batch, n_q)
    out = torch.randint(0 if zero else 1, n_k + 1, shape, generator=gen)
    flat = out.reshape(-1)
    flat[0] = 0 if zero else 1
    if flat.numel() > 1:
        flat[-1] = n_k
    if flat.numel() > 2 and n_k > 1:
        flat[1] = n_k // 2          # a partial row whatever the seed: diagnoses need one
    return out


# (name, batch, n, num_heads, head_dim)
SPLIT_SHAPES = [("typical", 2, 5, 3, 4), ("one-head", 2, 4, 1, 6), ("head-dim-1", 2, 3, 6, 1),
                ("batch-1", 1, 7, 2, 3), ("n-1", 3, 1, 4, 2), ("many-heads", 2, 6, 8, 2)]


def split_cases(gen) -> list[Case]:
    cases = []
    for name, b, n, h, p in SPLIT_SHAPES:
        X = randn(gen, b, n, h * p)
        cases.append(Case(name, (X, h), f"X {tuple(X.shape)}, num_heads={h}"))
    X = randn(gen, 2, 5, 12)
    cases.append(Case("non-contiguous", ({"noncontig": X}, 4), "X (2, 5, 12) non-contiguous, num_heads=4"))
    return cases


def concat_cases(gen) -> list[Case]:
    cases = []
    for name, b, n, h, p in SPLIT_SHAPES:
        X = randn(gen, b, h, n, p)
        cases.append(Case(name, (X,), f"X {tuple(X.shape)}"))
    X = randn(gen, 2, 3, 5, 4)
    cases.append(Case("non-contiguous", ({"noncontig": X},), "X (2, 3, 5, 4) non-contiguous"))
    return cases


def project_cases(gen) -> list[Case]:
    cases = []
    for name, lead, n, d, p in [("typical", (2,), 5, 8, 4), ("square", (3,), 4, 6, 6),
                                ("no-batch", (), 5, 3, 2), ("4-d", (2, 3), 4, 5, 1)]:
        H, W = randn(gen, *lead, n, d), randn(gen, d, p)
        cases.append(Case(name, (H, W), f"H {tuple(H.shape)}, W {tuple(W.shape)}"))
    return cases


def project_heads_cases(gen) -> list[Case]:
    cases = []
    for name, b, n, d, h, p in [("typical", 2, 5, 8, 4, 2), ("one-head", 2, 3, 6, 1, 6),
                                ("head-dim-1", 3, 4, 5, 3, 1), ("batch-1", 1, 6, 4, 2, 3)]:
        H, W = randn(gen, b, n, d), randn(gen, h, d, p)
        cases.append(Case(name, (H, W), f"H {tuple(H.shape)}, W_heads {tuple(W.shape)}"))
    return cases


def softmax_cases(gen, masked: bool) -> list[Case]:
    cases = []
    for name, shape in [("3-d", (2, 4, 5)), ("4-d", (3, 2, 4, 6)), ("nq-ne-nk", (2, 3, 2, 7)),
                        ("batch-1", (1, 2, 3, 4)), ("one-key", (2, 3, 1))]:
        scores = randn(gen, *shape) * 3
        if not masked:
            cases.append(Case(name, (scores,), f"scores {shape}"))
            continue
        L = lens(gen, shape[0], shape[-1])
        cases.append(Case(name, (scores, L), f"scores {shape}, valid_lens {L.tolist()}"))
    scores = randn(gen, 2, 3, 4, 5)
    L = lens(gen, 2, 5, n_q=4)
    cases.append(Case("2-d-valid-lens", (scores, L), f"scores (2, 3, 4, 5), valid_lens {L.tolist()} (per query)")
                 if masked else Case("non-contiguous", ({"noncontig": scores},), "scores (2, 3, 4, 5) non-contiguous"))
    if masked:
        scores = randn(gen, 3, 2, 4, 6)
        L = torch.tensor([6, 2, 0])
        cases.append(Case("interleaved-lens", (scores, L), "scores (3, 2, 4, 6), valid_lens [6, 2, 0]"))
    return cases


def pool_cases(gen, masked: bool) -> list[Case]:
    cases = []
    for name, lead, n_q, n_k, p, p_v in [("3-d", (2,), 4, 4, 3, 3), ("4-d", (2, 3), 3, 5, 4, 2),
                                         ("nq-ne-nk", (3, 2), 2, 6, 5, 5), ("head-dim-1", (2, 4), 3, 3, 1, 1),
                                         ("batch-1", (1, 2), 5, 3, 2, 4)]:
        Q, K, V = randn(gen, *lead, n_q, p), randn(gen, *lead, n_k, p), randn(gen, *lead, n_k, p_v)
        desc = f"Q {tuple(Q.shape)}, K {tuple(K.shape)}, V {tuple(V.shape)}"
        if masked:
            L = lens(gen, lead[0], n_k)
            cases.append(Case(name, (Q, K, V, L), desc + f", valid_lens {L.tolist()}"))
        else:
            cases.append(Case(name, (Q, K, V), desc))
    return cases
