"""The zygote's rehearsal (``sandbox.rehearsal``): every kind of probe runs once on a
stand-in before the zygote forks, so that sandboxes start warm; the stand-in answers no
check, and torch's global state is left as it was."""
from __future__ import annotations

import torch

import solutions
from autograder.sandbox import probes, rehearsal

STAND_IN = rehearsal.STAND_IN


def test_every_kind_of_probe_but_cuda_is_rehearsed_without_an_error():
    assert rehearsal.rehearse() == []
    kinds = {name for name, _ in rehearsal._requests()}
    assert kinds == set(probes.PROBES) - {"on_cuda"}      # a new probe is rehearsed too


def test_the_rehearsal_leaves_torchs_global_state_as_it_was():
    torch.manual_seed(1234)
    before = (torch.get_rng_state(), torch.is_grad_enabled(), torch.get_default_dtype(),
              torch.is_autocast_enabled(), torch.get_num_threads(),
              torch.are_deterministic_algorithms_enabled())
    rehearsal.rehearse()
    after = (torch.get_rng_state(), torch.is_grad_enabled(), torch.get_default_dtype(),
             torch.is_autocast_enabled(), torch.get_num_threads(),
             torch.are_deterministic_algorithms_enabled())
    assert torch.equal(before[0], after[0]) and before[1:] == after[1:]
    assert probes.ACTIVE_TRACES == []


def test_the_stand_in_answers_no_part_as_the_assignment_does():
    """What every sandbox inherits from the zygote is no solution: each part's answer on an
    ordinary input differs from the reference's."""
    g = torch.Generator().manual_seed(0)
    x = lambda *s: torch.randn(*s, dtype=torch.float64, generator=g)  # noqa: E731
    H, W, Wh, X = x(2, 5, 8), x(8, 4), x(2, 8, 4), x(2, 5, 8)
    scores, lens = x(2, 2, 4, 5), torch.tensor([2, 3])
    Q, K, V = x(2, 2, 4, 3), x(2, 2, 5, 3), x(2, 2, 5, 3)
    pairs = [
        (STAND_IN.head_weight_shape(8, 12, 2), solutions.head_weight_shape(8, 12, 2)),
        (STAND_IN.project(H, W), solutions.project(H, W)),
        (STAND_IN.project_heads(H, Wh), solutions.project_heads(H, Wh)),
        (STAND_IN.split_heads(X, 2), solutions.split_heads(X, 2)),
        (STAND_IN.concat_heads(Q), solutions.concat_heads(Q)),
        (STAND_IN.masked_softmax(scores, lens), solutions.masked_softmax(scores, lens)),
        (STAND_IN.attention_pool(Q, K, V, lens)[0], solutions.attention_pool(Q, K, V, lens)[0]),
    ]
    for mine, reference in pairs:
        same = (torch.allclose(mine, reference) if isinstance(mine, torch.Tensor)
                and mine.shape == reference.shape else mine == reference)
        assert not same
    torch.manual_seed(0)
    a = STAND_IN.MultiHeadAttention(8, 2, bias=True).double().eval()
    torch.manual_seed(0)
    b = solutions.MultiHeadAttention(8, 2, bias=True).double().eval()
    b.load_state_dict(a.state_dict())
    q = x(2, 4, 8)
    assert not torch.allclose(a(q, q, q, lens), b(q, q, q, lens))
