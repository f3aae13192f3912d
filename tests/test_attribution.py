"""Each mistake charged where it is, and once: dropout's placement, a rubric's disabled
checks, gates that hold back only what depends on them, error carried forward."""
from __future__ import annotations

import textwrap

import pytest

from autograder import api
from test_forged_facts import BASE


@pytest.fixture(scope="module")
def grader():
    g = api.Grader(seed=11)
    yield g
    g.close()


def grade(grader, tmp_path, text: str) -> dict:
    path = tmp_path / "mha.py"
    path.write_text(BASE + textwrap.dedent(text))
    return grader.grade(path).to_dict()


def check(report, name):
    return next(c for c in report["checks"] if c["name"] == name)


DROPOUT_ON_OUTPUT = '''
class MultiHeadAttention(MultiHeadAttention):
    def heads(self, Q, K, V, valid_lens):
        weights = masked_softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), valid_lens)
        return self.dropout(weights @ V), weights
'''
DROPOUT_AFTER_W_O = '''
class MultiHeadAttention(MultiHeadAttention):
    def heads(self, Q, K, V, valid_lens):
        return attention_pool(Q, K, V, valid_lens)

    def forward(self, queries, keys, values, valid_lens=None):
        return self.dropout(super().forward(queries, keys, values, valid_lens))
'''
DROPOUT_FUNCTIONAL = '''
import torch.nn.functional as F

class MultiHeadAttention(MultiHeadAttention):
    def heads(self, Q, K, V, valid_lens):
        weights = masked_softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), valid_lens)
        return F.dropout(weights, self.dropout.p, training=self.training) @ V, weights
'''


@pytest.mark.parametrize("code", [DROPOUT_ON_OUTPUT, DROPOUT_AFTER_W_O])
def test_dropout_anywhere_but_on_the_weights_fails_the_dropout_check(grader, tmp_path, code):
    report = grade(grader, tmp_path, code)
    dropout = check(report, "MultiHeadAttention.dropout")
    assert dropout["status"] == "failed" and "not on the attention weights" in dropout["feedback"]
    assert check(report, "MultiHeadAttention.values")["status"] == "passed"


def test_dropout_on_the_weights_written_otherwise_passes(grader, tmp_path):
    report = grade(grader, tmp_path, DROPOUT_FUNCTIONAL)
    assert check(report, "MultiHeadAttention.dropout")["status"] == "passed"
    assert report["score"] == 100.0


def test_the_reference_gets_the_full_total_whatever_check_is_disabled(tmp_path):
    """A rubric that disables a check others require grades the dependents without that gate:
    the reference still earns the rubric's whole total (each check disabled in turn)."""
    from autograder import scoring
    g = api.Grader(seed=3)
    try:
        names = [c.name for c in g.selected()]
        for name in names:
            text = scoring.DEFAULT_RUBRIC.read_text().replace("checks = []", f"checks = [{name!r}]")
            path = tmp_path / "rubric.toml"
            path.write_text(text)
            g.rubric = scoring.load_rubric(path, known=set(g.checks))
            report = g.grade(api.PROJECT / "solutions" / "mha.py")
            assert name not in {r.name for r in report.results}
            assert report.score == report.max_score, (name, [
                (r.name, r.feedback[:120]) for r in report.results if r.score < r.max_score])
            total = sum(v for k, v in g.rubric.points.items()     # the disabled one counts 0
                        if g.checks[k].group != "questions")          # (a notebook's only)
            assert report.max_score == round(total, 2), (name, report.max_score, total)
    finally:
        g.close()


# ------------------------------------------------------------------------------------------
# Error carried forward: a part's mistake charged once, at the part's checks

ONE_PART_MISTAKES = {
    "split_heads": ("return X.reshape(*X.shape[:-1], num_heads, X.shape[-1] // num_heads)"
                    ".transpose(-3, -2)",
                    "return X.reshape(X.shape[0], num_heads, X.shape[1], X.shape[-1] // num_heads)"),
    "concat_heads": ("return X.transpose(-3, -2).reshape(*X.shape[:-3], n, h * p)",
                     "return X.reshape(*X.shape[:-3], n, h * p)"),
    "masked_softmax": ("    return weights.masked_fill(~keep, 0.0)\n",
                       "    return weights\n"),
}


def with_mistake(part: str) -> str:
    old, new = ONE_PART_MISTAKES[part]
    assert old in BASE
    return BASE.replace(old, new)


def rubric_without_carry(tmp_path):
    from autograder import scoring
    path = tmp_path / "strict.toml"
    path.write_text(scoring.DEFAULT_RUBRIC.read_text().replace("carry_forward = true",
                                                               "carry_forward = false"))
    return path


