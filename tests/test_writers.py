"""The writers: SPEC JSON, Gradescope's results.json and JUnit XML, from hand-built reports.

``junit-10.xsd`` is pytest's copy of the Jenkins JUnit schema (MIT, Gregory Boissinot),
taken from the pytest 9.2.0 sdist on PyPI (``testing/example_scripts/junit-10.xsd``):
the schema pytest validates its own JUnit output with.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from autograder.model import CheckResult, Diagnosis, Report, Status
from autograder.writers import WRITERS, gradescope, json_writer, junit, text
from autograder.writers.clean import clean
from gradescope_spec import problems

ROOT = Path(__file__).resolve().parent.parent
XSD = Path(__file__).with_name("junit-10.xsd")
ISOLATION_NOTE = "reduced isolation: no mount namespace here"
DIRTY = "bad\x00 \x1b[31mred\x1b[0m \x07bell\x0b \u202eevil\r\nnext \ud800 line"


def result(name, status, score, max_score, feedback="", hidden=True, group=None):
    return CheckResult(name, group or name.split(".")[0], Status(status), score, max_score,
                       feedback, hidden)


def make_report(*results, diagnoses=(), notes=(), submission="mha.py") -> Report:
    return Report(submission, tuple(results), tuple(diagnoses), 1234, tuple(notes))


@pytest.fixture
def mixed() -> Report:
    """Every status, public and hidden checks, a diagnosis and both kinds of note."""
    return make_report(
        result("split_heads.values", "failed", 0.0, 6.0, "head 1 got head 0's columns", hidden=False),
        result("split_heads.raises", "passed", 2.0, 2.0),
        result("masked_softmax.masked", "error", 0.0, 7.0, "masked_softmax raised IndexError"),
        result("MultiHeadAttention.cuda", "skipped", 0.0, 0.0, "skipped: no CUDA device", group="mha"),
        result("project.values", "passed", 4.0, 4.0, hidden=False),
        diagnoses=[Diagnosis("split.no-transpose", "reshape to (b, n, h, p), then transpose(1, 2)")],
        notes=["mha.ipynb: the cell `%timeit` was dropped", ISOLATION_NOTE])


# --- SPEC JSON -------------------------------------------------------------------------

def test_json_matches_the_spec_shape(mixed):
    """Does --format json give exactly the SPEC's fields, with the SPEC's types and words?"""
    data = json.loads(json_writer.render(mixed))
    assert {"score", "max_score", "checks", "diagnoses"} <= set(data)
    assert data["score"] == 6.0 and data["max_score"] == 19.0
    for check in data["checks"]:
        # the SPEC's six fields, plus the compatible extras: the contract's part and, where
        # a check was held back, what held it
        assert {"name", "group", "score", "max_score", "status", "feedback"} <= set(check)
        assert set(check) <= {"name", "group", "part", "score", "max_score", "status",
                              "feedback", "blocked_by"}
        assert isinstance(check.get("part", ""), str)
        assert check["status"] in {"passed", "failed", "error", "skipped"}
        assert isinstance(check["score"], float) and isinstance(check["max_score"], float)
        assert isinstance(check["name"], str) and isinstance(check["feedback"], str)
    first = {k: v for k, v in data["checks"][0].items() if k != "part"}
    assert first == {"name": "split_heads.values", "group": "split_heads", "score": 0.0,
                     "max_score": 6.0, "status": "failed",
                     "feedback": "head 1 got head 0's columns"}
    assert data["diagnoses"] == [{"code": "split.no-transpose",
                                  "message": "reshape to (b, n, h, p), then transpose(1, 2)"}]


# --- Gradescope --------------------------------------------------------------------------

def test_gradescope_fields_follow_the_spec(mixed):
    """Are all keys, types and words of results.json ones Gradescope's spec lists?"""
    data = json.loads(gradescope.render(mixed))
    assert problems(data) == []
    assert data["score"] == mixed.score == sum(t["score"] for t in data["tests"])
    graded = {t["name"]: t for t in data["tests"]}
    assert graded["split_heads.values"]["status"] == "failed"
    assert graded["masked_softmax.masked"]["status"] == "failed"       # an error fails too
    assert graded["split_heads.raises"]["status"] == "passed"
    assert "status" not in graded["MultiHeadAttention.cuda"]          # skipped: neither word
    assert graded["split_heads.values"]["output"] == "head 1 got head 0's columns"
    assert [t["number"] for t in data["tests"][:5]] == ["1.1", "1.2", "2.1", "3.1", "4.1"]


