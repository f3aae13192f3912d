"""Grading a class as the course set it up (issue 20, 2 and 7; issue 21, 4 and acceptance):
batch reads an nbgrader course's own configuration, shares a grading only where nothing
that changes the result differs, grades the file of a Classroom clone that holds the work,
and a class of hostile ids gets a result, a feedback file and safe CSV rows each."""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import nbformat
import pytest

from autograder import batch, variants
from autograder.cli import main

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = (ROOT / "solutions" / "mha.py").read_text(encoding="utf-8")
STUB = (ROOT / "assignments" / "stub" / "mha.py").read_text(encoding="utf-8")
SECRET = "the course's own secret"
FORMULA = ("=", "+", "-", "@", "\t", "\r")


class Recorder:
    """An executor that grades nothing: it records the tasks it is given."""

    seen: list = []

    def __init__(self, options):
        self.options = options

    def run(self, tasks):
        for t in tasks:
            Recorder.seen.append(t)
            yield t, {"report": {"score": 1.0, "max_score": 2.0, "checks": [], "diagnoses": [],
                                 "notes": [f"graded {Path(t.file).name}"]}}

    def close(self):
        pass


def _notebook(code: str, extra: str = "") -> str:
    cells = [nbformat.v4.new_code_cell(code)] + ([nbformat.v4.new_code_cell(extra)] if extra else [])
    return nbformat.writes(nbformat.v4.new_notebook(cells=cells))


def test_shared_results_are_keyed_by_the_notes_too(tmp_path):
    """Two notebooks with the same code are graded once, but one whose loading leaves a note
    (a dropped magic) is graded apart, so no classmate gets another's note."""
    Recorder.seen = []
    folder = tmp_path / "class"
    for student, code in (("ann", "x = 1\n"), ("bo", "x = 1\n"),
                          ("cy", "x = 1\n%matplotlib inline\n")):
        (folder / student).mkdir(parents=True)
        (folder / student / "mha.ipynb").write_text(_notebook(code))
    summary = batch.run(folder, tmp_path / "out", seed=3, executor=Recorder, secret="")
    assert summary.graded == 3 and len(Recorder.seen) == 2
    graded = {t.job.student for t in Recorder.seen}
    assert "cy" in graded and len(graded & {"ann", "bo"}) == 1


def test_a_classroom_clone_is_graded_where_the_work_is(tmp_path):
    """A clone with the untouched stub mha.py and a worked mha.ipynb: the notebook is graded,
    and the result's notes say which file and why; with the work in mha.py, mha.py."""
    Recorder.seen = []
    clones = tmp_path / "clones"
    for student, module, notebook in (("ann", STUB, _notebook(REFERENCE)),
                                      ("bo", REFERENCE, _notebook(STUB))):
        (clones / student).mkdir(parents=True)
        (clones / student / "mha.py").write_text(module)
        (clones / student / "mha.ipynb").write_text(notebook)
    batch.run(clones, tmp_path / "out", seed=3, executor=Recorder, secret="")
    files = {t.job.student: Path(t.file).name for t in Recorder.seen}
    assert files == {"ann": "mha.ipynb", "bo": "mha.py"}
    ann = json.loads((tmp_path / "out" / "results" / "ann.json").read_text())
    assert ann["notes"][0].startswith("mha.ipynb was graded, not mha.py: it holds the work "
                                      "(8 of 8 parts implemented, 0 in mha.py, an untouched stub)")
    assert ann["path"].endswith("mha.ipynb")
    bo = json.loads((tmp_path / "out" / "results" / "bo.json").read_text())
    assert bo["notes"][0].startswith("mha.py was graded, not mha.ipynb")


def _course(tmp_path: Path, config: str) -> Path:
    course = tmp_path / "course"
    folder = course / "submitted" / "alice" / "mha"
    folder.mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(config)
    return folder


