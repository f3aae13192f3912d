"""Per-student variants: each student's numbers and hidden inputs come from their id and the
course's secret; every way of grading (grade --student, batch, nbgrader's autograde) grades a
student against their own variant, and a regrade gives the same result."""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from assignments import build, narrative
from autograder import variants
from autograder.api import Grader
from autograder.cli import main

ROOT = build.ROOT
SECRET = "the course's secret"
QUESTIONS_ONLY = '[points]\n"questions.key_shape" = 2\n"questions.params" = 2\n'


def source_notebook(variant) -> nbformat.NotebookNode:
    """The nbgrader source notebook of a variant: its model answers are that student's."""
    ref = build.read_reference((ROOT / build.SOLUTION).read_text())
    checks = build.read_checks((ROOT / build.CHECKS).read_text())
    return build.notebook(ref, checks, variant, figures=False)


def write(nb, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / "mha.ipynb")
    return folder / "mha.ipynb"


@pytest.fixture(scope="module")
def rubric(tmp_path_factory):
    path = tmp_path_factory.mktemp("rubric") / "questions.toml"
    path.write_text(QUESTIONS_ONLY)
    return path


def test_two_students_get_their_own_numbers_and_seeds():
    """Do two students get different sizes, answers and seeds; the same student always the
    same; another secret other numbers; and no secret the default variant for everyone?"""
    a, b = variants.derive("alice", SECRET), variants.derive("bob", SECRET)
    assert a == variants.derive("alice", SECRET) and a.student == "alice"
    assert a.answers() != b.answers() and a.seed != b.seed
    assert len({variants.derive(f"s{i}", SECRET).answers()["params_one_head"] for i in range(40)}) > 20
    assert a.values()["key_d"] != b.values()["key_d"] or a.values()["key_heads"] != b.values()["key_heads"]
    assert variants.derive("alice", "another secret") != a
    plain = variants.derive("alice", "")
    assert plain.seed is None and plain.answers() == variants.DEFAULT.answers()
    students = [variants.derive(f"s{i}", SECRET) for i in range(40)]
    assert len({s.answers()["key_matrix_shape"] for s in students}) > 20     # answers rarely travel
    for s in students:
        assert s.answers()["key_matrix_shape"][1] not in (s.key_d, s.key_d_total)


def test_each_student_is_graded_against_their_own_variant(tmp_path):
    """A's right answers: full marks as A, and again identically on a regrade; graded as B,
    the numeric questions' points are lost (the code's checks, on B's hidden inputs, pass)."""
    a, b = variants.derive("alice", SECRET), variants.derive("bob", SECRET)
    assert all(a.answers()[k] != b.answers()[k] for k in a.answers())     # as this secret has it
    path = write(source_notebook(a), tmp_path)
    grader = Grader(device="cpu")
    try:
        first, again, as_b = grader.grade(path, a), grader.grade(path, a), grader.grade(path, b)
    finally:
        grader.close()
    assert first.to_dict() == again.to_dict()
    assert first.score == first.max_score == 104
    assert (first.seed, as_b.seed) == (a.seed, b.seed)
    status = {r.name: r.status.value for r in as_b.results}
    assert status.pop("questions.key_shape") == status.pop("questions.params") == "failed"
    assert set(status.values()) <= {"passed", "skipped"}
    assert as_b.score == pytest.approx(first.score - 4, abs=0.2)       # rescaled by device.cuda
    assert any(note.startswith("graded against the variant of student bob") for note in as_b.notes)


