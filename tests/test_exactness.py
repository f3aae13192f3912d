"""Exact where the contract says exact: masked keys get weight exactly 0 (a finite fill that
leaves 1e-27 is not 0), and plain values are typed (3.0 is not 3, True is not 1)."""
from __future__ import annotations

import pytest
import torch

from autograder.compare import CheckFailed, expect_masked_zero, same_values
from autograder.examples import patch
from mistakes import FILL_OK, REFERENCE

REF = REFERENCE.read_text(encoding="utf-8")
SHAPE_OK = "    return (d, d_total // num_heads)"


#: the options of this module's `grader` (tests/conftest.py)
GRADER = {"seed": 7, "device": "cpu"}


def grade(grader, tmp_path, text: str):
    path = tmp_path / "mha.py"
    path.write_text(text, encoding="utf-8")
    return {r.name: r for r in grader.grade(path).results}


def test_a_finite_fill_that_leaves_tiny_weights_fails_the_masked_check(grader, tmp_path):
    """-60 instead of the dtype's lowest value: every value within tolerance, the masked
    weights about 1e-27, rows with no valid key zeroed: only the exactness fails it."""
    tiny = patch("fill -60", REF, [(FILL_OK, "    weights = torch.softmax(scores.masked_fill("
                                             "~keep, -60.0), dim=-1)\n"
                                             "    return weights * (lens > 0)")])
    results = grade(grader, tmp_path, tiny)
    masked = results["masked_softmax.masked"]
    assert masked.status.value == "failed"
    assert "not exactly 0" in masked.feedback
    assert results["masked_softmax.values"].status.value == "passed"


def test_the_reference_fill_passes(grader, tmp_path):
    results = grade(grader, tmp_path, REF)
    assert results["masked_softmax.masked"].status.value == "passed"
    assert results["attention_pool.masked"].status.value == "passed"
    assert results["head_weight_shape.values"].status.value == "passed"


def test_a_float_where_the_contract_says_int_fails(grader, tmp_path):
    results = grade(grader, tmp_path,
                    patch("float shape", REF, [(SHAPE_OK, "    return (d, d_total / num_heads)")]))
    r = results["head_weight_shape.values"]
    assert r.status.value == "failed" and ".0)" in r.feedback, r.feedback


def test_typed_plain_values():
    assert same_values((12, 3), (12, 3)) and same_values([12, 3], (12, 3))
    assert not same_values((12, 3.0), (12, 3))
    assert not same_values((True, 3), (1, 3))
    assert not same_values(1, True)
    assert same_values(2, 2.0) and not same_values(True, 1.0)


def test_masked_zero_rule_on_both_layouts_of_valid_lens():
    w = torch.full((2, 3, 4), 0.25, dtype=torch.float64)
    lens = torch.tensor([4, 2])
    w[1, :, 2:] = 0.0
    w[1, :, :2] = 0.5
    expect_masked_zero(w, lens, what="w")                      # exact zeros: fine
    w[1, 0, 3] = 1e-27
    with pytest.raises(CheckFailed, match="not exactly 0"):
        expect_masked_zero(w, lens, what="w")
    per_row = torch.tensor([[4, 4, 4], [2, 2, 2]])
    with pytest.raises(CheckFailed, match="1 weights of masked keys"):
        expect_masked_zero(w, per_row, what="w")
