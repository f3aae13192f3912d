"""nbgrader end to end: release, autograde, export, feedback and audit, on a copy of the course.

Three students hand in the released notebook: one with the reference's answers, one with a
TAXONOMY mistake (``split.no-transpose``) and one whose cells patch the kernel to fake full
marks. ``nbgrader autograde`` with the course's config must score every autograded cell from
the autograder's report (``autograder.nbgrader_plugin``), so the export agrees with
``python -m autograder grade`` on the same notebooks and the tampering gains nothing.
One module-scoped run does the slow work (a kernel per notebook, one Grader per command);
the tests read its results.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("nbgrader")
pytestmark = pytest.mark.slow

from nbgrader.api import Gradebook  # noqa: E402

from autograder import parts  # noqa: E402
from autograder.checks import load_all  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SEED = "0"                               #: the course config's TrustedGrades.seed
STUDENTS = ("correct", "mistake", "tamper")
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
NO_TRANSPOSE = ("    X = X.reshape(*X.shape[:-1], num_heads, p)                # (batch, n, num_heads, p)\n"
                "    return X.transpose(-3, -2)                                # (batch, num_heads, n, p)",
                "    return X.reshape(X.shape[0], num_heads, X.shape[1], p)   # no transpose")
#: Appended to the tamperer's first answer cell. In the kernel it patches everything a test
#: cell relies on; the unguarded lines also run in the autograder's sandbox, where they
#: must change nothing but the student's own module.
TAMPER = '''

import builtins, sys, torch
torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
try:
    shell = get_ipython()
except NameError:
    shell = None
if shell is not None:
    def run_check(check, api):                     # the public test cells' helper
        print(f"{check.__name__[len('check_'):]}: the public tests pass.")
    expect_tensor = expect_shape = expect_raises = lambda *args, **kwargs: None
    _print = builtins.print
    builtins.print = lambda *args, **kwargs: _print(*args, **{**kwargs, "file": sys.__stdout__})
    sys.stderr = sys.stdout                        # no stderr, so nbgrader zeroes nothing
    shell.ast_node_interactivity = "none"          # a hidden cell's "0.0" is never shown
    shell.displayhook.write_output_prompt = lambda: None
'''


def run(args, cwd, timeout=900) -> subprocess.CompletedProcess:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=dict(os.environ, PYTHONPATH=path),
                          capture_output=True, text=True, timeout=timeout)
    first = max(0, done.stderr.find("Traceback"))                  # nbgrader logs it, then goes on
    assert done.returncode == 0, (f"{' '.join(args[:3])} exited {done.returncode}:\n{done.stdout[-3000:]}\n"
                                  f"{done.stderr[first:first + 4000]}\n…\n{done.stderr[-3000:]}")
    return done


def grade_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def submission(release, source, student: str) -> nbformat.NotebookNode:
    """The released notebook as this student hands it in."""
    nb = nbformat.from_dict(json.loads(json.dumps(release)))
    answers = {grade_id(cell): cell.source for cell in source.cells}
    for cell in nb.cells:
        gid = grade_id(cell)
        if not cell.metadata.get("nbgrader", {}).get("solution"):
            continue
        answer = "\n".join(line for line in answers[gid].split("\n") if line.strip() not in MARKERS)
        if student == "correct" or (student == "mistake" and cell.cell_type == "code"):
            cell.source = answer
        elif student == "mistake":
            cell.source = "Heads need their own matrices."
        if student == "mistake" and gid == "split_heads":
            assert NO_TRANSPOSE[0] in cell.source
            cell.source = cell.source.replace(*NO_TRANSPOSE)
        if student == "tamper" and gid in ("head_weight_shape", "project"):
            cell.source = answer + (TAMPER if gid == "head_weight_shape" else "")
    return nb


def exported(course: Path) -> dict[str, float]:
    run(["nbgrader", "export"], course)
    with open(course / "grades.csv", newline="") as f:
        return {row["student_id"]: float(row["score"]) for row in csv.DictReader(f)}


def cell_scores(course: Path) -> dict[str, dict[str, float]]:
    """Student -> autograded cell -> its score in the gradebook."""
    out = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "mha") as gb:
        for sub in gb.find_assignment("mha").submissions:
            grades = gb.find_submission_notebook("mha", "mha", sub.student.id).grades
            out[sub.student.id] = {g.name: g.score for g in grades if parts.cell_part(g.name)}
    return out


def part_totals(scores: dict[str, float]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for cell, score in scores.items():
        part = parts.cell_part(cell)[0]
        totals[part] = totals.get(part, 0.0) + score
    return totals


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """Release, three submissions, autograde (once without the plugin for the tamperer),
    the written answers graded by hand, export, feedback; the CLI grades alongside."""
    tmp = tmp_path_factory.mktemp("nbgrader")
    course = tmp / "course"
    shutil.copytree(ROOT / "assignments", course, ignore=shutil.ignore_patterns(
        "__pycache__", "stub", "gradescope", "classroom", "*.py"))
    shutil.copy(ROOT / "assignments" / "nbgrader_config.py", course)
    run(["nbgrader", "generate_assignment", "mha"], course)
    release = nbformat.read(course / "release" / "mha" / "mha.ipynb", as_version=4)
    source = nbformat.read(course / "source" / "mha" / "mha.ipynb", as_version=4)
    for student in STUDENTS:
        folder = course / "submitted" / student / "mha"
        folder.mkdir(parents=True)
        nbformat.write(submission(release, source, student), folder / "mha.ipynb")
        (folder / "timestamp.txt").write_text("2026-01-01 12:00:00.000000 UTC")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cli = {s: subprocess.Popen([sys.executable, "-m", "autograder", "grade",
                                str(course / "submitted" / s / "mha" / "mha.ipynb"), "--format", "json",
                                "--seed", SEED, "--output", str(tmp / f"{s}.json")], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for s in STUDENTS}
    # What the kernel alone would give the tamperer: nbgrader's own pipeline (Execute), in a
    # copy of the course whose config keeps nbgrader's default autograde preprocessors.
    plain = tmp / "plain"
    shutil.copytree(course, plain)
    config = (plain / "nbgrader_config.py").read_text()
    line = "c.Autograde.autograde_preprocessors = plugin.autograde_preprocessors()\n"
    assert line in config
    (plain / "nbgrader_config.py").write_text(config.replace(line, ""))
    run(["nbgrader", "autograde", "mha", "--student", "tamper"], plain)
    untrusted = cell_scores(plain)["tamper"]
    autograded = run(["nbgrader", "autograde", "mha", "--force"], course)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "mha") as gb:
        for g in gb.find_submission_notebook("mha", "mha", "correct").grades:
            if g.name.startswith("written_"):
                g.manual_score = g.max_score
        gb.db.commit()
    scores = exported(course)
    feedback = run(["nbgrader", "generate_feedback", "mha"], course)
    reports = {}
    for student, proc in cli.items():
        output = proc.communicate(timeout=900)[0]
        assert proc.returncode == 0, output.decode(errors="replace")[-3000:]
        reports[student] = json.loads((tmp / f"{student}.json").read_text())
    return {"root": course, "untrusted": untrusted, "exported": scores, "cells": cell_scores(course),
            "reports": reports, "logs": autograded.stderr + feedback.stderr}


def expected_parts(report: dict, maxima: dict[str, float]) -> dict[str, float]:
    """A part's nbgrader points from the CLI's JSON: its cells' points times the fraction of the
    part's checks' points that the report gives (autograder.parts)."""
    checks = load_all()
    earned, possible = {}, {}
    for c in report["checks"]:
        part = parts.part_of(c["name"])
        assert c["name"] in checks
        earned[part] = earned.get(part, 0.0) + c["score"]
        possible[part] = possible.get(part, 0.0) + c["max_score"]
    return {part: total * (earned[part] / possible[part] if possible[part] else 1.0)
            for part, total in part_totals(maxima).items()}


def test_exported_scores_equal_the_autograders(course):
    """Does each part get, in nbgrader, the points `python -m autograder grade` gives it, and the
    export sum the autograded cells and the hand-graded written answers?"""
    maxima = {}
    with Gradebook(f"sqlite:///{course['root'] / 'gradebook.db'}", "mha") as gb:
        for cell in gb.find_notebook("mha", "mha").grade_cells:
            if parts.cell_part(cell.name):
                maxima[cell.name] = cell.max_score
    assert sum(maxima.values()) == pytest.approx(104.0)          # 100 + the numeric questions' 4
    for student in STUDENTS:
        report, cells = course["reports"][student], course["cells"][student]
        expected = expected_parts(report, maxima)
        assert part_totals(cells) == pytest.approx(expected, abs=1e-3), student
        written = 6.0 if student == "correct" else 0.0
        assert course["exported"][student] == pytest.approx(sum(cells.values()) + written, abs=1e-3)
        if not any(c["status"] == "skipped" for c in report["checks"]):
            assert sum(cells.values()) == pytest.approx(report["score"], abs=0.01), student
    assert course["reports"]["correct"]["score"] == 104.0
    assert course["exported"]["correct"] == pytest.approx(110.0)
    assert course["reports"]["mistake"]["score"] < 104.0
    assert "split.no-transpose" in [d["code"] for d in course["reports"]["mistake"]["diagnoses"]]


def test_the_tamperer_gains_nothing(course):
    """Does a kernel patched to fake full marks (helpers, torch.allclose, print, stderr, display
    hook) fool nbgrader alone, and gain nothing once the autograder scores the cells?"""
    untrusted, trusted = course["untrusted"], course["cells"]["tamper"]
    assert sum(untrusted.values()) == pytest.approx(104.0), untrusted      # the attack is real
    report = course["reports"]["tamper"]
    assert report["score"] < 20.0
    assert sum(trusted.values()) <= report["score"] + 1e-3
    assert course["exported"]["tamper"] == pytest.approx(sum(trusted.values()), abs=1e-3)


def test_release_holds_no_solution_and_no_hidden_test(course):
    """Does the released folder hold stubs only: no solution code, no hidden test region?"""
    release = course["root"] / "release" / "mha"
    text = "".join(p.read_text(errors="replace") for p in release.rglob("*") if p.is_file())
    for secret in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS",
                   "return X.transpose(-3, -2)", "split_heads.raises (2)", "proves nothing"):
        assert secret not in text, secret
    nb = nbformat.read(release / "mha.ipynb", as_version=4)
    hidden = [cell for cell in nb.cells if grade_id(cell).startswith(parts.HIDDEN)]
    from autograder import public, scoring
    rubric = scoring.load_rubric()      # a part whose checks are all public has no hidden cell
    with_hidden = [p for p, v in parts.points(rubric).items() if v > public.points(rubric).get(p, 0)]
    assert len(hidden) == len(with_hidden) and all(cell.source.startswith("# Hidden tests of") for cell in hidden)


def test_feedback_shows_the_autograders_words_and_no_hidden_test(course):
    """Does the mistaken student's feedback quote the autograder's feedback and diagnosis, and
    leave out the hidden tests' source?"""
    html = (course["root"] / "feedback" / "mistake" / "mha" / "mha.html").read_text()
    report = course["reports"]["mistake"]
    failed = next(c for c in report["checks"] if c["name"] == "split_heads.values")
    assert failed["status"] == "failed" and failed["feedback"][:40] in html.replace("&#39;", "'")
    assert "split.no-transpose" in html and "graded by the autograder outside" in html
    for secret in ("BEGIN HIDDEN TESTS", "proves nothing", "split_heads.raises (2)"):
        assert secret not in html, secret


