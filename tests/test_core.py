"""The autograder core: scores, partial credit, clear messages, diagnoses, and the SPEC's JSON."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import mistakes
from autograder import api, scoring
from autograder.model import Status

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "solutions" / "mha.py"
STUB = ROOT / "assignments" / "stub" / "mha.py"
NOTEBOOK = ROOT / "assignments" / "source" / "mha" / "mha.ipynb"
CORRECT = sorted((ROOT / "tests" / "submissions" / "correct").glob("*.py"))
API_NAMES = ("head_weight_shape", "project", "project_heads", "split_heads", "concat_heads",
             "masked_softmax", "attention_pool", "MultiHeadAttention")


#: the options of this module's `grader` (tests/conftest.py)
GRADER = {"seed": 1234}


def test_default_rubric_totals_100():
    """Do the default rubric's points add up to 100 for the code, plus 4 for the notebook's
    numeric questions, over checks that all exist?"""
    from autograder import checks
    rubric = scoring.load_rubric(known=set(checks.load_all()))
    questions = {name for name, c in checks.load_all().items() if c.group == "questions"}
    assert sum(v for name, v in rubric.points.items() if name not in questions) == pytest.approx(100)
    assert sum(rubric.points[name] for name in questions) == pytest.approx(4)
    assert set(rubric.points) == set(checks.load_all())


def _results_of_the_default_rubric(passing=lambda name: True):
    from autograder.model import CheckResult
    rubric = scoring.load_rubric()
    return rubric, [CheckResult(name, name.split(".")[0],
                                Status.SKIPPED if name == "device.cuda" else
                                Status.PASSED if passing(name) else Status.FAILED,
                                points if passing(name) and name != "device.cuda" else 0.0, points)
                    for name, points in rubric.points.items() if not name.startswith("questions.")]


def test_a_skipped_check_is_rescaled_in_whole_points():
    """With device.cuda skipped (a CPU grader, policy "rescale"), is every check worth a whole
    number of points, still 100 in all, each within one point of its exact share, so a correct
    file gets 100 and a wrong one a whole score (not 4.08 or 93.88)?"""
    rubric, results = _results_of_the_default_rubric()
    assert rubric.skipped == "rescale"
    scored, notes = scoring.score(results, rubric)
    ran = [r for r in scored if r.status is not Status.SKIPPED]
    assert all(float(r.max_score).is_integer() and float(r.score).is_integer() for r in scored)
    assert sum(r.max_score for r in scored) == sum(r.score for r in scored) == 100
    exact = {r.name: r.max_score * 100 / 98 for r in results if r.status is not Status.SKIPPED}
    assert all(abs(r.max_score - exact[r.name]) < 1 for r in ran)
    assert "whole points" in notes[0] and "total stays 100" in notes[0]
    _, wrong = _results_of_the_default_rubric(lambda name: name != "split_heads.values")
    scored, _ = scoring.score(wrong, rubric)
    assert float(sum(r.score for r in scored)).is_integer() and sum(r.score for r in scored) < 100


def test_whole_shares_is_the_largest_remainder_method():
    """Are shares rounded down and the points left over given to the largest remainders
    (ties to the earlier weight), and exact where a weight or the total is not whole?"""
    assert scoring.whole_shares([1, 1, 1], 10) == [4.0, 3.0, 3.0]
    assert scoring.whole_shares([4, 10, 7], 22) == [4.0, 11.0, 7.0]       # 4.19, 10.48, 7.33
    assert scoring.whole_shares([1.5, 1.5], 6) == [3.0, 3.0]
    assert scoring.whole_shares([1, 2], 4.5) == pytest.approx([1.5, 3.0])
    assert scoring.whole_shares([0, 0], 5) == [0.0, 0.0]


def test_reference_gets_full_marks(grader):
    """Does the reference solution get 100/100 with no diagnosis?"""
    report = grader.grade(REFERENCE)
    assert report.max_score == pytest.approx(100)
    failed = [(r.name, r.feedback) for r in report.results if r.status is Status.FAILED
              or r.status is Status.ERROR]
    assert not failed
    assert report.score == report.max_score
    assert not report.diagnoses


@pytest.mark.parametrize("path", CORRECT, ids=[p.stem for p in CORRECT])
def test_unusual_correct_submissions_get_full_marks(grader, path):
    """Do correct submissions written very differently get full marks and no diagnosis?"""
    report = grader.grade(path)
    lost = [(r.name, r.feedback) for r in report.results if r.score < r.max_score
            and not (r.name == "cost.parallel" and path.stem == "float64_inside")]
    assert not lost
    assert not report.diagnoses


def test_stub_gets_zero_with_one_message_per_function(grader):
    """Does the stub get 0, with a 'not implemented yet' message naming each function?"""
    report = grader.grade(STUB)
    assert report.score == 0
    assert report.max_score == pytest.approx(100)
    text = " ".join(r.feedback for r in report.results)
    for name in API_NAMES:
        assert f"not implemented yet" in text and name in text, name
    assert not any(r.status is Status.SKIPPED and "cuda" not in r.feedback.lower()
                   for r in report.results)


def test_the_stubs_gated_checks_are_blocked_not_failed(grader):
    """Are the stub's checks of an absence (functions.pure, the *.raises checks) blocked by
    what they wait for, so that every writer and the report show them apart from failed?"""
    report = grader.grade(STUB)
    by_name = {r.name: r for r in report.results}
    gated = ["functions.pure"] + [n for n in by_name if n.endswith(".raises")]
    assert len(gated) >= 4
    for name in gated:
        assert by_name[name].blocked_by, (name, by_name[name].feedback)
        assert by_name[name].score == 0


def test_missing_function_costs_only_what_needs_it(grader, tmp_path):
    """Does a submission without concat_heads keep the points of the parts that work?"""
    source = REFERENCE.read_text()
    start = source.index("def concat_heads")
    end = source.index("def masked_softmax")
    path = tmp_path / "mha.py"
    path.write_text(source[:start] + source[end:])
    report = grader.grade(path)
    by_name = {r.name: r for r in report.results}
    assert by_name["concat_heads.values"].status is Status.ERROR
    assert "defines no concat_heads" in by_name["concat_heads.values"].feedback
    for name in ("split_heads.values", "masked_softmax.masked", "attention_pool.values",
                 "head_weight_shape.values"):
        assert by_name[name].status is Status.PASSED, name
    assert 0 < report.score < report.max_score


def test_syntax_error_in_a_py_file_names_the_line(grader, tmp_path):
    """Does a .py with a syntax error get 0, with the line and the reason?"""
    lines = REFERENCE.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith("def split_heads"))
    lines[index] = lines[index].rstrip(":")
    path = tmp_path / "mha.py"
    path.write_text("\n".join(lines))
    report = grader.grade(path)
    assert report.score == 0
    assert not any(r.status is Status.PASSED for r in report.results)
    assert f"line {index + 1}" in report.notes[0] and "expected ':'" in report.notes[0]


@pytest.mark.skipif(not NOTEBOOK.exists(), reason="the source notebook is not built")
def test_notebook_with_a_broken_cell_gets_partial_credit(grader, tmp_path):
    """Does a notebook with a syntax error in one cell keep the credit of the other cells?"""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "concat_heads":
            cell.source = cell.source.replace("def concat_heads(X: Tensor) -> Tensor:",
                                              "def concat_heads(X: Tensor) -> Tensor")
    path = tmp_path / "mha.ipynb"
    nbformat.write(nb, path)
    report = grader.grade(path)
    by_name = {r.name: r for r in report.results}
    assert by_name["split_heads.values"].status is Status.PASSED
    assert by_name["concat_heads.values"].status is Status.ERROR
    assert any("concat_heads" in n and "left out" in n and "expected ':'" in n for n in report.notes)
    assert 0 < report.score < report.max_score


@pytest.mark.parametrize("name", sorted(mistakes.MISTAKES))
def test_mistake_is_diagnosed_with_its_code(grader, tmp_path, name):
    """Does each value mistake lose points and get exactly its TAXONOMY code?"""
    code = name.split("/")[0]
    report = grader.grade(mistakes.write(name, tmp_path))
    assert report.score < report.max_score
    found = {d.code for d in report.diagnoses}
    assert code in found
    assert found - {code} <= mistakes.ALSO_ALLOWED.get(code, set())
    assert all(d.message for d in report.diagnoses)


def test_json_output_matches_the_spec(tmp_path):
    """Does `grade --format json` write the SPEC's object, exit 0, and record the seed?"""
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", str(REFERENCE),
                           "--format", "json", "--output", str(out), "--seed", "7"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert isinstance(data["score"], float) and isinstance(data["max_score"], float)
    assert data["seed"] == 7
    for c in data["checks"]:
        # the SPEC's keys, plus the compatible extra "part" (the API part the check is about)
        assert set(c) == {"name", "group", "part", "score", "max_score", "status", "feedback"}
        assert c["part"] in ("head_weight_shape", "project", "project_heads", "split_heads",
                             "concat_heads", "masked_softmax", "attention_pool",
                             "MultiHeadAttention", "conventions", "questions")
        assert c["status"] in ("passed", "failed", "error", "skipped")
    assert isinstance(data["diagnoses"], list)


