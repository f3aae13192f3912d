"""Fair marks on real code (issue 19): a code only from that mistake's own evidence, the
mistakes that used to be missed, and no points lost by correct code written otherwise.

The fixtures are the reference with a few changes each, kept as patches in fair_fixtures.py
(their docstrings say which change) and written to a temporary folder; one grader serves
the module.
"""
from __future__ import annotations

import pytest

from autograder.checks import evidence_device as evd
from autograder.diagnoses import mutants as m

import fair_fixtures

MASK_CODES = {"mask.wrong-axis", "mask.ignores-valid-lens", "mask.zero-len-nan",
              "mask.zero-len-uniform", "mask.after-softmax", "mask.fp16-overflow",
              "mask.repeat-not-interleave"}


GRADER = {"seed": 1, "device": "cpu"}           #: the module's grader (conftest's fixture)


@pytest.fixture(scope="module")
def graded(grader, tmp_path_factory):
    """graded(name) -> the Report of fixture ``name`` (seed 1, CPU), graded once."""
    folder = tmp_path_factory.mktemp("fair")
    reports = {}

    def run(name):
        if name not in reports:
            reports[name] = grader.grade(fair_fixtures.write(name, folder))
        return reports[name]
    return run


def codes(report) -> set[str]:
    return {d.code for d in report.diagnoses}


def by_name(report) -> dict:
    return {r.name: r for r in report.results}


def lost(report) -> set[str]:
    return {r.name for r in report.results if r.status.value in ("failed", "error")}


CORRECT = sorted(n for n, c in fair_fixtures.EXPECTED.items() if not c)
WRONG = sorted(n for n, c in fair_fixtures.EXPECTED.items() if c)


@pytest.mark.parametrize("name", [n for n in CORRECT if n.startswith("correct_")])
def test_correct_code_written_otherwise_gets_100_and_no_code(graded, name):
    """Is correct code (float64 inside under autocast, the output projection as an einsum or
    a sum over heads, the key bias left out, dropout per head in a plain list with its own
    train()) given every point, with no diagnosis?"""
    report = graded(name)
    assert report.score == pytest.approx(100.0), sorted(lost(report))
    assert not report.diagnoses, sorted(codes(report))


@pytest.mark.parametrize("name", WRONG)
def test_each_mistake_gets_its_own_code_and_no_other(graded, name):
    """Does each fixture get exactly the codes of its mistakes, and lose points?"""
    report = graded(name)
    assert codes(report) == fair_fixtures.EXPECTED[name]
    assert report.score < 100


@pytest.mark.parametrize("name", fair_fixtures.RAISE_ON_MASKS)
def test_code_that_raises_on_every_masked_call_gets_no_mask_code(graded, name):
    """Does code whose masked calls all raise (a float mask given to masked_fill, .item() on
    the lengths) lose the masked checks without being named a masking mistake it does not
    show (an exception is a mistake's only when it is that mistake's exception)?"""
    report = graded(name)
    assert by_name(report)["masked_softmax.masked"].status.value == "error"
    assert not codes(report) & MASK_CODES, sorted(codes(report))


def test_a_dtype_mismatch_is_not_an_overflow(graded):
    """Is a float32 penalty meeting float16 scores (a dtype mismatch at the matmul) charged as
    dtype.forces-float32, never mask.fp16-overflow, with a check hint that says the same?"""
    report = graded("mask_float32_penalty")
    assert codes(report) == {"dtype.forces-float32"}
    feedback = by_name(report)["precision.autocast"].feedback
    assert "expected scalar type Float but found Half" in feedback
    assert "dtype=scores.dtype" in feedback and "-1e9" not in feedback


def test_a_float32_scale_is_named_where_the_precision_check_charges_it(graded):
    """Where precision.autocast says the values are right only to float32's precision (a 0-dim
    float32 scale), does dtype.forces-float32 name it too?"""
    report = graded("scale_float32_scalar")
    assert "right only to float32's precision" in by_name(report)["precision.autocast"].feedback
    assert lost(report) == {"precision.autocast"}
    assert codes(report) == {"dtype.forces-float32"}


def test_a_fill_that_overflows_bfloat16_only_is_an_overflow(graded):
    """Is float32's minimum as the fill outside float16 (it overflows bfloat16 only) named
    mask.fp16-overflow, saying bfloat16?"""
    report = graded("fill_float32_min_bf16")
    message = next(d.message for d in report.diagnoses if d.code == "mask.fp16-overflow")
    assert "bfloat16 only" in message
    assert lost(report) == {"precision.autocast"}


