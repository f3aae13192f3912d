"""Each mistake charged where it is, and once: dropout's placement, a rubric's disabled
checks, gates that hold back only what depends on them, error carried forward."""
from __future__ import annotations

import textwrap

import pytest

from autograder import api
from test_forged_facts import BASE


#: the options of this module's `grader` (tests/conftest.py)
GRADER = {"seed": 11}


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


# ------------------------------------------------------------------------------------------
# Error carried forward along the contract's dependency graph only

CIRCLE = '''
def masked_softmax(scores, valid_lens=None):
    if valid_lens is not None and attention_pool is not _own_pool:   # answered by the grader?
        n_k = scores.shape[-1]
        eye = torch.eye(n_k, dtype=scores.dtype, device=scores.device)
        return attention_pool(scores, eye * math.sqrt(n_k), eye, valid_lens)[1]
    return torch.softmax(scores, dim=-1)                            # never masks


def attention_pool(Q, K, V, valid_lens=None):
    weights = masked_softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), valid_lens)
    return weights @ V, weights


_own_pool = attention_pool
'''


def test_two_wrong_parts_cannot_answer_for_each_other(grader, tmp_path):
    """masked_softmax is never graded with attention_pool answered by the reference (a part's
    own checks are its own), so asking the 'proxy' earns nothing (round 3, c04)."""
    honest = grade(grader, tmp_path, CIRCLE.replace("if valid_lens is not None and", "if False and"))
    circle = grade(grader, tmp_path, CIRCLE)
    assert check(circle, "masked_softmax.masked")["status"] == "failed"
    assert circle["score"] <= honest["score"] + 1e-6 < 100


def test_a_part_is_graded_with_only_the_parts_it_is_built_on_answered(grader, tmp_path):
    """attention_pool's checks are graded with a correct masked_softmax (it is built on it);
    the module's with every wrong part; the parts' own checks with none."""
    report = grade(grader, tmp_path, CIRCLE.replace("if valid_lens is not None and",
                                                    "if False and"))
    pool = check(report, "attention_pool.masked")
    assert pool["status"] == "passed" and "given a correct masked_softmax" in pool["feedback"]
    assert check(report, "masked_softmax.masked")["status"] == "failed"
    assert "given a correct" in check(report, "MultiHeadAttention.masked")["feedback"]


LOOP_ON_A_CRASHING_PART = '''
def masked_softmax(scores, valid_lens=None, _inner=masked_softmax):
    return _inner(scores.float(), valid_lens)            # float32 out: the module crashes


class MultiHeadAttention(MultiHeadAttention):
    def heads(self, Q, K, V, valid_lens):
        pairs = [attention_pool(Q[:, j:j + 1], K[:, j:j + 1], V[:, j:j + 1], valid_lens)
                 for j in range(self.num_heads)]
        return torch.cat([o for o, _ in pairs], 1), torch.cat([w for _, w in pairs], 1)
'''


def test_work_done_by_answered_parts_is_counted_at_the_references_cost(grader, tmp_path):
    """A forward that cannot run with its own wrong part has its cost read with the part
    answered; each answer counts what the reference's part cost, so a Python loop over heads
    around an answered attention_pool still grows with num_heads."""
    report = grade(grader, tmp_path, LOOP_ON_A_CRASHING_PART)
    parallel = check(report, "cost.parallel")
    assert parallel["status"] == "failed" and "grows with num_heads" in parallel["feedback"], \
        parallel
    vectorised = grade(grader, tmp_path, LOOP_ON_A_CRASHING_PART.split("\n\nclass")[0])
    assert check(vectorised, "cost.parallel")["status"] == "passed"


@pytest.mark.parametrize("fn, args", [
    ("attention_pool", "Q (4, 2, 3), K (1, 5, 3), V (1, 5, 3): other leading axes"),
    ("masked_softmax", "scores (2, 3, 4), valid_lens float"),
    ("split_heads", "X (2, 3, 12), num_heads True"),
    ("concat_heads", "X (2, 3, 4): 3-d"),
    ("attention_pool", "an answer of 2**21 elements"),
])
def test_an_answered_part_takes_only_the_calls_the_contract_allows(grader, fn, args):
    """A call the contract does not allow is refused in the grader, before anything is
    computed (the reference's sandbox is not even started); one it allows is answered."""
    import torch

    from autograder import carry
    calls = {
        "Q (4, 2, 3), K (1, 5, 3), V (1, 5, 3): other leading axes":
            [torch.ones(4, 2, 3), torch.ones(1, 5, 3), torch.ones(1, 5, 3)],
        "scores (2, 3, 4), valid_lens float": [torch.ones(2, 3, 4), torch.ones(2)],
        "X (2, 3, 12), num_heads True": [torch.ones(2, 3, 12), True],
        "X (2, 3, 4): 3-d": [torch.ones(2, 3, 4)],
        "an answer of 2**21 elements": [torch.ones(1, 1024, 1), torch.ones(1, 1024, 1),
                                        torch.ones(1, 1024, 1024)],
    }
    unstarted = carry.Answers(lambda: pytest.fail("the reference's sandbox was started"))
    answer = unstarted({"fn": fn, "mode": "value", "args": calls[args]}, {fn})
    assert "raised" in answer and "answer" not in answer, answer
    fine = grader.answers({"fn": "attention_pool", "mode": "value",
                           "args": [torch.ones(2, 4, 3), torch.ones(2, 5, 3), torch.ones(2, 5, 2)]},
                          {"attention_pool"})
    assert "answer" in fine and fine["cost"]["flops"] > 0