def test_usage_errors_exit_2(tmp_path):
    """Does a missing file or a bad option exit with status 2 and a message?"""
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", str(tmp_path / "nope.py")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no such file" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", str(REFERENCE),
                           "--format", "xml"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2


def test_the_checks_come_in_one_order_whatever_was_imported_first():
    """A module of checks imported early (a test, a plugin) must not reorder the report's
    checks: batch's workers and the local run list them alike."""
    code = ("import sys; sys.path.insert(0, {root!r})\n"
            "from autograder.checks import {first}\n"
            "from autograder import checks\n"
            "print(','.join(checks.load_all()))")
    root = str(Path(__file__).resolve().parent.parent)
    orders = {subprocess.run([sys.executable, "-c", code.format(root=root, first=first)],
                             capture_output=True, text=True, check=True).stdout
              for first in ("questions", "structure", "functions")}
    assert len(orders) == 1, orders
    assert next(iter(orders)).startswith("head_weight_shape.values,")


def test_every_masking_mistake_has_its_message_and_its_simulations():
    """Do the masking codes the rules name, the simulations and the messages all agree?"""
    from autograder.diagnoses import compose, mutants, values
    assert set(values.MASK_MESSAGES) == set(mutants.MASK_VARIANTS)
    assert set(mutants.CODE_OF_VARIANT.values()) == set(mutants.MASK_VARIANTS)
    for code, variants in mutants.MASK_VARIANTS.items():
        assert [s["mask"] for s in compose.MODULE[f"mask.{code}"]] == list(variants)