def test_variant_command_writes_each_students_release(tmp_path, monkeypatch, capsys):
    """Does `python -m autograder variant STUDENT --output DIR` write what generate_assignment
    releases, with that student's numbers: figures in, solutions and mark schemes out?"""
    monkeypatch.setenv(variants.ENV, SECRET)
    for student in ("alice", "bob"):
        assert main(["variant", student, "--output", str(tmp_path / student)]) == 0
    texts = {}
    for student in ("alice", "bob"):
        nb = nbformat.read(tmp_path / student / "mha.ipynb", as_version=4)
        text = "\n".join(c.source for c in nb.cells)
        v = variants.derive(student, SECRET)
        question = next(c.source for c in nb.cells if c.id == "section-7")
        assert f"$d = {v.key_d}$" in question and f"$M = {v.key_heads}$ heads" in question
        assert f"$d = {v.param_d}$" in question
        for secret in ("BEGIN SOLUTION", "MARK SCHEME", "Model answer", "BEGIN HIDDEN TESTS",
                       "return X.transpose(-3, -2)", repr(v.answers()["key_matrix_shape"])):
            assert secret not in text, secret
        title = next(c for c in nb.cells if c.id == "title")
        assert b"<svg" in base64.b64decode(title.attachments["block_diagram.svg"]["image/svg+xml"])
        texts[student] = question
    assert texts["alice"] != texts["bob"]
    assert capsys.readouterr().out.strip().endswith("mha.ipynb")


def test_variant_writes_every_students_notebook_in_one_run(tmp_path, monkeypatch, capsys):
    """Does `variant --students FILE` (and several STUDENT ids) write DIR/<id>/mha.ipynb for
    each, with that student's numbers, drawing the fixed figures once for the whole class?"""
    from assignments import figures
    monkeypatch.setenv(variants.ENV, SECRET)
    build._drawing.cache_clear()
    drawn = []
    for name in ("block_diagram", "split_diagram"):
        original = getattr(figures, name)
        monkeypatch.setattr(figures, name, lambda original=original, name=name: (
            drawn.append(name), original())[1])
    roster = tmp_path / "roster.csv"
    roster.write_text("# the class\nalice,Alice A.\n\nbob\ncarol@uni.edu\n")
    assert main(["variant", "--students", str(roster), "--output", str(tmp_path / "out")]) == 0
    assert sorted(drawn) == ["block_diagram", "split_diagram"]          # once each, not per student
    written = sorted(p.parent.name for p in (tmp_path / "out").glob("*/mha.ipynb"))
    assert written == ["alice", "bob", "carol@uni.edu"]
    for student in written:
        nb = nbformat.read(tmp_path / "out" / student / "mha.ipynb", as_version=4)
        assert nb.metadata["mha_variant"]["student"] == student
        v = variants.derive(student, SECRET)
        question = next(c.source for c in nb.cells if c.id == "section-7")
        assert f"$d = {v.param_d}$" in question
    assert len(capsys.readouterr().out.split()) == 3
    assert main(["variant", "dave", "erin", "--output", str(tmp_path / "two")]) == 0
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == ["dave", "erin"]


@pytest.mark.parametrize("ids, said", [(["ok", "../evil"], "cannot name a folder"),
                                       (["ok", "ok"], "listed twice"),
                                       (["ok", " "], "empty")])
def test_variant_refuses_a_bad_id_before_writing_anything(tmp_path, monkeypatch, capsys, ids, said):
    """An id that cannot name a folder, one listed twice or an empty one: exit 2 with a
    message, and no notebook written, not even the good students'."""
    monkeypatch.setenv(variants.ENV, SECRET)
    assert main(["variant", *ids, "--output", str(tmp_path / "out")]) == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_grade_and_batch_take_the_students_variant(tmp_path, rubric, monkeypatch):
    """`grade --student` (the secret from the course's nbgrader_config.py) and `batch` (the
    secret from the environment) grade A's notebook as A's, and B's copy of it as B's."""
    a = variants.derive("alice", SECRET)
    config = tmp_path / "nbgrader_config.py"
    config.write_text(f"c = get_config()\nc.TrustedGrades.variant_secret = {SECRET!r}\n")
    nb = source_notebook(a)
    path = write(nb, tmp_path / "class" / "alice")
    write(nb, tmp_path / "class" / "bob")                    # bob hands in alice's answers
    scores = {}
    for student in ("alice", "bob"):
        out = tmp_path / f"{student}.json"
        assert main(["grade", str(path), "--student", student, "--course-config", str(config),
                     "--rubric", str(rubric), "--device", "cpu", "--format", "json",
                     "--output", str(out)]) == 0
        scores[student] = json.loads(out.read_text())["score"]
    assert scores == {"alice": 4.0, "bob": 0.0}
    monkeypatch.setenv(variants.ENV, SECRET)
    assert main(["batch", str(tmp_path / "class"), "--output", str(tmp_path / "out"),
                 "--rubric", str(rubric), "--device", "cpu", "--workers", "1"]) == 0
    results = {s: json.loads((tmp_path / "out" / "results" / f"{s}.json").read_text())
               for s in ("alice", "bob")}
    assert {s: r["score"] for s, r in results.items()} == {"alice": 4.0, "bob": 0.0}


