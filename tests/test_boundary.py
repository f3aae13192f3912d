"""The boundary validates: what comes back from the sandbox is held to a form the grader can
judge before any comparison, judging a student's data never crashes the grader, and a
student's file that cannot be read is that student's zero, in ``grade`` and in ``batch``.

The attacks are ``tests/submissions/attacks/boundary_*.py`` (test_adversarial grades them
too) and notebooks built here; each goes through one in-process Grader and the command line.
"""
from __future__ import annotations

import concurrent.futures
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from autograder import api, diagnoses, scoring, submission
from autograder.checks import Probe, Side
from autograder.cli import main
from autograder.compare import CheckFailed, expect_close, expect_equal_values, same_values, within
from autograder.model import Check, Status
from autograder.runner import run_check
from autograder.sandbox import protocol, results
from autograder.sandbox.host import GraderError

ROOT = api.PROJECT
ATTACKS = sorted((ROOT / "tests" / "submissions" / "attacks").glob("boundary_*.py"))
REFERENCE = (ROOT / "solutions" / "mha.py").read_text(encoding="utf-8")
#: ../shared/catalog/adversarial/round2/c02, written out so that the tests need no ../shared
C02 = '''import torch


def head_weight_shape(d, d_total, num_heads):
    return (d, torch.tensor([1.0, 2.0]))


def _stub(*args, **kwargs):
    raise NotImplementedError


project = project_heads = split_heads = concat_heads = masked_softmax = attention_pool = _stub


class MultiHeadAttention(torch.nn.Module):
    def __init__(self, *args, **kwargs):
        raise NotImplementedError
'''


def meta(*shape):
    return torch.empty(*shape, dtype=torch.float64, device="meta")


# ---------------------------------------------------------------------------------------
# Forms: what a probe's answer may hold (no sandbox)

def call(fn, value):
    return results.check("call", {"fn": fn, "args": [1, 2, 3]}, {"value": value, "after": [None, None, None]})


def test_a_tensor_among_sizes_is_the_submissions_answer_not_a_crash():
    """c02: (d, tensor([1., 2.])) is refused before any `==`, with what came and what was due."""
    with pytest.raises(results.Unjudgeable) as caught:
        call("head_weight_shape", (8, torch.tensor([1.0, 2.0])))
    assert "(8, a float32 tensor of shape (2,))" in str(caught.value)
    assert "expected a tuple of two ints" in str(caught.value)
    for value in [(8, torch.tensor(4)), torch.tensor([8, 4]), (8, (torch.zeros(1),))]:
        with pytest.raises(results.Unjudgeable, match="a tensor is not a size"):
            call("head_weight_shape", value)
    assert call("head_weight_shape", (8, 4))["value"] == (8, 4)
    assert call("head_weight_shape", (math.nan, 10**60))["value"][1] == 10**60   # judged later


@pytest.mark.parametrize("value, words", [
    (meta(2, 3), "on the meta device"),
    ((torch.zeros(2), meta(2, 3)), "on the meta device"),
    (torch.zeros(2, 3).to_sparse(), "dense"),
    ((torch.zeros(2), (torch.zeros(2, 3).to_sparse(),)), "dense"),
], ids=["meta", "meta-in-pair", "sparse", "sparse-nested"])
def test_tensors_without_values_are_refused_with_what_they_are(value, words):
    with pytest.raises(results.Unjudgeable, match=words) as caught:
        call("attention_pool", value)
    assert str(caught.value).startswith("attention_pool returned")


def test_odd_but_judgeable_values_pass_the_boundary():
    """Complex, bool, int and 0-d tensors, NaN, huge ints, strings and None are answers the
    comparisons judge (and fail); the boundary lets them through."""
    odd = (torch.zeros(2, dtype=torch.complex128), torch.ones(2, dtype=torch.bool),
           torch.tensor(3), 10**60, math.inf, "x" * 1000, None)
    assert call("split_heads", odd)["value"] is odd