def test_two_masking_mistakes_come_together_only_as_a_placement_and_a_fill():
    """Can the module's simulation hold lengths put in the wrong place *and* a wrong fill,
    but never two placements, two fills, or two of any other switch?"""
    import torch

    from autograder.diagnoses import mutants
    per_head, nan, uniform = ({"mask": v} for v in ("repeat-per-head", "zero-len-nan",
                                                    "zero-len-uniform"))
    assert mutants.merged(per_head, nan) == {"mask": ("repeat-per-head", "zero-len-nan")}
    assert mutants.merged(nan, per_head) == {"mask": ("repeat-per-head", "zero-len-nan")}
    assert mutants.merged(nan, uniform) is None
    assert mutants.merged(per_head, {"mask": "wrong-axis"}) is None
    assert mutants.merged({"scale": 1.0}, {"scale": "d_model"}) is None
    assert mutants.merged({"scale": 1.0}, nan) == {"scale": 1.0, "mask": "zero-len-nan"}
    scores = torch.zeros(2, 2, 3, 3, dtype=torch.float64)
    lens = torch.tensor([0, 3])
    both = mutants.softmax(scores, lens, mistake=("repeat-per-head", "zero-len-nan"))
    # folded rows b*2 + j take example (b*2 + j) mod 2's length: head 0 of each example is empty
    assert both[:, 0].isnan().all() and not both[:, 1].isnan().any()


