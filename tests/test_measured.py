"""Measured forwards are graded forwards (issue 18, item 1).

Every forward the grader runs is measured as it runs (its operators, FLOPs, work and host
syncs: ``probes.forward``); the forwards measured for cost are drawn as the value checks draw
theirs (three tensors, lengths with 0 and full, eval mode, autograd on, loaded weights); each
graded configuration of 3 heads or more is run again with 2 heads on the same inputs and
weights where its forward dispatched more matmul/softmax kernels than the reference's (a
two-head rerun: the kernels' growth with num_heads read at its sizes); and the measured
forwards' answers are judged where the module's graded forwards give the reference's. Each
attack below tells a measured forward from a graded one as the earlier design allowed (the
measured forward passed one tensor as keys and values; its answer was not judged; only it was
read for host syncs; the growth was read at its sizes alone) and behaves well only there: it
earns nothing above its honest twin, which misbehaves everywhere.
"""
from __future__ import annotations

import pytest

from autograder.examples import REFERENCE, patch
from autograder.model import Status

GRADER = {"seed": 11}

#: the reference's pooling, as forward writes it
POOL = """        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.head_dim)  # (batch, M, n_q, n_k)
        weights = masked_softmax(scores, valid_lens)
        self.attention_weights = weights
        heads = self.dropout(weights) @ V                     # (batch, M, n_q, p)"""
VECTORISED = """            scores = Q @ K.transpose(-2, -1) / math.sqrt(self.head_dim)
            weights = masked_softmax(scores, valid_lens)
            heads = self.dropout(weights) @ V"""
LOOP = """            outs, ws = [], []
            for j in range(self.num_heads):                   # one head at a time
                s = Q[:, j] @ K[:, j].transpose(-2, -1) / math.sqrt(self.head_dim)
                w = masked_softmax(s, valid_lens)
                ws.append(w)
                outs.append(self.dropout(w) @ V[:, j])
            weights, heads = torch.stack(ws, dim=1), torch.stack(outs, dim=1)"""
SYNC = """            scores = Q @ K.transpose(-2, -1) / math.sqrt(self.head_dim)
            if float(scores.abs().max()) > 1e6:               # a host sync
                scores = scores / 2
            weights = masked_softmax(scores, valid_lens)
            heads = self.dropout(weights) @ V"""
#: what the earlier design's measured forward looked like, and what it measured by sizes
BY_IDENTITY = "keys is values"
BY_SIZE = "queries.shape[-1] == 16 and queries.shape[1] in (3, 4, 5) and not self.training"
CHEAP = """            weights = torch.zeros(*Q.shape[:3], K.shape[2], dtype=Q.dtype)
            heads = torch.zeros_like(Q)"""


def _module(when: str | None, measured: str, otherwise: str) -> str:
    """The reference with its pooling written as ``measured`` where ``when`` holds, else as
    ``otherwise`` (``when`` None: ``otherwise`` always)."""
    body = f"        if {when}:\n{measured}\n        else:\n{otherwise}\n" if when else \
        "        if True:\n" + otherwise + "\n"
    return patch("measured", REFERENCE.read_text(), [(POOL, body + "        self.attention_weights"
                                                      " = weights")])


ATTACKS = {
    # name: (the attack, its honest twin, the check the twin fails)
    "loop_unless_keys_are_values": (_module(BY_IDENTITY, VECTORISED, LOOP), _module(None, "", LOOP),
                                    "cost.parallel"),
    "sync_unless_keys_are_values": (_module(BY_IDENTITY, VECTORISED, SYNC), _module(None, "", SYNC),
                                    "device.sync"),
    "cheap_answer_where_measured": (_module(BY_SIZE, CHEAP, LOOP), _module(None, "", LOOP),
                                    "cost.parallel"),
    # right everywhere, vectorised only at the sizes of the forwards measured for cost
    "loop_except_at_measured_sizes": (_module(BY_SIZE, VECTORISED, LOOP),
                                      _module(None, "", LOOP), "cost.parallel"),
}


def _grade(grader, tmp_path, name, text):
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    report = grader.grade(path)
    return report, {r.name: r for r in report.results}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_an_attack_earns_nothing_over_its_honest_twin(grader, tmp_path, name):
    attack, twin, fails = ATTACKS[name]
    report, results = _grade(grader, tmp_path, name, attack)
    honest, honest_results = _grade(grader, tmp_path, name + "_twin", twin)
    assert honest_results[fails].status is Status.FAILED, honest_results[fails].feedback
    assert results[fails].status is Status.FAILED, (
        f"{name}: {fails} passed; the measured forwards were told from the graded ones")
    assert report.score <= honest.score + 1e-9, (report.score, honest.score)


def test_the_measured_forwards_answers_are_judged(grader, tmp_path):
    """A module right in every value check but not in the forwards measured for cost fails
    the measurement, and says why."""
    _, results = _grade(grader, tmp_path, "cheap", ATTACKS["cheap_answer_where_measured"][0])
    assert results["MultiHeadAttention.values"].status is Status.PASSED
    feedback = results["cost.flops"].feedback
    assert results["cost.flops"].status is Status.FAILED
    assert "measured for cost is graded like the others" in feedback, feedback


def test_every_forward_reports_what_it_cost(grader, tmp_path):
    """The value checks' forwards carry their measurement, on both sides: the reference's
    forwards cost what the measured ones show, and a loop over heads shows in the graded
    forwards themselves (more matmul/softmax kernels at num_heads 8 than at 1)."""
    from autograder import api
    from autograder.checks import evidence as ev
    seen = {}
    stages = api.IN_SANDBOX

    def keep(self, g):
        seen["probe"] = g.probe
    try:
        api.IN_SANDBOX = stages[:2] + (keep,)
        grader.grade(_write(tmp_path, "loop", _module(None, "", LOOP)))
    finally:
        api.IN_SANDBOX = stages
    costs = ev.graded_costs(seen["probe"])
    assert costs and all(set(s) >= {"ops", "flops", "work", "sync"} for _, _, s, _ in costs)
    by_heads = {}
    for _, heads, student, ref in costs:
        by_heads.setdefault(heads, set()).add((ev.kernels(student), ev.kernels(ref)))
    (one_s, one_r), = {min(by_heads[1])}
    eight_s = min(s for s, _ in by_heads[8])
    assert {r for pairs in by_heads.values() for _, r in pairs} == {one_r}   # the reference's
    assert eight_s >= one_s + 7 * 2, by_heads                # two more kernels for each head


def _write(tmp_path, name, text):
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return path