def test_forward_outputs_and_gradients_are_held_to_cpu_tensors():
    runs = {"spec": {"runs": [{"grad": 1}]}}
    ok = {"out": torch.zeros(2), "weights": None, "grads": {"queries": torch.zeros(2)},
          "after": [torch.zeros(2)] * 3,
          "cost": {"ops": {"mm": 2}, "flops": 10, "work": 12, "sync": []}}
    assert results.check("mha", runs, {"params": [], "runs": [ok]})
    for after in ([torch.zeros(2)] * 2, None, [1, 2, 3]):   # the inputs come back, all three
        with pytest.raises(results.ResultError):
            results.check("mha", runs, {"params": [], "runs": [dict(ok, after=after)]})
    # every forward comes back measured: its cost is data of a fixed form, never missing
    for cost in (None, {"ops": {"mm": 2}, "flops": 1.5, "work": 12, "sync": []},
                 {"ops": {"mm": "2"}, "flops": 10, "work": 12, "sync": []},
                 {"ops": {}, "flops": 10, "work": 12, "sync": [3]}):
        with pytest.raises(results.ResultError):
            results.check("mha", runs, {"params": [], "runs": [dict(ok, cost=cost)]})
    with pytest.raises(results.ResultError):
        results.check("mha", runs, {"params": [], "runs": [
            {k: v for k, v in ok.items() if k != "cost"}]})
    for bad, words in [(dict(ok, out=meta(2)), "forward returned .* meta device"),
                       (dict(ok, weights=torch.zeros(2).to_sparse()), "attention_weights is .* dense"),
                       (dict(ok, grads={"queries": meta(2)}), "gradient of queries .* meta")]:
        with pytest.raises(results.Unjudgeable, match=words):
            results.check("mha", runs, {"params": [], "runs": [bad]})
    with pytest.raises(results.ResultError) as caught:       # a forgery, not an answer
        results.check("mha", runs, {"params": [], "runs": [dict(ok, out=3)]})
    assert not isinstance(caught.value, results.Unjudgeable)


def test_on_cuda_values_are_held_to_cpu_tensors():
    values = {"out_device": "cuda", "out": meta(2, 3), "weights": None,
              "masked_softmax": torch.zeros(2), "attention_pool": (torch.zeros(2), meta(1))}
    with pytest.raises(results.Unjudgeable, match="meta"):
        results.check("on_cuda", {}, {"values": {"value": values}})
    with pytest.raises(results.ResultError):
        results.check("on_cuda", {}, {"sync": {"value": {"ok": "yes"}}})


@pytest.mark.parametrize("header", [
    {"meta": {"dtype": "float64", "shape": [2**31 - 1] * 16}},      # element count overflows
    {"tensor": {"dtype": "float64", "shape": [0] + [2**31 - 1] * 4, "blob": 0}},
    {"int": "abc"},
], ids=["huge-meta", "huge-empty", "int-abc"])
def test_values_torch_cannot_build_are_invalid_data(header):
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(json.dumps(header).encode(), [b""])


# ---------------------------------------------------------------------------------------
# Comparisons: only CheckFailed on anything that crosses the boundary

ODD = [(8, torch.tensor([1.0, 2.0])), (8, torch.tensor(4)), torch.tensor([8, 4]), meta(2),
       torch.zeros(2, 3).to_sparse(), torch.zeros(2, 3, dtype=torch.complex128),
       torch.ones(2, 3, dtype=torch.bool), torch.tensor(0.5), (math.nan, 4), (math.inf, 4),
       10**60, "x" * 5000, None, ((((8,),),),), (torch.zeros(2, 3), torch.zeros(2, 3)), {"a": 1},
       b"bytes", (8, 4, 2)]
ODD_IDS = ["tuple-tensor", "tuple-0d", "tensor", "meta", "sparse", "complex", "bool", "0-d",
           "nan", "inf", "huge-int", "string", "none", "nested", "pair", "dict", "bytes", "triple"]