def test_an_infinite_fill_in_float16_is_an_overflow_and_bfloat16_is_fine(graded):
    """Is a -1e9 torch.where fill (an infinity made from finite operands, no exception)
    named mask.fp16-overflow for float16 alone?"""
    report = graded("where_minus_1e9")
    message = next(d.message for d in report.diagnoses if d.code == "mask.fp16-overflow")
    assert "bfloat16 is fine" in message and "overflowed to infinity" in message


@pytest.mark.parametrize("name", ["fresh_out_proj", "fresh_out_proj_copied"])
def test_an_output_projection_built_in_forward_is_a_missing_out_proj(graded, name):
    """Is an nn.Linear built inside forward (fresh weights, or W_o's values copied) named
    module.missing-out-proj from W_o's missing gradient, and never dropout-in-eval for the
    randomness of fresh weights?"""
    report = graded(name)
    assert codes(report) == {"module.missing-out-proj"}
    assert "W_o.weight gets exactly zero gradient" in by_name(report)["MultiHeadAttention.distinct"].feedback


def test_a_head_count_checked_on_d_model_fails_the_raises_check(graded):
    """Does a constructor that checks num_heads against d_model lose MultiHeadAttention.raises,
    saying that MultiHeadAttention(10, 4, d_total=12) is valid?"""
    report = graded("heads_checked_on_d_model")
    assert "MultiHeadAttention.raises" in lost(report)
    assert "d_model=10, num_heads=4, d_total=12" in by_name(report)["MultiHeadAttention.raises"].feedback


def test_a_missing_bias_that_changes_the_scores_is_named_where_it_fails(graded):
    """W_k's bias may be left out (checks.module.INERT: correct_key_projection_no_bias gets
    100), W_q's may not: the module's checks fail on their values, and the failure and the
    parameter check name W_q.bias (not W_k's, nor an error of the grader's loading)."""
    report = graded("query_projection_no_bias")
    results = by_name(report)
    assert report.score < 100
    for name in ("MultiHeadAttention.values", "MultiHeadAttention.masked"):
        assert results[name].status.value == "failed", (name, results[name].feedback)
        assert "has no W_q.bias" in results[name].feedback
        assert "W_k" not in results[name].feedback
    assert "no parameter W_q.bias" in results["MultiHeadAttention.params"].feedback


def test_the_reference_is_not_refused_a_valid_configuration(graded):
    """Does the reference build MultiHeadAttention(10, 4, d_total=12), the valid case?"""
    from solutions import MultiHeadAttention
    assert MultiHeadAttention(10, 4, d_total=12).W_q.weight.shape == (12, 10)


def test_failure_kinds_are_read_from_the_exception_and_the_operators():
    """Are the low-precision failures told apart: the overflow exception, an infinity made
    from finite operands, a constant lifted infinite only where float32 lifted none, a dtype
    mismatch, and NaN without any overflow?"""
    finite32 = {"value": {"finite": True, "dtype": "float32"}}
    raised = lambda msg: {"raised": {"type": "RuntimeError", "message": msg}}  # noqa: E731
    assert evd.failure_kind(raised("value cannot be converted to type c10::Half without "
                                   "overflow"), finite32) == "overflow"
    assert evd.failure_kind(raised("expected scalar type Float but found Half"), finite32) == "dtype"
    assert evd.failure_kind(raised("expected m1 and m2 to have the same dtype, but got: float "
                                   "!= c10::Half"), finite32) == "dtype"
    nan = {"value": {"finite": False, "dtype": "float16"}}
    assert evd.failure_kind(nan, finite32) == "non-finite"
    lifted = {"value": {"finite": False, "dtype": "float16", "overflowed": ["lift_fresh"]}}
    assert evd.failure_kind(lifted, finite32) == "overflow"
    literal = {"value": {"finite": True, "dtype": "float32", "overflowed": ["lift_fresh"]}}
    assert evd.failure_kind(lifted, literal) == "non-finite"