def test_gradescope_hides_hidden_checks_until_published(mixed):
    """Are public checks visible at once, and hidden ones only after publication?"""
    tests = {t["name"]: t for t in json.loads(gradescope.render(mixed))["tests"]}
    assert tests["split_heads.values"]["visibility"] == "visible"
    assert tests["project.values"]["visibility"] == "visible"
    for name in ("split_heads.raises", "masked_softmax.masked", "MultiHeadAttention.cuda"):
        assert tests[name]["visibility"] == "after_published"


def test_gradescope_shows_public_evidence_at_once_and_keeps_hidden_evidence(mixed):
    """When a hidden check failed too, is a diagnosis whose mistake shows in a failed public
    check shown at once (under that test, and in the overview), while one that only hidden
    checks show waits for publication?"""
    report = make_report(
        result("split_heads.values", "failed", 0.0, 6.0, "head 1 got head 0's columns",
               hidden=False, group="split"),                   # the checks' real group
        *mixed.results[1:], diagnoses=[
        Diagnosis("split.no-transpose", "reshape to (b, n, h, p), then transpose(1, 2)"),
        Diagnosis("cost.flops", "the work grows with num_heads more than it should")],
        notes=mixed.notes)
    data = json.loads(gradescope.render(report))
    tests = {t["name"]: t for t in data["tests"]}
    split = tests["split_heads.values"]
    assert split["visibility"] == "visible"
    assert split["output"].startswith("head 1 got head 0's columns")
    assert "[split.no-transpose] reshape to (b, n, h, p), then transpose(1, 2)" in split["output"]
    assert "[split.no-transpose]" in data["output"]
    assert "cost.flops" not in data["output"] and "cost.flops" not in split["output"]
    info = tests["Recognised mistakes"]
    assert info["visibility"] == "after_published" and info["max_score"] == 0
    assert "cost.flops" in info["output"] and "split.no-transpose" not in info["output"]
    assert problems(data) == []


def test_gradescope_says_how_a_skipped_check_was_handled():
    """Does the overview say that device.cuda did not run, and what its points became?"""
    for score, said in ((2.0, "its points were awarded"), (0.0, "it earned 0 of 2 points")):
        report = make_report(result("device.cuda", "skipped", score, 2.0,
                                    "skipped: the grading machine has no CUDA device"))
        output = json.loads(gradescope.render(report))["output"]
        assert "device.cuda did not run here (skipped: the grading machine has no CUDA device)" in output
        assert said in output


def test_gradescope_shows_diagnoses_of_public_failures_at_once():
    """With only public failures, are the diagnoses and notes in the top-level output?"""
    report = make_report(
        result("split_heads.values", "failed", 0.0, 6.0, "wrong", hidden=False),
        result("split_heads.raises", "passed", 2.0, 2.0),
        diagnoses=[Diagnosis("split.no-transpose", "transpose(1, 2) after the reshape")],
        notes=["mha.ipynb: the cell `!pip install` was dropped"])
    data = json.loads(gradescope.render(report))
    assert "[split.no-transpose] transpose(1, 2) after the reshape" in data["output"]
    assert "!pip install" in data["output"]
    assert "Public checks: 0 / 6 points." in data["output"]
    assert all(t["name"] != "Recognised mistakes" for t in data["tests"])
    assert problems(data) == []


def test_gradescope_gives_grader_notes_to_instructors_only(mixed):
    """Does a note about the sandbox stay out of what students can ever see?"""
    data = json.loads(gradescope.render(mixed))
    assert "isolation" not in data["output"]
    assert "%timeit" in data["output"]
    notes = [t for t in data["tests"] if ISOLATION_NOTE in t["output"]]
    assert len(notes) == 1 and notes[0]["visibility"] == "hidden" and notes[0]["max_score"] == 0
    assert data["stdout_visibility"] == "hidden"


# --- JUnit -------------------------------------------------------------------------------

def junit_problems(xml: str) -> list[str]:
    """The structure CI systems rely on, checked explicitly (the XSD does not count)."""
    root = ET.fromstring(xml)
    found = [] if root.tag == "testsuites" else [f"root is <{root.tag}>"]
    suites = root.findall("testsuite")
    if len(suites) != 1:
        return found + [f"{len(suites)} testsuites"]
    suite = suites[0]
    cases = suite.findall("testcase")
    outcome = {tag: sum(case.find(tag) is not None for case in cases)
               for tag in ("failure", "error", "skipped")}
    expected = {"tests": len(cases), "failures": outcome["failure"], "errors": outcome["error"],
                "skipped": outcome["skipped"]}
    for key, value in expected.items():
        if suite.get(key) != str(value):
            found.append(f"testsuite {key}={suite.get(key)!r}, counted {value}")
        if key != "skipped" and root.get(key) != str(value):
            found.append(f"testsuites {key}={root.get(key)!r}, counted {value}")
    for case in cases:
        missing = [a for a in ("classname", "name", "time") if not case.get(a)]
        if missing:
            found.append(f"testcase {case.get('name')!r} lacks {missing}")
        if len([c for c in case if c.tag in ("failure", "error", "skipped")]) > 1:
            found.append(f"testcase {case.get('name')!r} has several outcomes")
    return found


