"""The notebook's numeric questions: answered in a cell, read through the sandbox, graded
against the student's variant; and the cost-parity numbers the narrative quotes."""
from __future__ import annotations

import copy
import math
import re

import nbformat
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import solutions
from assignments import build, narrative
from autograder import variants
from autograder.api import Grader

ROOT = build.ROOT
QUESTIONS_ONLY = '[points]\n"questions.key_shape" = 2\n"questions.params" = 2\n'


#: the options of this module's `grader` (tests/conftest.py)
GRADER = {"seed": 0, "device": "cpu", "rubric_text": QUESTIONS_ONLY}


def source_notebook():
    return nbformat.read(ROOT / build.NOTEBOOK, as_version=4)


def with_answers(tmp_path, key_shape: str, many: str, one: str, name="mha.ipynb"):
    """The source notebook with its answer cell returning these expressions."""
    nb = source_notebook()
    cell = next(c for c in nb.cells if c.id == narrative.NUMERIC_GRADE_ID)
    cell.source = (f"def key_matrix_shape():\n    return {key_shape}\n\n\n"
                   f"def params_many_heads():\n    return {many}\n\n\n"
                   f"def params_one_head():\n    return {one}\n")
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


def outcomes(report) -> dict[str, tuple[str, str]]:
    return {r.name: (r.status.value, r.feedback) for r in report.results}


def test_the_source_notebooks_answers_are_right(grader):
    """Does the source notebook (the default variant's model answers) earn both questions?"""
    report = grader.grade(ROOT / build.NOTEBOOK)
    assert outcomes(report) == {"questions.key_shape": ("passed", ""), "questions.params": ("passed", "")}
    assert report.score == report.max_score == 4


def test_wrong_answers_lose_their_points_and_say_why(grader, tmp_path):
    """A head's key matrix given as d × d, and M heads counted as M full-width heads: do both
    fail, naming the student's sizes and the rule, without giving the right answer away?"""
    d, m = variants.DEFAULT.param_d, variants.DEFAULT.param_heads
    report = grader.grade(with_answers(tmp_path, "(96, 96)", str(3 * m * d * d), str(3 * d * d)))
    got = outcomes(report)
    assert got["questions.key_shape"][0] == got["questions.params"][0] == "failed"
    assert "d=96, d_h=96, M=6" in got["questions.key_shape"][1]
    assert "(96, 16)" not in got["questions.key_shape"][1]
    assert f"params_many_heads() returned {3 * m * d * d}" in got["questions.params"][1]
    assert "params_one_head()" not in got["questions.params"][1]          # that one was right
    assert report.score == 0


def test_unanswered_and_malformed_answers(grader, tmp_path):
    """The released stub (raise NotImplementedError) errs with 'not answered yet'; a tensor or
    a string instead of an integer fails saying to return a plain integer."""
    nb = source_notebook()
    release, _ = __import__("nbgrader.preprocessors", fromlist=["ClearSolutions"]).ClearSolutions(
        code_stub=build.CODE_STUB).preprocess(copy.deepcopy(nb), {})
    nbformat.write(release, tmp_path / "released.ipynb")
    got = outcomes(grader.grade(tmp_path / "released.ipynb"))
    assert got["questions.key_shape"][0] == "error"
    assert "key_matrix_shape() is not answered yet" in got["questions.key_shape"][1]
    got = outcomes(grader.grade(with_answers(tmp_path, "torch.tensor([96, 16])", "'49152'", "49152",
                                             name="odd.ipynb")))
    assert got["questions.key_shape"][0] == "failed" and "tuple" in got["questions.key_shape"][1]
    assert got["questions.params"][0] == "failed" and "plain integer" in got["questions.params"][1]


def test_a_module_is_not_asked_the_notebooks_questions():
    """Is a .py submission graded out of 100, without the numeric questions, and a notebook
    out of 104?"""
    from autograder import scoring
    rubric = scoring.load_rubric()
    g = Grader(seed=0, device="cpu")
    try:
        g.checks = {name: c for name, c in g.checks.items() if name.startswith(("questions.", "head_weight"))}
        module = g.grade(ROOT / "solutions" / "mha.py")
        book = g.grade(ROOT / build.NOTEBOOK)
    finally:
        g.close()
    assert [r.name for r in module.results] == ["head_weight_shape.values", "head_weight_shape.raises"]
    assert [r.name for r in book.results][-2:] == ["questions.key_shape", "questions.params"]
    assert sum(v for k, v in rubric.points.items() if not k.startswith("questions.")) == 100


# ---------------------------------------------------------------------------------------------
# The narrative's cost-parity numbers, computed


def measured_cost(d: int, n: int, heads: int) -> dict[str, int]:
    """Parameters, matrix-product FLOPs (torch's flop counter) and softmax entries of the
    reference module on self-attention of n tokens, batch 1."""
    torch.manual_seed(0)
    model = solutions.MultiHeadAttention(d, heads)
    x = torch.randn(1, n, d)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(x, x, x)
    return {"params": sum(p.numel() for p in model.parameters()), "flops": counter.get_total_flops(),
            "softmax": model.attention_weights.numel()}