@pytest.mark.parametrize("part", sorted(ONE_PART_MISTAKES))
def test_a_mistake_in_one_part_is_charged_at_that_part_only(grader, tmp_path, part):
    """A module built from its own parts whose one mistake is in split_heads, concat_heads or
    masked_softmax keeps its module points (graded with the correct part in its place)."""
    path = tmp_path / "mha.py"
    path.write_text(with_mistake(part))
    report = grader.grade(path).to_dict()
    assert report["score"] >= 88, [(c["name"], c["score"]) for c in report["checks"]
                                   if c["score"] < c["max_score"]]
    lost = {c["name"] for c in report["checks"] if c["score"] < c["max_score"]
            and c["status"] != "skipped"}
    assert lost and all(name.startswith(part + ".") for name in lost), lost
    carried = [c for c in report["checks"] if "error carried forward" in c["feedback"]]
    assert carried and all(part in c["feedback"] for c in carried)
    assert check(report, "MultiHeadAttention.values")["status"] == "passed"


@pytest.mark.parametrize("part", sorted(ONE_PART_MISTAKES))
def test_without_carry_forward_the_module_pays_for_its_part(tmp_path, part):
    path = tmp_path / "mha.py"
    path.write_text(with_mistake(part))
    g = api.Grader(seed=11, rubric=rubric_without_carry(tmp_path))
    try:
        strict = g.grade(path).to_dict()
    finally:
        g.close()
    assert strict["score"] < 80, strict["score"]
    assert any(c["name"].startswith("MultiHeadAttention.") and c["status"] != "passed"
               for c in strict["checks"])
    assert not any("carried forward" in c["feedback"] for c in strict["checks"])


def test_a_correct_value_error_is_not_held_back_by_wrong_values(grader, tmp_path):
    path = tmp_path / "mha.py"
    path.write_text(with_mistake("split_heads"))
    report = grader.grade(path).to_dict()
    assert check(report, "split_heads.values")["status"] == "failed"
    assert check(report, "split_heads.raises")["status"] == "passed"
    assert check(report, "functions.pure")["status"] == "passed"


def test_the_carried_part_never_enters_the_sandbox_as_code():
    """The proxy holds no reference code: only what the grader answers to the student's calls."""
    import inspect
    from autograder.sandbox import probes
    source = inspect.getsource(probes.carried)
    assert "solutions" not in inspect.getsource(probes) and "ask(" in source


# ------------------------------------------------------------------------------------------
# Severity by what is wrong: a float32 detour is a precision mistake, charged once

SOFTMAX = "weights = torch.softmax(scores.masked_fill(~keep, torch.finfo(scores.dtype).min), dim=-1)"
DETOUR_INSIDE = (SOFTMAX, "weights = torch.softmax(scores.float().masked_fill(~keep, -1e30), "
                          "dim=-1).to(scores.dtype)")
FLOAT32_OUT = ("    if valid_lens is None:\n        return torch.softmax(scores, dim=-1)",
               "    scores = scores.float()\n"
               "    if valid_lens is None:\n        return torch.softmax(scores, dim=-1)")


def lost_checks(report) -> set[str]:
    return {c["name"] for c in report["checks"] if c["score"] < c["max_score"]
            and c["status"] != "skipped"}


def test_a_float32_detour_is_charged_once_at_the_precision_check(grader, tmp_path):
    """Values right to float32's precision only (the inputs' dtype kept): every value check
    counts them right, the precision check charges the detour once, and the code is named."""
    assert DETOUR_INSIDE[0] in BASE
    path = tmp_path / "mha.py"
    path.write_text(BASE.replace(*DETOUR_INSIDE))
    report = grader.grade(path).to_dict()
    assert lost_checks(report) == {"precision.autocast"}
    assert "dtype.forces-float32" in {d["code"] for d in report["diagnoses"]}
    assert report["score"] >= 97


def test_a_function_that_does_not_keep_the_dtype_is_charged_there(grader, tmp_path):
    """masked_softmax returning float32 for float64 (and float16) inputs: its own checks say
    so, what is built on it is carried forward, and the code is named."""
    assert FLOAT32_OUT[0] in BASE
    path = tmp_path / "mha.py"
    path.write_text(BASE.replace(*FLOAT32_OUT))
    report = grader.grade(path).to_dict()
    lost = lost_checks(report)
    assert lost and all(n.startswith("masked_softmax.") or n == "precision.autocast"
                        for n in lost), lost
    assert "keep the inputs' dtype" in check(report, "masked_softmax.values")["feedback"]
    assert "dtype.forces-float32" in {d["code"] for d in report["diagnoses"]}
    assert report["score"] >= 85