def test_a_simulated_exception_counts_only_as_that_mistakes_exception():
    """Does the wrong-axis mask's broadcast error match only a broadcast error of n_q against
    n_k at the query axis, and a simulation's other exceptions only the same kind?"""
    expect = m.broadcast_error(4, 5, 2)
    wrong_axis = "The size of tensor a (5) must match the size of tensor b (4) at non-singleton dimension 2"
    assert expect({"type": "RuntimeError", "message": wrong_axis})
    assert not expect({"type": "RuntimeError", "message": wrong_axis.replace("(4)", "(3)")})
    assert not expect({"type": "RuntimeError", "message": "masked_fill_ only supports boolean "
                                                          "masks, but got mask with dtype float"})
    view = RuntimeError("view size is not compatible with input tensor's size and stride")
    assert m.same_failure(view, {"type": "RuntimeError", "message": str(view)})
    assert not m.same_failure(view, {"type": "TypeError", "message": "unsupported operand"})
    assert not m.same_failure(view, {"type": "RuntimeError", "message": "a Tensor with 2 "
                                     "elements cannot be converted to Scalar"})


def test_the_overflow_watch_runs_only_where_a_low_precision_run_failed(monkeypatch):
    """The watch sees every operator from Python (five times the runs' own cost), and its
    notes are read only about a failure: is it left out where every run is finite, and is a
    failed part's every mode run again under it, with the first runs' outcomes kept and the
    watch's notes added?"""
    import types

    import torch

    import solutions
    from autograder.sandbox import probes

    watched = []
    real = probes._watched
    monkeypatch.setattr(probes, "_watched", lambda run: watched.append(run) or real(run))
    spec = dict(evd.SMALL, shapes={"batch": 3, "n_q": 4, "n_k": 5, "seed": 7},
                modes=list(evd.MODES))
    reference = probes.low_precision(solutions, spec)
    assert watched == []
    assert all(r["value"]["finite"] for mode in reference.values() for r in mode.values())

    def penalised(scores, valid_lens):          # -1e9 in the scores' dtype: -inf in float16
        keep = torch.arange(scores.shape[-1]) < valid_lens.reshape(-1, *[1] * (scores.dim() - 1))
        return torch.softmax(scores + (~keep).to(scores.dtype) * -1e9, dim=-1)
    student = types.SimpleNamespace(**{**vars(solutions), "masked_softmax": penalised})
    result = probes.low_precision(student, spec)
    assert len(watched) == len(evd.MODES)       # the failed part's modes, and only those
    fp16 = result["cast-float16"]["masked_softmax"]["value"]
    assert fp16["finite"] is False and "mul" in fp16["overflowed"]
    assert "overflowed" not in result["cast-float32"]["masked_softmax"]["value"]
    assert result["cast-float32"]["module"] == reference["cast-float32"]["module"]


def test_a_module_that_gave_the_references_answers_is_not_simulated(monkeypatch):
    """Where every forward of the module (as written, or as carried forward) gave the
    reference's answer, no mistake can be told from it: are its simulations skipped, and run
    where one forward differs?"""
    import types

    import torch

    from autograder.diagnoses import values
    from autograder.evidence import Evidence

    simulated = []
    monkeypatch.setattr(m, "simulate", lambda *a, **k: simulated.append(a) or (torch.zeros(2), None))
    right, wrong = torch.ones(2), torch.full((2,), 3.0)
    config = types.SimpleNamespace(num_heads=2)

    def probe(student_out):
        run = (config, [{"train": False}], {"runs": [{"out": student_out}]},
               {"state": {}, "runs": [{"out": right}]})
        return types.SimpleNamespace(evidence=Evidence(mha=[run], carried=Evidence(mha=[run])))
    assert not values.forward_behaves_like(probe(right), mask="after-softmax")
    assert simulated == []
    assert not values.forward_behaves_like(probe(wrong), mask="after-softmax")
    assert len(simulated) == 2                  # as written and as carried: both differ


def test_lengths_spread_against_a_head_major_fold_get_advice_for_that_fold(graded):
    """Heads folded head-major (torch.cat of torch.split) with the lengths spread by
    repeat_interleave: is it mask.repeat-not-interleave, with advice that names the fix for
    that fold (.repeat), not only repeat_interleave, whose twin with .repeat gets 100?"""
    report = graded("heads_folded_head_major_interleave")
    message = next(d.message for d in report.diagnoses if d.code == "mask.repeat-not-interleave")
    assert "head-major" in message and "valid_lens.repeat(num_heads)" in message
    assert graded("correct_heads_folded_head_major").score == 100
