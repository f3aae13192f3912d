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


def three_in_parts() -> str:
    """All three mistakes of CODES in one file, each in its part (as ``parts_style``)."""
    text = REF
    for code in CODES:
        old, new = next((o, n) for o, n in MISTAKES[code]
                        if o in text and (code != "pool.no-scale" or "self.head_dim" in o))
        text = text.replace(old, new)
    return text


def three_inlined() -> str:
    """All three mistakes of CODES in the written-out forward."""
    forward = INLINED
    for code in CODES:
        old, new = INLINED_MISTAKES[code]
        forward = forward.replace(old, new)
    return REF.replace(FORWARD, forward)


GRADER = {"seed": 5, "device": "cpu"}           #: the module's grader (conftest's fixture)


@pytest.fixture(scope="module")
def graded(grader, tmp_path_factory):
    folder = tmp_path_factory.mktemp("prices")
    out = {}
    for style, make in (("parts", parts_style), ("inlined", inlined_style)):
        for code in CODES:
            path = folder / f"{style}-{code}.py"
            path.write_text(make(code), encoding="utf-8")
            out[style, code] = grader.grade(path)
    for style, text in (("parts", three_in_parts()), ("inlined", three_inlined())):
        path = folder / f"{style}-three.py"
        path.write_text(text, encoding="utf-8")
        out[style, "three"] = grader.grade(path)
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


@pytest.mark.parametrize("style", ["parts", "inlined"])
def test_several_mistakes_cost_the_sum_of_their_prices(graded, style):
    """Three mistakes in one file: each named, and the points lost are the listed deductions
    together, within one point (the module's failures are the simulation of all three
    together; the checks they held back are graded on the student's code)."""
    report = graded[style, "three"]
    assert set(CODES) <= {d.code for d in report.diagnoses}, report.diagnoses
    assert {d.code for d in report.deductions} == set(CODES)
    lost = report.max_score - report.score
    listed = sum(d.points for d in report.deductions)
    assert abs(lost - listed) <= 1.0, (lost, [(d.code, d.points) for d in report.deductions])


@pytest.mark.parametrize("code", CODES)
def test_a_mistake_among_others_costs_what_it_costs_alone(graded, code):
    """The deduction listed for a mistake among three is its price alone, within one point."""
    alone = graded["parts", code]
    among = {d.code: d.points for d in graded["parts", "three"].deductions}
    price = sum(d.points for d in alone.deductions if d.code == code)
    assert abs(among[code] - price) <= 1.0, (code, among, price)


def test_three_mistakes_cost_the_same_in_parts_and_inlined(graded):
    """Three mistakes written out in forward (two of the module and one of its mask: named
    by compose's search of two mistakes and a mask's) cost what they cost in their parts,
    each within one point, and in all within one point."""
    part, inlined = graded["parts", "three"], graded["inlined", "three"]
    in_parts = {d.code: d.points for d in part.deductions}
    written_out = {d.code: d.points for d in inlined.deductions}
    assert set(in_parts) == set(written_out) == set(CODES)
    for code in CODES:
        assert abs(in_parts[code] - written_out[code]) <= 1.0, (code, in_parts, written_out)
    assert abs((part.max_score - part.score) - (inlined.max_score - inlined.score)) <= 1.0


def test_a_listed_deduction_is_in_the_points_the_report_gives(graded):
    """A skipped check's points are shared out over the others in whole points (device.cuda
    on a CPU grader): the deduction listed is what the student lost, not the rubric's raw
    points."""
    for code in CODES:
        report = graded["parts", code]
        lost = report.max_score - report.score
        assert sum(d.points for d in report.deductions) == pytest.approx(lost, abs=0.01), code


def test_deductions_follow_their_checks_rescaled():
    """prices.rescaled: each deduction scaled as its home check was, all of them together
    to what the charged checks lose after rescaling."""
    from autograder.model import Deduction
    before = [_r("masked_softmax.masked", "masked_softmax", 0, 7),
              _r("split_heads.values", "split_heads", 0, 6),
              _r("MultiHeadAttention.values", "MultiHeadAttention", 4, 10)]
    after = [replace(before[0], max_score=8.0), before[1],
             replace(before[2], max_score=11.0, score=4.4)]
    found = (Deduction("mask.zero-len-nan", 7.0, ""), Deduction("split.no-transpose", 6.0, ""),
             Deduction("pool.no-scale", 6.0, ""))
    out = prices.rescaled(found, before, after, [r.name for r in before])
    assert sum(d.points for d in out) == pytest.approx(8 + 6 + 6.6, abs=0.02)
    assert out[0].points > out[1].points
    assert prices.rescaled(found, before, before, [r.name for r in before]) == found


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


def test_a_function_check_is_explained_by_the_simulation_of_that_function():
    """attention_pool's failures are explained by the codes whose simulation together gives
    its answers (a mask mistake and a transposition at once), its raises check by none, and
    another part's checks by none."""
    strict = [_r("attention_pool.masked", "attention_pool", 0, 4),
              _r("attention_pool.raises", "attention_pool", 0, 1),
              _r("split_heads.values", "split_heads", 0, 6)]
    simulated = {"attention_pool": frozenset({"mask.zero-len-nan", "pool.transpose-wrong-axes"})}
    explains = prices.explained(strict, strict, [NAN], {}, simulated)
    assert explains == {"attention_pool.masked": ["mask.zero-len-nan"]}


def test_a_released_measurement_is_the_simulated_mistakes_but_a_builtin_never():
    """Measurements graded once the module's failures were explained: a failed one is the
    simulated mistakes' doing; the forbidden built-in and the fresh weights' check are not."""
    strict = [_r("cost.flops", "conventions", 0, 1),
              _r("MultiHeadAttention.builtin", "MultiHeadAttention", 0, 3),
              _r("MultiHeadAttention.init", "MultiHeadAttention", 0, 1)]
    released = frozenset(r.name for r in strict)
    module = frozenset({"mask.zero-len-nan"})
    assert set(prices.explained(strict, strict, [NAN], {}, module, released)) == {"cost.flops"}
    assert prices.explained(strict, strict, [NAN], {}, module) == {}


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
