"""The evidence record (``autograder.evidence``): typed, one layer below the checks and the
diagnoses, the carried pass's evidence held apart and only ever adding to the strict one's."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import torch

from autograder.checks import Probe, Side
from autograder.diagnoses import values
from autograder.evidence import Evidence

PACKAGE = Path(__file__).resolve().parent.parent / "autograder"


def test_the_record_imports_nothing_of_the_grader_so_it_sits_below_checks_and_diagnoses():
    tree = ast.parse((PACKAGE / "evidence.py").read_text(encoding="utf-8"))
    imported = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert all(isinstance(n, ast.ImportFrom) and n.level == 0 and n.module in
               ("__future__", "dataclasses", "typing") for n in imported)


def test_each_probe_gets_its_own_record_and_fields_are_typed_not_keys():
    one, two = (Probe(student=Side(None), reference=Side(None), seed=0) for _ in range(2))
    one.evidence.calls.setdefault("split_heads", []).append(("case", {"value": 1}, 1))
    assert two.evidence.calls == {} and isinstance(one.evidence, Evidence)
    names = {f.name for f in dataclasses.fields(Evidence)}
    assert {"calls", "mha", "forbidden", "rules", "source", "carried", "grader_faults"} <= names
    try:
        Evidence(not_a_fact=1)          # an unknown fact is an error, not a new key
    except TypeError:
        pass
    else:
        raise AssertionError("Evidence took a field it does not declare")


def test_the_carried_pass_only_adds_what_it_saw():
    """What the carried runs saw counts with the strict pass's (a forbidden call, an input
    changed in place, a non-deterministic eval), and a strict pass alone is itself."""
    strict = Evidence(forbidden={"torch.nn.functional.scaled_dot_product_attention"})
    assert strict.both() == (strict,)
    strict.carried = Evidence(forbidden={"torch.nn.MultiheadAttention"},
                              eval_nondeterministic=True)
    strict.carried.calls["masked_softmax"] = [("case", {"value": torch.zeros(1), "mutated": [0]},
                                               torch.zeros(1))]
    assert strict.forbidden_reached() == ["torch.nn.MultiheadAttention",
                                          "torch.nn.functional.scaled_dot_product_attention"]
    assert values.changed_inputs(strict) == ["masked_softmax"]
    probe = Probe(student=Side(None), reference=Side(None), seed=0, evidence=strict)
    assert values._dropout_in_eval(probe, [])
    assert not values._dropout_in_eval(
        Probe(student=Side(None), reference=Side(None), seed=0), [])