@pytest.mark.parametrize("value", ODD, ids=ODD_IDS)
def test_expect_equal_values_only_fails(value):
    with pytest.raises(CheckFailed) as caught:
        expect_equal_values(actual=value, expected=(8, 4), what="head_weight_shape(8, 8, 2)")
    assert "expected (8, 4)" in str(caught.value) and len(str(caught.value)) < 300


@pytest.mark.parametrize("value", ODD, ids=ODD_IDS)
@pytest.mark.parametrize("dtype", [True, False])
def test_expect_close_only_fails(value, dtype):
    with pytest.raises(CheckFailed):
        expect_close(actual=value, expected=torch.zeros(2, 3, dtype=torch.float64), what="f",
                     dtype=dtype)


def test_comparisons_still_pass_what_is_right():
    expect_equal_values(actual=(8, 4), expected=(8, 4), what="w")
    expect_close(actual=torch.ones(2, dtype=torch.float64), expected=torch.ones(2, dtype=torch.float64),
                 what="w")
    assert same_values((torch.ones(2), 3), (torch.ones(2), 3))
    assert not same_values((torch.ones(2), 3), (torch.ones(2, dtype=torch.float64), 3))
    with pytest.raises(CheckFailed, match="NaN"):
        expect_close(actual=torch.full((2,), math.nan, dtype=torch.float64),
                     expected=torch.ones(2, dtype=torch.float64), what="w")


def test_the_one_pass_comparison_judges_as_the_full_one():
    """``expect_close`` decides the common case in one pass: at the tolerance's edge, with
    NaN in both, and with an infinite expected value it judges as the full comparison."""
    f = lambda *v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    expect_close(actual=f(1.0 + 0.9e-7), expected=f(1.0), what="w", rtol=1e-7, atol=0.0)
    with pytest.raises(CheckFailed, match="differ"):
        expect_close(actual=f(1.0 + 1.1e-7), expected=f(1.0), what="w", rtol=1e-7, atol=0.0)
    expect_close(actual=f(math.nan, 2.0), expected=f(math.nan, 2.0), what="w")
    with pytest.raises(CheckFailed, match="differ"):     # inf - inf is no difference within
        expect_close(actual=f(math.inf), expected=f(math.inf), what="w")
    with pytest.raises(CheckFailed, match="differ"):
        expect_close(actual=f(math.inf, 1.0), expected=f(3.0, 1.0), what="w")


EDGES = (0.0, -0.0, 1.0, -1.0, 1.0 + 0.9e-4, 1.0 + 1.1e-4, 1e-7, 3e-6, 5e-324, 1e308, -1e308,
         math.inf, -math.inf, math.nan)


@pytest.mark.parametrize("rtol,atol", [(1e-4, 1e-6), (1e-7, 1e-10), (0.0, 0.0)])
def test_within_decides_as_torch_isclose_or_not_at_all(rtol, atol):
    """``compare.within``, the one-reduction comparison of ``expect_close`` and of the
    diagnoses' ``_close``: where it decides, it decides as torch.allclose (with equal_nan) and
    as isclose-and-finite; where it does not (a NaN or infinity in a subtraction), it says so."""
    for x in EDGES:
        for y in EDGES:
            a = torch.tensor([x, 0.5], dtype=torch.float64)
            e = torch.tensor([y, 0.5], dtype=torch.float64)
            verdict = within(a, e, rtol=rtol, atol=atol)
            close = bool(torch.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True))
            assert verdict in (None, close), (x, y)
            assert (verdict is True) == (bool(torch.isclose(a, e, rtol=rtol, atol=atol).all())
                                         and bool(torch.isfinite(e).all())), (x, y)
    gen = torch.Generator().manual_seed(0)
    for scale in (1e-12, 1e-8, 1e-6, 1e-5, 1e-4, 1e-3):
        a = torch.randn(200, 7, generator=gen, dtype=torch.float64)
        e = a + torch.randn(200, 7, generator=gen, dtype=torch.float64) * scale
        for row_a, row_e in zip(a, e):
            assert within(row_a, row_e, rtol=rtol, atol=atol) == \
                bool(torch.allclose(row_a, row_e, rtol=rtol, atol=atol))
    assert within(torch.empty(0, 3), torch.empty(0, 3), rtol=rtol, atol=atol) is True