@pytest.mark.slow
def test_batch_takes_the_courses_secret(tmp_path, monkeypatch):
    """A correct student in a course with a secret (in its nbgrader_config.py only) gets full
    marks from batch, graded against her own variant: her seed, her numbers."""
    from test_variants import source_notebook
    monkeypatch.delenv(variants.ENV, raising=False)
    alice = variants.derive("alice", SECRET)
    folder = _course(tmp_path, f"c = get_config()\nc.TrustedGrades.variant_secret = {SECRET!r}\n"
                               "c.TrustedGrades.device = 'cpu'\n")
    nbformat.write(source_notebook(alice), folder / "mha.ipynb")
    assert main(["batch", str(tmp_path / "course"), "--output", str(tmp_path / "out"),
                 "--workers", "1"]) == 0
    result = json.loads((tmp_path / "out" / "results" / "mha" / "alice.json").read_text())
    assert result["score"] == result["max_score"] == 104
    assert result["seed"] == alice.seed
    assert any(n.startswith("graded against the variant of student alice") for n in result["notes"])
    settings = json.loads((tmp_path / "out" / "batch.json").read_text())
    assert settings["device"] == "cpu" and settings["seed"] == 0        # the course's, as audit


def test_a_course_secret_that_cannot_be_read_is_refused(tmp_path, monkeypatch, capsys):
    """A course config that sets the secret but raises is a usage error that says so."""
    monkeypatch.delenv(variants.ENV, raising=False)
    folder = _course(tmp_path, "c = get_config()\nc.TrustedGrades.variant_secret = "
                               "open('/nonexistent/secret').read()\n")
    (folder / "mha.py").write_text("x = 1\n")
    assert main(["batch", str(tmp_path / "course"), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "sets the course's variant secret" in err and "could not be read" in err


HOSTILE = ["$\\left($", '=HYPERLINK("x","y")', "@SUM(1+1)", "+1+2", "-3+4",
           "<img src=x onerror=alert(1)>", "张伟", "李娜", "Zoë", "Zoé", "Zoe\u0301",
           "\t=1+2", "\r+3+4", "\ttab"]       # a file name may begin with a tab or a CR


def test_a_class_of_hostile_ids(tmp_path):
    """Ids that are math text, formulas (some behind a tab or a CR), HTML, bytes that are not
    UTF-8 (a file's stem and a folder's name) and non-ASCII near-twins: batch and report
    exit 0, one feedback file per student, no CSV cell that a spreadsheet would run, nothing
    of theirs live in the page."""
    pytest.importorskip("matplotlib", reason="the report needs the 'report' extra")
    folder = os.fsencode(tmp_path / "class")
    os.makedirs(folder)
    names = [os.fsencode(n) for n in HOSTILE] + [b"bad\xff\xfename"]
    for index, name in enumerate(names):
        code = REFERENCE if index < 2 else f"x = {index}\n"
        with open(os.path.join(folder, name + b".py"), "w", encoding="utf-8") as f:
            f.write(code)
    names.append(b"folder\xfe\xff")                  # a Classroom clone's folder, not UTF-8
    os.makedirs(os.path.join(folder, names[-1]))
    with open(os.path.join(folder, names[-1], b"mha.py"), "w", encoding="utf-8") as f:
        f.write("x = 0\n")
    out = tmp_path / "out"
    assert main(["batch", str(tmp_path / "class"), "--output", str(out), "--seed", "5",
                 "--device", "cpu"]) == 0
    assert len(list((out / "results").glob("*.json"))) == len(names)
    assert main(["report", str(out)]) == 0
    report = out / "report"
    assert len(list((report / "feedback").glob("*.md"))) == len(names)
    for table in (out / "grades.csv", report / "lms-grades.csv"):
        with open(table, encoding="utf-8", newline="") as f:       # a CR inside a cell
            rows = list(csv.reader(f))
        assert len(rows) == len(names) + 1
        bad = [cell for row in rows for cell in row if cell.lstrip(" ").startswith(FORMULA)]
        assert not bad, (table.name, bad)
    page = (report / "index.html").read_text(encoding="utf-8")
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert page.count("<details>") == len(names)


def test_a_function_defined_twice_counts_once_as_its_last_definition():
    """Does the count of parts done (which file of a clone holds the work) take a name
    defined twice once, by the definition Python keeps (it once said "9 of 8")?"""
    from autograder import roster, submission
    done = "def split_heads(X, num_heads):\n    return X\n"
    stub = "def split_heads(X, num_heads):\n    raise NotImplementedError()\n"
    count = lambda text: roster.implemented(submission.Submission(  # noqa: E731
        "mha.py", "mha.py", text.encode()))
    assert count(done + done) == 1
    assert count(done + stub) == 0 and count(stub + done) == 1