@pytest.mark.parametrize("variant", [variants.DEFAULT, variants.derive("student-a", "course secret")],
                         ids=["default", "derived"])
def test_the_quoted_cost_parity_numbers_are_measured(variant):
    """Do the parameter count, the matrix products' FLOPs and the softmax entries that section 1
    quotes for this variant equal what the reference module measures, with M heads and with
    one head: parameters and FLOPs the same, the softmax M times larger?"""
    d, n, m = variant.example_d, variant.example_n, variant.example_heads
    many, one = measured_cost(d, n, m), measured_cost(d, n, 1)
    quoted = variants.cost_figures(d, n, m)
    assert many["params"] == one["params"] == quoted["params"] == 4 * quoted["params_role"]
    assert many["flops"] == one["flops"] == quoted["flops"] == quoted["proj_flops"] + quoted["score_flops"]
    assert (many["softmax"], one["softmax"]) == (quoted["softmax_many"], quoted["softmax_one"])
    assert many["softmax"] == m * one["softmax"]
    text = build.notebook(build.read_reference((ROOT / build.SOLUTION).read_text()),
                          build.read_checks((ROOT / build.CHECKS).read_text()), variant, figures=False)
    section = next(c.source for c in text.cells if c.id == "section-1")

    def shown(value: int) -> str:
        return f"{value:,}".replace(",", r"\,")
    for value in (many["params"], many["flops"], many["softmax"], one["softmax"], d * d):
        assert shown(value) in section, value
    assert f"$n = {n}$ tokens" in section and f"$M = {m}$ heads" in section


def test_the_numeric_answers_follow_the_shape_rule():
    """Are a variant's answers what the reference's own head_weight_shape and parameter count
    give for its sizes?"""
    for v in (variants.DEFAULT, variants.derive("x", "s"), variants.derive("y", "s")):
        answers = v.answers()
        assert answers["key_matrix_shape"] == solutions.head_weight_shape(v.key_d, v.key_d_total, v.key_heads)
        roles = solutions.MultiHeadAttention(v.param_d, v.param_heads)
        qkv = sum(getattr(roles, r).weight.numel() for r in ("W_q", "W_k", "W_v"))
        assert answers["params_many_heads"] == qkv == answers["params_one_head"]
        assert math.prod(answers["key_matrix_shape"]) * v.key_heads * 1 == v.key_d * v.key_d_total
        assert re.fullmatch(r"\(\d+, \d+\)", v.values()["answer_key_matrix_shape"])


def test_a_py_upload_is_reported_as_not_answering_under_policy_every(tmp_path):
    """With ``policy.questions = "every"`` (the Gradescope bundle's ``--questions include``),
    is a .py upload graded out of the questions' points too, each reported as not answered
    (0 points, pointing at the notebook), so a .py and a notebook share one total? Without
    it, is a .py not asked them at all?"""
    every = tmp_path / "every.toml"
    every.write_text('[policy]\nquestions = "every"\n' + QUESTIONS_ONLY)
    g = Grader(seed=0, device="cpu", rubric=every)
    try:
        report = g.grade(ROOT / "solutions" / "mha.py")
        notebook = g.grade(ROOT / build.NOTEBOOK)
    finally:
        g.close()
    got = outcomes(report)
    assert set(got) == {"questions.key_shape", "questions.params"}
    assert all(status == "error" and "upload the notebook mha.ipynb" in text
               for status, text in got.values())
    assert report.score == 0 and report.max_score == notebook.max_score == notebook.score == 4
    plain = tmp_path / "plain.toml"
    plain.write_text(QUESTIONS_ONLY)
    g = Grader(seed=0, device="cpu", rubric=plain)
    try:
        assert g.grade(ROOT / "solutions" / "mha.py").results == ()
    finally:
        g.close()


def test_the_gradescope_bundles_total_is_what_every_upload_is_graded_out_of(tmp_path):
    """Does the bundle's stated total hold for a .py and a notebook alike: the questions
    left out (0 points) by default, or asked of every upload with --questions include?"""
    from autograder import package, scoring
    text = scoring.DEFAULT_RUBRIC.read_text(encoding="utf-8")
    excluded = package._rubric_of(package.with_questions(text, "exclude"))
    included = package._rubric_of(package.with_questions(text, "include"))
    questions = ("questions.key_shape", "questions.params")
    assert all(excluded.points[q] == 0 for q in questions) and excluded.questions == "notebook"
    assert all(included.points[q] == 2 for q in questions) and included.questions == "every"
    code = sum(v for k, v in excluded.points.items() if not k.startswith("questions."))
    assert package._total(excluded) == code == 100
    assert package._total(included) == code + 4
    with pytest.raises(package.PackageError, match="questions must be one of"):
        package.with_questions(text, "sometimes")
    bundle = package.gradescope(tmp_path / "a.zip", check_pins=False)
    assert bundle["max_score"] == 100
    assert package.gradescope(tmp_path / "b.zip", questions="include",
                              check_pins=False)["max_score"] == 104