# ---------------------------------------------------------------------------------------
# The backstop: an exception while judging errs the check, and the instructor is told

def probe() -> Probe:
    side = Side(lambda name, group, kwargs: None)
    return Probe(student=side, reference=side, seed=0)


def a_check(body) -> Check:
    return Check(name="x.values", group="x", points=3.0, body=body)


def test_an_unexpected_exception_errs_the_check_and_notes_it_for_the_instructor():
    def body(p):
        bool(torch.tensor([1.0, 2.0]) == 1.0)         # what c02 made compare do
    p = probe()
    result = run_check(a_check(body), p, 3.0, set(), False)
    assert result.status is Status.ERROR and result.score == 0 and result.max_score == 3.0
    assert "could not judge" in result.feedback
    (note,) = p.evidence.grader_faults
    assert "for the instructor" in note and "RuntimeError" in note and "x.values" in note
    assert "test_boundary.py" in note                 # where it was raised


def test_the_graders_own_failures_still_propagate():
    def dead(p):
        raise GraderError("the zygote died")

    def interrupted(p):
        raise KeyboardInterrupt
    for body, kind in ((dead, GraderError), (interrupted, KeyboardInterrupt)):
        with pytest.raises(kind):
            run_check(a_check(body), probe(), 1.0, set(), False)


def test_a_diagnosis_that_raises_is_noted_not_fatal(monkeypatch):
    from autograder.diagnoses import structure, values  # noqa: F401  (registered before the patch)

    def wrong(p):
        raise CheckFailed("wrong")
    monkeypatch.setattr(diagnoses, "DIAGNOSES", [
        ("x.boom", lambda p, r: (1, torch.zeros(2)) == (1, 0)),
        ("x.fine", lambda p, r: "found")])
    p = probe()
    found = diagnoses.diagnose(p, [run_check(a_check(wrong), p, 1.0, set(), False)])
    assert [d.code for d in found] == ["x.fine"]
    assert any("diagnosis x.boom" in n and "RuntimeError" in n
               for n in p.evidence.grader_faults)


# ---------------------------------------------------------------------------------------
# Notebooks: parsing is bounded, and whatever is wrong is the student's problem

def notebook(cells, **extra) -> str:
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
                       **extra})


def code_cell(source) -> dict:
    return {"cell_type": "code", "metadata": {}, "source": source, "outputs": [],
            "execution_count": None}


def deep_json(levels: int) -> str:
    return "[" * levels + "]" * levels


NOTEBOOKS = {
    "deep": ('{"cells": [], "metadata": ' + deep_json(100_000) + "}", "nested more than 200"),
    "deep-cells": ('{"cells": ' + deep_json(50_000) + "}", "nested more than 200"),
    "huge-cell": (notebook([code_cell("x = 1\n# " + "a" * (3 << 20))]), "3 MiB"),
    "wrong-cells": (notebook([1, "x", None, [1], {"cell_type": ["code"]},
                              {"cell_type": "code", "source": 5, "metadata": []},
                              {"cell_type": "code", "source": [1, None, "y = 2"], "id": [1],
                               "metadata": {"nbgrader": "x"}}]), "not a notebook cell"),
    "invalid-json": ('{"cells": [{"cell_type": "code", "source": "x = 1"', "not a valid notebook"),
    "not-an-object": ("[1, 2, 3]", "not a valid notebook"),
    "surrogate": (notebook([code_cell("def head_weight_shape(d, t, m):\n    return '\ud800'\n")]),
                  "lone surrogate"),
}


def write_notebook(folder: Path, name: str) -> Path:
    path = folder / f"{name}.ipynb"
    path.write_text(NOTEBOOKS[name][0], encoding="utf-8", errors="surrogatepass")
    return path


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_a_broken_notebook_loads_as_the_students_problem(tmp_path, name):
    sub = submission.load(write_notebook(tmp_path, name))
    said = " ".join([sub.problem or ""] + list(sub.notes))
    assert NOTEBOOKS[name][1] in said
    sub.source.decode("utf-8")                        # valid UTF-8 (often empty)