def test_the_simulations_kept_parts_give_what_a_fresh_simulation_gives():
    """``mutants.simulate`` keeps the projections and scores it shares between switches: every
    module switch, simulated after all the others, gives what it gives alone; and new weights
    or inputs (even where the old dict is gone) are never answered with the old ones'."""
    import gc

    import torch

    from autograder.diagnoses import compose, mutants

    def weights(seed):
        g = torch.Generator().manual_seed(seed)
        return {f"{role}.{kind}": torch.randn(*((12, 12) if kind == "weight" else (12,)),
                                               generator=g, dtype=torch.float64)
                for role in ("W_q", "W_k", "W_v", "W_o") for kind in ("weight", "bias")}
    g = torch.Generator().manual_seed(1)
    run = {x: torch.randn(2, n, 12, generator=g, dtype=torch.float64)
           for x, n in (("queries", 5), ("keys", 6), ("values", 6))}
    run["valid_lens"] = torch.tensor([0, 4])
    state = weights(0)
    switches = [{}] + [switch for alts in compose.MODULE.values() for switch in alts]

    def simulated(switch):
        try:
            return mutants.simulate(state, 3, run, **switch)
        except mutants.Raises as e:              # a mask (n_k, 1) on (n_q, n_k) scores
            return str(e)
    alone = []
    for switch in switches:
        mutants._KEPT.clear()
        alone.append(simulated(switch))
    assert sum(type(a) is str for a in alone) == 1
    for switch, fresh in zip(switches, alone):
        kept = simulated(switch)
        assert kept == fresh if type(fresh) is str else \
            all(torch.allclose(k, f, rtol=0, atol=0, equal_nan=True) for k, f in zip(kept, fresh)), switch
    before = mutants.simulate(state, 3, run)[0]
    del state
    gc.collect()
    other = weights(1)                   # may be built where the first dict was
    assert not torch.allclose(mutants.simulate(other, 3, run)[0], before)
    new_run = {**run, "queries": run["queries"] + 1}
    assert not torch.allclose(mutants.simulate(other, 3, new_run)[0],
                              mutants.simulate(other, 3, run)[0])
    a, b = torch.zeros(2), torch.ones(2)          # a kept verdict is its own judge's
    assert mutants.kept_verdict(lambda x, y: True, a, b) is True
    assert mutants.kept_verdict(lambda x, y: False, a, b) is False


def test_a_mask_switch_is_kept_as_none_only_where_the_run_has_no_lengths():
    """Where a run has no valid_lens, a mask mistake computes what no mask mistake computes
    (so the search keeps it as none, and judges it once); where it has lengths, each mask
    switch still gives its own output."""
    import torch

    from autograder.diagnoses import compose, mutants

    g = torch.Generator().manual_seed(2)
    state = {f"{role}.{kind}": torch.randn(*((12, 12) if kind == "weight" else (12,)),
                                           generator=g, dtype=torch.float64)
             for role in ("W_q", "W_k", "W_v", "W_o") for kind in ("weight", "bias")}
    unmasked = {x: torch.randn(2, n, 12, generator=g, dtype=torch.float64)
                for x, n in (("queries", 5), ("keys", 5), ("values", 5))}
    masked = dict(unmasked, valid_lens=torch.tensor([0, 3]))
    masks = [switch for _, switch in compose.MASKS]
    others = [{}, {"scale": 1.0}, {"split": mutants.split_no_transpose}]
    order = ("split", "concat", "proj", "kv", "out_proj", "scale", "mask", "dim", "aliased")
    defaults = dict(split=mutants.split_ok, concat=mutants.concat_ok, proj="ok", kv="ok",
                    out_proj=True, scale=None, mask=None, dim=-1, aliased=False)
    for other in others:
        for mask in masks:
            both = mutants.merged(other, mask)
            mutants._KEPT.clear()
            fresh = mutants._simulated(state, 3, unmasked,
                                       *(dict(defaults, **both)[k] for k in order))[0]
            kept = mutants.simulate(state, 3, unmasked, **both)[0]
            assert kept is mutants.simulate(state, 3, unmasked, **other)[0]
            assert torch.equal(kept, fresh), both
    outs = []
    for mask in masks:
        try:
            outs.append(mutants.simulate(state, 3, masked, **mask)[0])
        except mutants.Raises:
            continue
    plain = mutants.simulate(state, 3, masked)[0]
    differ = [out for out in outs if not torch.equal(out, plain)]
    assert len(differ) == len(masks)