def test_audit_lists_the_students_whose_gradebook_score_differs(course, tmp_path):
    """Does `audit` re-grade every submission and name exactly the student whose gradebook
    score was changed behind nbgrader's back?"""
    db = course["root"] / "gradebook.db"
    saved = tmp_path / "gradebook.db"
    shutil.copy(db, saved)
    try:
        with Gradebook(f"sqlite:///{db}", "mha") as gb:
            grade = gb.find_grade("test_split_heads", "mha", "mha", "mistake")   # split_heads: all public
            grade.auto_score = grade.max_score
            gb.db.commit()
        done = run(["autograder", "audit", str(course["root"]), "--format", "json"], ROOT)
    finally:
        shutil.copy(saved, db)
    audit = json.loads(done.stdout)
    assert audit["seed"] == int(SEED) and len(audit["submissions"]) == len(STUDENTS)
    assert [d["student"] for d in audit["differences"]] == ["mistake"]
    cells = audit["differences"][0]["cells"]
    assert [c["cell"] for c in cells] == ["test_split_heads"]


def test_nbgrader_says_only_what_matters_and_the_feedback_opens_with_the_work(course):
    """Are nbgrader's false alarms gone (nine "checksum has changed!" per student, nbgrader
    #1961; display_data_priority; SQLAlchemy's session warnings) with one line saying why,
    no kernel started, and does the feedback name each autograded cell and fold the helper
    cell to one line?"""
    logs = course["logs"]
    for noise in ("has changed!", "display_data_priority", "SAWarning", "Executing notebook"):
        assert noise not in logs, noise
    assert logs.count("locked cells put back from the course") == len(STUDENTS)
    html = (course["root"] / "feedback" / "mistake" / "mha" / "mha.html").read_text()
    assert ">Test cell<" not in html and ">Task<" not in html
    assert "Written question (a) Why does each head need its own projection" in html
    assert "Public tests: split_heads" in html and "Hidden tests: the conventions" in html
    assert "test_helpers: the course&#39;s" in html or "test_helpers: the course's" in html
    assert "def run_check(" not in html