def test_nesting_within_the_limit_is_read(tmp_path):
    path = tmp_path / "mha.ipynb"
    path.write_text(notebook([code_cell(REFERENCE)], metadata={"widgets": json.loads(deep_json(150))}))
    sub = submission.load(path)
    assert sub.problem is None and b"class MultiHeadAttention" in sub.source


def test_json_depth_skips_strings():
    assert submission.json_depth(b'{"a": "[[[[{{", "b": [1, "\\"]]]["]}', 200) == 2
    assert submission.json_depth(b'["\\\\", ["\\\\\\"["]]', 200) == 2
    assert submission.json_depth(b"[" * 300, 200) == 300
    assert submission.json_depth(b"", 200) == 0


def test_json_depth_is_linear_on_escaped_quotes():
    """An unterminated string of escaped quotes made a backtracking scan quadratic."""
    started = time.monotonic()
    assert submission.json_depth(b'"' + b'\\"' * (4 << 20), 200) == 0
    assert time.monotonic() - started < 10


def test_any_error_while_reading_is_the_students_problem(tmp_path, monkeypatch):
    path = write_notebook(tmp_path, "wrong-cells")
    for error in (MemoryError(), RecursionError("deep"), UnicodeError("odd"), TypeError("t")):
        def boom(p, error=error):
            raise error
        monkeypatch.setattr(submission, "_load_notebook", boom)
        sub = submission.load(path)
        assert type(error).__name__ in sub.problem and sub.source == b""
    monkeypatch.undo()
    with pytest.raises(submission.LoadError):            # no submission at all: a usage error
        submission.load(tmp_path / "missing.py")


# ---------------------------------------------------------------------------------------
# Through the grader: in-process, then the command line, then a batch

#: the options of this module's `grader` (tests/conftest.py)
GRADER = {"seed": 4321, "timeouts": {"import": 10.0, "probe": 8.0, "group": 16.0, "submission": 60.0}}


@pytest.fixture(scope="module")
def reference(grader):
    report = grader.grade(ROOT / "solutions" / "mha.py")
    assert report.score == report.max_score > 0
    return report


@pytest.fixture(scope="module")
def notebooks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("notebooks")
    return {name: write_notebook(folder, name) for name in NOTEBOOKS}


def allowed(path) -> float:
    """What a fixture may earn, of 100: its header's `# HONEST: partial N`, else 0."""
    found = re.search(r"^#\s*HONEST:\s*partial\s+([0-9.]+)",
                      Path(path).read_text(errors="replace")[:4000], re.M)
    return float(found.group(1)) if found else 0.0


def assert_zero(data: dict, reference, what, limit: float = 0.0) -> None:
    """Nothing earned beyond ``limit`` (of 100); max_score as for a correct submission (a
    notebook's includes its numeric questions)."""
    questions = sum(v for k, v in scoring.load_rubric().points.items()
                    if k.startswith("questions."))
    notebook = str(data.get("submission", "")).endswith(".ipynb")
    assert data["max_score"] == pytest.approx(reference.max_score + (questions if notebook
                                                                     else 0)), what
    assert data["score"] <= limit * data["max_score"] / 100 + 1e-6, \
        (what, [(c["name"], c["score"]) for c in data["checks"] if c["score"]])
    assert not [n for n in data["notes"] if "could not judge" in n], (what, data["notes"])
    assert not [c for c in data["checks"] if "could not judge" in c["feedback"]], what


@pytest.mark.parametrize("path", ATTACKS, ids=[p.stem for p in ATTACKS])
def test_attacks_in_process(grader, reference, path):
    """Each boundary attack: graded, score 0, max_score as for a correct submission, and no
    check needed the backstop (validation handled everything)."""
    assert_zero(json.loads(json.dumps(grader.grade(path).to_dict())), reference, path.name,
                allowed(path))