def test_a_bad_course_config_is_a_usage_error(tmp_path, capsys):
    """A course config that is missing or raises gives exit status 2 and a clear message."""
    broken = tmp_path / "nbgrader_config.py"
    broken.write_text("raise RuntimeError('half-edited')\n")
    assert main(["variant", "alice", "--output", str(tmp_path / "x"), "--course-config", str(broken)]) == 2
    assert "half-edited" in capsys.readouterr().err
    assert main(["variant", "alice", "--output", str(tmp_path / "x"),
                 "--course-config", str(tmp_path / "none.py")]) == 2
    assert "no such course config file" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# nbgrader end to end


def run(args, cwd, timeout=900) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop(variants.ENV, None)
    done = subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(args[:3])}: {done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.mark.slow
def test_nbgrader_grades_each_student_against_their_own_variant(tmp_path, rubric):
    """generate_assignment releases the figures and no solution, mark scheme or hidden test;
    alice hands in her own notebook with her right answers and bob a copy of it; autograde
    with the course's secret gives alice the numeric questions' points and bob none, and the
    autograded notebooks carry each written question's rubric for the graders."""
    pytest.importorskip("nbgrader")
    from nbgrader.api import Gradebook
    course = tmp_path / "course"
    shutil.copytree(ROOT / "assignments", course, ignore=shutil.ignore_patterns(
        "__pycache__", "stub", "gradescope", "classroom", "*.py"))
    shutil.copy(ROOT / "assignments" / "nbgrader_config.py", course)
    run(["nbgrader", "generate_assignment", "mha"], course)
    release = nbformat.read(course / "release" / "mha" / "mha.ipynb", as_version=4)
    text = "\n".join(c.source for c in release.cells)
    for secret in ("BEGIN SOLUTION", "MARK SCHEME", "Model answer", "BEGIN HIDDEN TESTS"):
        assert secret not in text, secret
    attached = {name for c in release.cells for name in c.get("attachments", {})}
    assert attached == {"block_diagram.svg", "split_diagram.svg"}
    # alice's own notebook, answered with her numbers; bob hands in the very same file
    a = variants.derive("alice", SECRET)
    answered = build.release(a)
    model = {c.id: c.source for c in source_notebook(a).cells}
    for cell in answered.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = "\n".join(line for line in model[cell.id].split("\n")
                                    if "### " not in line or "SOLUTION" not in line)
    for student in ("alice", "bob"):
        folder = course / "submitted" / student / "mha"
        folder.mkdir(parents=True)
        nbformat.write(answered, folder / "mha.ipynb")
        (folder / "timestamp.txt").write_text("2026-01-01 12:00:00.000000 UTC")
    run(["nbgrader", "autograde", "mha", f"--TrustedGrades.variant_secret={SECRET}",
         f"--TrustedGrades.rubric={rubric}"], course)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "mha") as gb:
        scores = {s: gb.find_grade("hidden_questions", "mha", "mha", s).score for s in ("alice", "bob")}
        tasks = {t.name: gb.find_source_cell(t.name, "mha", "mha").source
                 for t in gb.find_notebook("mha", "mha").task_cells}
    assert scores == {"alice": 4.0, "bob": 0.0}
    autograded = nbformat.read(course / "autograded" / "alice" / "mha" / "mha.ipynb", as_version=4)
    restored = {c.id: c.source for c in autograded.cells if c.metadata.get("nbgrader", {}).get("task")}
    for question in narrative.QUESTIONS:
        assert "### BEGIN MARK SCHEME" in tasks[question.grade_id]
        for points, criterion in question.rubric:
            assert criterion in tasks[question.grade_id] and criterion in restored[question.grade_id]