def validate_xsd(xml: str) -> None:
    xmlschema = pytest.importorskip("xmlschema")
    xmlschema.XMLSchema(str(XSD)).validate(xml)


def test_junit_is_valid_against_the_schema(mixed):
    """Does the JUnit output validate against junit-10.xsd?"""
    validate_xsd(junit.render(mixed))


def test_junit_structure_counts_and_properties(mixed):
    """Do the counts, outcomes, properties and system-out say what the report says?"""
    xml = junit.render(mixed)
    assert junit_problems(xml) == []
    suite = ET.fromstring(xml).find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == \
        ("5", "1", "1", "1")
    properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert properties == {"score": "6", "max_score": "19", "seed": "1234", "submission": "mha.py"}
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    failure = cases["split_heads.values"].find("failure")
    assert failure.get("message") == "0 / 6 points: head 1 got head 0's columns"
    assert failure.text == "head 1 got head 0's columns"
    assert cases["masked_softmax.masked"].find("error") is not None
    assert cases["MultiHeadAttention.cuda"].find("skipped").get("message") == "skipped: no CUDA device"
    assert list(cases["project.values"]) == [] and cases["project.values"].get("classname") == "mha.project"
    out = suite.find("system-out").text
    assert "[split.no-transpose]" in out and "%timeit" in out


def test_junit_without_checks_is_still_valid():
    """Is an empty report (e.g. every check disabled) still valid JUnit?"""
    xml = junit.render(make_report())
    assert junit_problems(xml) == []
    validate_xsd(xml)


# --- Control characters --------------------------------------------------------------------

def test_clean_keeps_text_and_drops_controls():
    """Are escapes and controls gone, and newlines, tabs and ordinary Unicode kept?"""
    assert clean(DIRTY) == "bad red bell evil\nnext \ufffd line"
    assert clean("a\tb\nc — ü ∑") == "a\tb\nc — ü ∑"
    assert clean("x" * 10, limit=4) == "xxxx… (6 more characters)"


def strings_in(value) -> list[str]:
    """Every string (keys included) of a parsed JSON value."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *strings_in(v)]]
    if isinstance(value, list):
        return [s for v in value for s in strings_in(v)]
    return [value] if isinstance(value, str) else []


@pytest.mark.parametrize("fmt", ["gradescope", "junit", "json"])
def test_control_characters_never_reach_the_output(fmt):
    """Does a submission's odd output (NUL, escapes, bidi marks, surrogates) stay out of every format?"""
    report = make_report(result("split_heads.values", "failed", 0.0, 6.0, DIRTY, hidden=False),
                         diagnoses=[Diagnosis("split.no-transpose", DIRTY)], notes=[DIRTY],
                         submission="mha\x1b[2J.py")
    rendered = WRITERS[fmt](report)
    if fmt == "junit":
        root = ET.fromstring(rendered)                           # parses: no illegal XML
        validate_xsd(rendered)
        texts = [t for e in root.iter() for t in [e.text or "", *e.attrib.values()]]
    else:
        texts = strings_in(json.loads(rendered))
    bad = [ch for t in texts for ch in t if (ord(ch) < 32 and ch not in "\n\t")
           or ch in "\x1b\x7f\u202e\ud800"]
    assert bad == []
    assert any("bad red bell evil" in t for t in texts)


def test_text_writer_renders_every_status(mixed):
    """Does the terminal table list every check with its points and the diagnoses?"""
    out = text.render(mixed)
    assert "mha.py: 6 / 19 points" in out
    assert "FAIL split_heads.values" in out and "skip MultiHeadAttention.cuda" in out
    assert "[split.no-transpose]" in out


# --- End to end -------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["gradescope", "junit"])
def test_grade_writes_valid_output_end_to_end(fmt, tmp_path):
    """Does `grade solutions/mha.py --format gradescope|junit` write a valid, full-marks report?"""
    target = tmp_path / f"out.{fmt}"
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", "solutions/mha.py",
                           "--format", fmt, "--output", str(target), "--seed", "7"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    if fmt == "gradescope":
        data = json.loads(target.read_text())
        assert problems(data) == []
        assert data["score"] > 0 and all(t["status"] == "passed" for t in data["tests"] if "status" in t)
        assert data["score"] == pytest.approx(sum(t["max_score"] for t in data["tests"]), abs=1e-2)
    else:
        xml = target.read_text()
        assert junit_problems(xml) == []
        validate_xsd(xml)
        suite = ET.fromstring(xml).find("testsuite")
        assert suite.get("failures") == "0" and suite.get("errors") == "0"