def test_c02_and_notebooks_in_process(grader, reference, notebooks, tmp_path):
    (tmp_path / "c02.py").write_text(C02)
    report = grader.grade(tmp_path / "c02.py").to_dict()
    assert_zero(report, reference, "c02")
    first = report["checks"][0]
    assert first["name"] == "head_weight_shape.values" and "a tensor is not a size" in first["feedback"]
    for name, path in notebooks.items():
        assert_zero(grader.grade(path).to_dict(), reference, name)


def run_cli(path: Path, output: Path) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", str(path), "--format",
                           "json", "--output", str(output), "--seed", "4321"], cwd=ROOT,
                          capture_output=True, timeout=300, stdin=subprocess.DEVNULL)
    return proc.returncode, proc.stderr.decode("utf-8", "replace")[-2000:]


@pytest.mark.slow
def test_attacks_and_notebooks_through_the_cli(reference, notebooks, tmp_path):
    """`python -m autograder grade FILE --format json`: exit 0, valid JSON, score 0."""
    (tmp_path / "c02.py").write_text(C02)
    paths = [*ATTACKS, tmp_path / "c02.py", notebooks["deep"], notebooks["invalid-json"],
             notebooks["wrong-cells"]]
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        runs = list(pool.map(lambda p: run_cli(p, tmp_path / f"{p.stem}.json"), paths))
    for path, (code, stderr) in zip(paths, runs):
        assert code == 0, f"{path.name}: exit {code}\n{stderr}"
        assert_zero(json.loads((tmp_path / f"{path.stem}.json").read_text()), reference,
                    path.name, allowed(path))


def test_a_batch_grades_a_deep_notebook_a_c02_and_a_correct_student(tmp_path, reference, capsys):
    """All three graded (none in failures/), the correct one full marks, and a rerun grades
    nothing again."""
    folder, out = tmp_path / "class", tmp_path / "out"
    folder.mkdir()
    write_notebook(folder, "deep").rename(folder / "dana.ipynb")
    (folder / "carl.py").write_text(C02)
    (folder / "cora.py").write_text(REFERENCE)
    assert main(["batch", str(folder), "--output", str(out), "--seed", "7", "--workers", "2"]) == 0
    found = {p.stem: json.loads(p.read_text()) for p in (out / "results").glob("*.json")}
    assert set(found) == {"dana", "carl", "cora"}
    assert not list((out / "failures").glob("*.json")) if (out / "failures").exists() else True
    assert found["cora"]["score"] == found["cora"]["max_score"] == pytest.approx(reference.max_score)
    for key in ("dana", "carl"):
        assert_zero(found[key], reference, key)
    assert any("nested more than 200" in n for n in found["dana"]["notes"])
    rows = (out / "grades.csv").read_text().splitlines()
    assert sum(",graded," in r for r in rows) == 3
    capsys.readouterr()
    assert main(["batch", str(folder), "--output", str(out)]) == 0
    assert "0 graded now, 3 already graded" in capsys.readouterr().err


def test_a_file_name_that_is_not_utf8_does_not_stop_the_batch(tmp_path):
    """A student's file named with bytes that are not UTF-8: graded, and grades.csv written."""
    import os

    from autograder import batch

    class Recorder:
        def __init__(self, options):
            pass

        def run(self, tasks):
            for t in tasks:
                yield t, {"report": {"score": 0.0, "max_score": 100.0, "checks": [],
                                     "diagnoses": [], "notes": []}}

        def close(self):
            pass
    folder = tmp_path / "class"
    folder.mkdir()
    Path(os.fsdecode(bytes(folder) + b"/\xffodd.py")).write_text(C02)
    summary = batch.run(folder, tmp_path / "out", seed=3, executor=Recorder)
    assert summary.graded == 1 and not summary.failures
    rows = (tmp_path / "out" / "grades.csv").read_text(encoding="utf-8").splitlines()
    assert rows[1].startswith("\ufffdodd,") and ",graded," in rows[1]