def test_a_bias_ignored_where_there_is_none_and_a_scale_by_name_are_kept_as_what_they_compute():
    import math

    import torch

    from autograder.diagnoses import mutants

    g = torch.Generator().manual_seed(3)
    with_bias = {f"{role}.{kind}": torch.randn(*((8, 8) if kind == "weight" else (8,)),
                                               generator=g, dtype=torch.float64)
                 for role in ("W_q", "W_k", "W_v", "W_o") for kind in ("weight", "bias")}
    no_bias = {k: v for k, v in with_bias.items() if k.endswith("weight")}
    run = {x: torch.randn(2, n, 8, generator=g, dtype=torch.float64)
           for x, n in (("queries", 3), ("keys", 4), ("values", 4))}
    order = ("split", "concat", "proj", "kv", "out_proj", "scale", "mask", "dim", "aliased")
    defaults = dict(split=mutants.split_ok, concat=mutants.concat_ok, proj="ok", kv="ok",
                    out_proj=True, scale=None, mask=None, dim=-1, aliased=False)

    def fresh(state, **switch):
        return mutants._simulated(state, 2, run, *(dict(defaults, **switch)[k] for k in order))[0]
    mutants._KEPT.clear()
    plain = mutants.simulate(no_bias, 2, run)[0]
    for proj in ("ignores-bias", "ignores-bias-qkv"):
        assert mutants.simulate(no_bias, 2, run, proj=proj)[0] is plain
        assert torch.equal(plain, fresh(no_bias, proj=proj))
        assert not torch.equal(mutants.simulate(with_bias, 2, run, proj=proj)[0],
                               mutants.simulate(with_bias, 2, run)[0])
    by_model = mutants.simulate(with_bias, 2, run, scale="d_model")[0]
    assert mutants.simulate(with_bias, 2, run, scale="d_total")[0] is by_model  # 8 and 8
    assert torch.equal(by_model, fresh(with_bias, scale=math.sqrt(8)))
    assert not torch.equal(by_model, mutants.simulate(with_bias, 2, run)[0])


def test_a_simulated_output_is_judged_against_the_students_once():
    import torch

    from autograder.diagnoses import values

    calls = []
    real = values._close
    try:
        values._close = lambda a, b: calls.append(1) or real(a, b)
        judged, student, out = {}, torch.ones(3), torch.ones(3)
        assert values._like_student(judged, student, out)
        assert values._like_student(judged, student, out)
        assert not values._like_student(judged, student, torch.zeros(3))
    finally:
        values._close = real
    assert len(calls) == 2


def test_which_cases_a_function_got_right_is_read_once_and_never_stale():
    """``values.as_reference`` and ``behaves_like`` read which of a function's cases the
    student got right once per record list: a case added later, or another list, is read anew."""
    import torch

    from autograder.diagnoses import values
    right, wrong = torch.ones(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    records = [(None, {"value": right.clone()}, right)]
    assert values.as_reference(records)
    records.append((None, {"value": wrong}, right))
    assert not values.as_reference(records)
    assert values.as_reference([(None, {"value": right.clone()}, right)])
    assert not values.as_reference([(None, {"raised": {"type": "ValueError"}}, right)])


def test_grading_is_the_pipelines_stages_in_turn(grader, monkeypatch):
    """Is a submission graded by exactly the stages api.STAGES lists, in that order, the
    sandbox open for IN_SANDBOX's alone? (The list is the pipeline, as nbgrader's
    preprocessor lists are: a stage added beside it, or skipped, fails here.)"""
    from autograder.sandbox.host import Sandbox
    seen = []
    names = {group: [f.__name__ for f in getattr(api, group)]
             for group in ("BEFORE_SANDBOX", "IN_SANDBOX", "AFTER_SANDBOX")}
    assert api.STAGES == api.BEFORE_SANDBOX + api.IN_SANDBOX + api.AFTER_SANDBOX

    def watched(stage):
        def run(self, g):
            seen.append(stage.__name__)
            return stage(self, g)
        return run
    for group in ("BEFORE_SANDBOX", "IN_SANDBOX", "AFTER_SANDBOX"):
        monkeypatch.setattr(api, group, tuple(watched(s) for s in getattr(api, group)))
    opened, closed = api.Grader._sandbox, Sandbox.close
    monkeypatch.setattr(api.Grader, "_sandbox", lambda self, sub: seen.append("open") or
                        opened(self, sub))
    monkeypatch.setattr(Sandbox, "close", lambda self: seen.append("close") or closed(self))
    report = grader.grade(ROOT / "solutions" / "mha.py")
    assert report.score == report.max_score
    assert seen == names["BEFORE_SANDBOX"] + ["open"] + names["IN_SANDBOX"] + ["close"] \
        + names["AFTER_SANDBOX"]
