"""One mistake, one price (autograder/prices.py): the same named mistake costs the same, within
one point, whether it sits in its part or is written out inside ``forward``; the report lists
each deduction; what no named mistake explains is charged by its checks as before."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from autograder import prices
from autograder.model import CheckResult, Diagnosis, Status
from autograder.scoring import RubricError, load_rubric
from mistakes import MISTAKES, REFERENCE

REF = REFERENCE.read_text(encoding="utf-8")
FORWARD = """        Q = split_heads(self.W_q(queries), self.num_heads)    # (batch, M, n_q, p)
        K = split_heads(self.W_k(keys), self.num_heads)       # (batch, M, n_k, p)
        V = split_heads(self.W_v(values), self.num_heads)     # (batch, M, n_k, p)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.head_dim)  # (batch, M, n_q, n_k)
        weights = masked_softmax(scores, valid_lens)"""
#: the same forward with the split, the scale and the masking written out in it (the parts
#: stay correct and unused); each mistake below is one edit of one line of it
INLINED = """        h, p = self.num_heads, self.head_dim

        def heads(X):
            return X.reshape(X.shape[0], X.shape[1], h, p).transpose(1, 2)

        Q, K, V = heads(self.W_q(queries)), heads(self.W_k(keys)), heads(self.W_v(values))
        scores = Q @ K.transpose(-2, -1) / math.sqrt(p)
        if valid_lens is None:
            weights = torch.softmax(scores, dim=-1)
        else:
            lens = torch.as_tensor(valid_lens).to(scores.device)
            lens = lens.reshape(-1, 1, 1, 1) if lens.dim() == 1 else lens.reshape(-1, 1, lens.shape[-1], 1)
            keep = torch.arange(scores.shape[-1], device=scores.device) < lens
            weights = torch.softmax(scores.masked_fill(~keep, torch.finfo(scores.dtype).min), dim=-1)
            weights = weights.masked_fill(~keep, 0.0)"""
INLINED_MISTAKES = {
    "split.no-transpose": ("X.reshape(X.shape[0], X.shape[1], h, p).transpose(1, 2)",
                           "X.reshape(X.shape[0], h, X.shape[1], p)"),
    "pool.no-scale": ("scores = Q @ K.transpose(-2, -1) / math.sqrt(p)",
                      "scores = Q @ K.transpose(-2, -1)"),
    "mask.zero-len-nan": ("""            weights = torch.softmax(scores.masked_fill(~keep, torch.finfo(scores.dtype).min), dim=-1)
            weights = weights.masked_fill(~keep, 0.0)""",
                          """            weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)"""),
}
CODES = sorted(INLINED_MISTAKES)


def parts_style(code: str) -> str:
    """The reference with the mistake in its part (pool.no-scale: the module's own scale,
    as the module computes its scores itself)."""
    for old, new in MISTAKES[code]:
        if old in REF and (code != "pool.no-scale" or "self.head_dim" in old):
            return REF.replace(old, new)
    raise AssertionError(code)


def inlined_style(code: str) -> str:
    old, new = INLINED_MISTAKES[code]
    assert FORWARD in REF and old in INLINED
    return REF.replace(FORWARD, INLINED.replace(old, new))


@pytest.fixture(scope="module")
def grader():
    from autograder import api
    g = api.Grader(seed=5, device="cpu")
    yield g
    g.close()


@pytest.fixture(scope="module")
def graded(grader, tmp_path_factory):
    folder = tmp_path_factory.mktemp("prices")
    out = {}
    for style, make in (("parts", parts_style), ("inlined", inlined_style)):
        for code in CODES:
            path = folder / f"{style}-{code}.py"
            path.write_text(make(code), encoding="utf-8")
            out[style, code] = grader.grade(path)
    path = folder / "inlined-correct.py"
    path.write_text(REF.replace(FORWARD, INLINED), encoding="utf-8")
    out["inlined", "correct"] = grader.grade(path)
    return out


def test_the_inlined_forward_is_correct(graded):
    """The written-out forward is right: 100, no code (the fixtures' base is fair)."""
    report = graded["inlined", "correct"]
    assert report.score == report.max_score, [r.name for r in report.results if r.score < r.max_score]
    assert not report.diagnoses and not report.deductions


@pytest.mark.parametrize("code", CODES)
def test_one_mistake_costs_the_same_in_a_part_and_inlined(graded, code):
    """Named in both styles, and the same points lost within one point, as its price."""
    part, inlined = graded["parts", code], graded["inlined", code]
    for report in (part, inlined):
        assert code in [d.code for d in report.diagnoses], (report.submission, report.diagnoses)
    lost_part = part.max_score - part.score
    lost_inlined = inlined.max_score - inlined.score
    assert lost_part > 0 and lost_inlined > 0
    assert abs(lost_part - lost_inlined) <= 1.0, (code, lost_part, lost_inlined)


def test_each_deduction_is_listed_in_every_output(graded):
    """The report lists the deduction as a marker would, in the JSON and the text."""
    from autograder.writers import json_writer, text
    report = graded["inlined", "mask.zero-len-nan"]
    assert [d.code for d in report.deductions] == ["mask.zero-len-nan"]
    data = json.loads(json_writer.render(report))
    assert data["deductions"][0]["code"] == "mask.zero-len-nan"
    assert data["deductions"][0]["points"] > 0
    assert f"-{report.deductions[0].points:g} mask.zero-len-nan" in text.render(report)


# --- the rule itself, on results ---------------------------------------------------------

def _r(name, part, score, points, status=None):
    status = status or (Status.PASSED if score == points else Status.FAILED)
    return CheckResult(name, part, status, score, points, part=part)


POINTS = {"masked_softmax.masked": 7.0, "MultiHeadAttention.masked": 6.0,
          "MultiHeadAttention.values": 10.0, "cost.flops": 1.0}
NAN = Diagnosis("mask.zero-len-nan", "rows with no valid key give NaN")


def test_explained_failures_cost_the_price_and_never_more_than_their_checks():
    strict = [_r("masked_softmax.masked", "masked_softmax", 7, 7),
              _r("MultiHeadAttention.masked", "MultiHeadAttention", 0, 6),
              _r("MultiHeadAttention.values", "MultiHeadAttention", 0, 10)]
    simulated = frozenset({"mask.zero-len-nan"})
    explains = prices.explained(strict, strict, [NAN], {}, simulated)
    assert set(explains) == {"MultiHeadAttention.masked", "MultiHeadAttention.values"}
    final, deductions = prices.apply(strict, explains, [NAN], POINTS, {})
    assert sum(r.max_score - r.score for r in final) == pytest.approx(7.0)
    assert [(d.code, d.points) for d in deductions] == [("mask.zero-len-nan", 7.0)]
    # an instructor's price above the checks' points is capped at them
    final, deductions = prices.apply(strict, explains, [NAN], POINTS, {"mask.zero-len-nan": 40})
    assert sum(r.max_score - r.score for r in final) == pytest.approx(16.0)
    assert deductions[0].points == pytest.approx(16.0)


def test_a_failure_no_named_mistake_explains_is_charged_by_its_check():
    """Without the module simulated as the mistake, its failures stay the checks' own."""
    strict = [_r("masked_softmax.masked", "masked_softmax", 0, 7),
              _r("MultiHeadAttention.values", "MultiHeadAttention", 0, 10)]
    explains = prices.explained(strict, strict, [NAN], {}, frozenset())
    assert set(explains) == {"masked_softmax.masked"}
    final, _ = prices.apply(strict, explains, [NAN], POINTS, {})
    assert sum(r.max_score - r.score for r in final) == pytest.approx(17.0)


def test_a_cheaper_carried_failure_is_charged_up_to_the_price():
    """Error carried forward cleared the module; the part's own check is worth less than the
    price an instructor set: the rest is taken from the cleared checks, marked failed."""
    strict = [_r("masked_softmax.masked", "masked_softmax", 0, 7),
              _r("MultiHeadAttention.masked", "MultiHeadAttention", 0, 6)]
    final = [strict[0], replace(strict[1], score=6.0, status=Status.PASSED)]
    explains = prices.explained(strict, final, [NAN], {}, frozenset())
    out, _ = prices.apply(final, explains, [NAN], POINTS, {"mask.zero-len-nan": 9})
    assert sum(r.max_score - r.score for r in out) == pytest.approx(9.0)
    assert out[1].status is Status.FAILED and "one price" in out[1].feedback


def test_unpriced_codes_explain_nothing():
    strict = [_r("split_heads.raises", "split_heads", 0, 2)]
    d = Diagnosis("shape.no-valueerror", "raise ValueError")
    assert prices.explained(strict, strict, [d], {}, frozenset({"shape.no-valueerror"})) == {}


def test_every_named_code_is_priced_or_said_to_be_unpriced():
    from autograder.diagnoses import DIAGNOSES, compose, structure, values  # noqa: F401
    codes = {code for code, _ in DIAGNOSES}
    assert codes <= set(prices.HOME) | prices.UNPRICED, codes - set(prices.HOME) - prices.UNPRICED
    known = set(load_rubric().points)
    assert all(name in known for homes in prices.HOME.values() for name in homes)


def test_the_rubric_prices_are_checked(tmp_path):
    base = (REFERENCE.parent.parent / "autograder" / "rubric.toml").read_text()
    bad = tmp_path / "r.toml"
    bad.write_text(base.replace("[prices]", '[prices]\n"mask.no-such" = 3'))
    with pytest.raises(RubricError, match="not a priced mistake code"):
        load_rubric(bad)
    good = tmp_path / "g.toml"
    good.write_text(base.replace("[prices]", '[prices]\n"mask.zero-len-nan" = 5'))
    assert load_rubric(good).prices == {"mask.zero-len-nan": 5.0}
