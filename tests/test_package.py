"""The CI bundles: Gradescope's autograder zip and the GitHub Classroom template, run locally.

Gradescope: the zip is unpacked into a temporary ``/autograder``-like root
(``AUTOGRADER_ROOT``), ``run_autograder`` grades a correct and a buggy submission, and
``results.json`` must follow Gradescope's fields and equal what
``python -m autograder grade --format gradescope`` says about the same files.
Classroom: the template's own grading command (read from its workflow) runs on a correct
and a buggy ``mha.py``; the points it hands the reporter are checked, and the template
must hold no hidden check and no solution.
"""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autograder import package
from gradescope_spec import problems

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "mha.py"
SEED = "20240607"
#: the classic mistake: reshape straight to (batch, heads, n, p), with no transpose
BUG = '''

def split_heads(X, num_heads):          # buggy override: head j gets rows, not columns
    batch, n, width = X.shape
    return X.reshape(batch, num_heads, n, width // num_heads)
'''

pytestmark = pytest.mark.slow


def autograder(*args, cwd=ROOT, env=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def buggy_source() -> str:
    return SOLUTION.read_text(encoding="utf-8") + BUG


# --- Gradescope ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """The zip, built by the command instructors run."""
    target = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    done = autograder("package", "gradescope", "--output", str(target))
    assert done.returncode == 0, done.stderr
    assert "autograder points to" in done.stdout
    return target


def install(bundle: Path, root: Path) -> None:
    """Do what Gradescope does with the zip: unpack it into ROOT/source, keeping modes."""
    with zipfile.ZipFile(bundle) as archive:
        for info in archive.infolist():
            path = Path(archive.extract(info, root / "source"))
            mode = info.external_attr >> 16
            if mode:
                path.chmod(stat.S_IMODE(mode))
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    (root / "results").mkdir()


def run_autograder(root: Path) -> dict:
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=sys.executable,
               AUTOGRADER_SEED=SEED)
    env.pop("PYTHONPATH", None)
    done = subprocess.run([str(root / "run_autograder")], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def graded(bundle, tmp_path_factory) -> dict:
    """{kind: (results.json from run_autograder, results from `grade --format gradescope`)}."""
    out = {}
    placements = {"correct": ("mha.py", SOLUTION.read_text(encoding="utf-8")),
                  "buggy": ("my work/hw3/mha.py", buggy_source())}    # "wherever they put it"
    for kind, (where, source) in placements.items():
        root = tmp_path_factory.mktemp(f"autograder-{kind}")
        install(bundle, root)
        submitted = root / "submission" / where
        submitted.parent.mkdir(parents=True)
        submitted.write_text(source, encoding="utf-8")
        (root / "submission" / "notes.txt").write_text("not code")
        # The same command on the same files, run from the bundle's copy of the project (the
        # same sources as this checkout, and steady while the checkout is being edited).
        direct = autograder("grade", str(submitted), "--format", "gradescope", "--seed", SEED,
                            cwd=root / "source")
        assert direct.returncode == 0, direct.stderr
        out[kind] = (run_autograder(root), json.loads(direct.stdout))
    return out


def test_zip_layout(bundle):
    """Are setup.sh and run_autograder at the root, executable, with the grader and pinned deps?"""
    with zipfile.ZipFile(bundle) as archive:
        names = set(archive.namelist())
        modes = {i.filename: stat.S_IMODE(i.external_attr >> 16) for i in archive.infolist()}
        requirements = archive.read("requirements.txt").decode()
    assert {"setup.sh", "run_autograder", "requirements.txt", "autograder/__main__.py",
            "autograder/rubric.toml", "autograder/released_cells.json", "solutions/mha.py"} <= names
    assert modes["run_autograder"] & 0o111 and modes["setup.sh"] & 0o111
    assert not any(n.startswith(("tests/", "assignments/", "/")) or "__pycache__" in n or ".." in n
                   for n in names)
    pins = [line for line in requirements.splitlines() if line and not line.startswith("#")]
    assert any(re.fullmatch(r"torch==\d+\.\d+(\.\d+)?", p) for p in pins)
    assert all("==" in p or "python_version" in p for p in pins)


def test_scripts_are_valid_bash():
    """Do setup.sh and run_autograder parse as bash, and does setup.sh use the CPU wheel index?"""
    for name in package.SCRIPTS:
        done = subprocess.run(["bash", "-n", str(package.GRADESCOPE / name)], capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stderr
    assert "download.pytorch.org/whl/cpu" in (package.GRADESCOPE / "setup.sh").read_text()


@pytest.mark.parametrize("kind", ["correct", "buggy"])
def test_run_autograder_matches_grade(graded, kind):
    """Does run_autograder's results.json follow the spec and equal `grade --format gradescope`?"""
    bundled, direct = graded[kind]
    assert problems(bundled) == []

    def outcomes(results):
        return [(t["name"], t["score"], t["max_score"], t.get("status"), t["visibility"])
                for t in results["tests"]]
    assert bundled["score"] == direct["score"]
    assert outcomes(bundled) == outcomes(direct)
    assert bundled["extra_data"]["seed"] == int(SEED)


def test_correct_submission_gets_full_marks(graded):
    """Does the reference, uploaded as mha.py, get every point?"""
    results, _ = graded["correct"]
    checks = [t for t in results["tests"] if t["max_score"] > 0]
    assert results["score"] == pytest.approx(sum(t["max_score"] for t in checks), abs=1e-2)
    assert results["score"] > 0
    assert all(t.get("status", "skipped") in ("passed", "skipped") for t in checks)   # device.cuda: awarded


def test_scores_are_whole_numbers_without_cuda_and_the_output_says_why(graded):
    """With device.cuda skipped (no GPU), are the bundle's points whole numbers (the bundle's
    rubric awards a skipped check), and does the student's overview say how it was handled?"""
    for kind in ("correct", "buggy"):
        results, _ = graded[kind]
        assert float(results["score"]).is_integer(), results["score"]
        assert all(float(t["max_score"]).is_integer() and float(t["score"]).is_integer()
                   for t in results["tests"]), [(t["name"], t["score"]) for t in results["tests"]]
        cuda = next(t for t in results["tests"] if t["name"] == "device.cuda")
        if "status" not in cuda:                      # skipped: this machine has no CUDA
            assert "device.cuda did not run here" in results["output"]
            assert "its points were awarded" in results["output"]


def test_bundle_rubric_policy_is_set_by_the_skipped_option(bundle):
    """Does the bundle carry the rubric with policy.skipped = "award" (the default)?"""
    from autograder import scoring
    with zipfile.ZipFile(bundle) as archive:
        text = archive.read("autograder/rubric.toml").decode()
    assert scoring.tomllib.loads(text)["policy"]["skipped"] == "award"
    for policy in ("withhold", "rescale"):
        assert scoring.tomllib.loads(package.with_skipped_policy(text, policy))["policy"]["skipped"] == policy
    assert "skipped" in scoring.tomllib.loads(
        package.with_skipped_policy('[points]\n"a.b" = 1\n', "award"))["policy"]


def _pins_for(requirements: str, python: str) -> list[str]:
    """The requirement lines that apply on ``python`` (markers python_version ==/!= only)."""
    import re as _re
    chosen = []
    for line in requirements.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        pin, _, marker = line.partition(";")
        tests = _re.findall(r'python_version\s*(==|!=|<|>=)\s*"([\d.]+)"', marker)
        version = tuple(int(x) for x in python.split("."))
        ok = all({"==": version == tuple(map(int, v.split("."))),
                  "!=": version != tuple(map(int, v.split("."))),
                  "<": version < tuple(map(int, v.split("."))),
                  ">=": version >= tuple(map(int, v.split(".")))}[op] for op, v in tests)
        if ok:
            chosen.append(pin.strip())
    return chosen


@pytest.mark.parametrize("python", ["3.10", "3.12"])
def test_bundle_requirements_resolve_for_ubuntu_pythons(bundle, python):
    """Has every pin of the bundle's requirements.txt that applies on Python 3.10 (Ubuntu
    22.04) and 3.12 (Ubuntu 24.04) a wheel on PyPI (pip's resolver, --python-version,
    wheels only, no dependencies, nothing downloaded but metadata)?"""
    with zipfile.ZipFile(bundle) as archive:
        requirements = archive.read("requirements.txt").decode()
    pins = _pins_for(requirements, python)
    names = sorted(re.split(r"[=<>]", pin)[0] for pin in pins)
    assert names == sorted({"torch", "numpy", "nbformat"} | ({"tomli"} if python < "3.11" else set()))
    assert all(re.fullmatch(r"[\w.-]+==[\w.]+", pin) or pin.startswith("tomli") for pin in pins), pins
    found = package.pin_problems([p for p in pins if "==" in p], python)
    if found is None:
        pytest.skip("the package index (PyPI) cannot be reached from here")
    assert found == {}, found


def test_pin_check_replaces_a_pin_a_target_python_lacks():
    """Given a pin with no wheel for one target (numpy 2.4 has none for Python 3.10), is an
    older version pinned for that Python only, under a marker?"""
    answers = {"3.10": {"numpy==2.4.6": ["2.2.5", "2.2.6"]}, "3.12": {}}
    lines, said = package.resolve_for_targets(
        ["torch==2.13.0", "numpy==2.4.6"], pip=None,
        targets=(("Ubuntu 22.04", "3.10"), ("Ubuntu 24.04", "3.12")),
        problems=lambda pins, python, pip: answers[python])
    assert lines == ["torch==2.13.0", 'numpy==2.4.6; python_version != "3.10"',
                     'numpy==2.2.6; python_version == "3.10"']
    assert "numpy 2.2.6 on Python 3.10" in said
    lines, said = package.resolve_for_targets(["numpy==2.4.6"],
                                              problems=lambda pins, python, pip: None)
    assert lines == ["numpy==2.4.6"] and "Could not reach" in said


def test_buggy_submission_loses_points_in_the_right_places(graded):
    """Is the split bug, in a nested folder, found, and are hidden details kept for publication?"""
    results, _ = graded["buggy"]
    tests = {t["name"]: t for t in results["tests"]}
    total = sum(t["max_score"] for t in results["tests"])
    assert 0 < results["score"] < total
    assert tests["split_heads.values"]["status"] == "failed"
    assert tests["split_heads.values"]["visibility"] == "visible"          # a public check
    assert tests["head_weight_shape.values"]["status"] == "passed"
    hidden_failed = [t for t in results["tests"] if t.get("status") == "failed"
                     and t["visibility"] != "visible"]
    # (with error carried forward the hidden checks may all pass; each still waits)
    from autograder import checks as registry
    hidden = {c.name for c in registry.load_all().values() if c.hidden}
    assert all(t["visibility"] == "after_published" for t in results["tests"] if t["name"] in hidden)
    for t in hidden_failed:
        assert t["visibility"] == "after_published" and t["output"] not in results["output"]
    # the diagnosis rests on a public check: shown at once, under it and in the overview
    assert "[split.no-transpose]" in tests["split_heads.values"]["output"]
    assert "[split.no-transpose]" in results["output"]


def test_unusable_upload_still_gets_results(bundle, tmp_path):
    """With no .py or .ipynb in the upload, is there still a results.json saying what to do?"""
    install(bundle, tmp_path)
    (tmp_path / "submission").mkdir()
    (tmp_path / "submission" / "answer.txt").write_text("I wrote it in a text file")
    results = run_autograder(tmp_path)
    assert problems(results) == []
    assert results["score"] == 0 and "mha.py" in results["output"]
    assert all(t["visibility"] == "hidden" for t in results["tests"])


# --- GitHub Classroom ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("classroom") / "mha-template"
    done = autograder("package", "classroom", "--output", str(target))
    assert done.returncode == 0, done.stderr
    return target


def grading_command(template: Path) -> tuple[str, str]:
    """(step id, run command) of the workflow's grading step, and check the reporter reads it."""
    workflow = (template / ".github" / "workflows" / "classroom.yml").read_text()
    step = re.search(r"id: (\S+)\n\s+run: (.+)\n", workflow)
    assert step, "no grading step with an id and a run command"
    runner, command = step.groups()
    assert f"runners: {runner}" in workflow
    assert f'{runner.upper()}_RESULTS: "${{{{ steps.{runner}.outputs.result }}}}"' in workflow
    assert "uses: classroom-resources/autograding-grading-reporter@v1" in workflow
    return runner, command


def run_classroom(template: Path, source: str | None, tmp_path: Path, notebook=None,
                  log: list | None = None) -> dict:
    """Run the workflow's grading command on ``source`` as mha.py (None: the stub left as
    it is), ``notebook`` (a NotebookNode) as mha.ipynb where given; the reporter's JSON
    (and the command's output appended to ``log``)."""
    repo = tmp_path / "student-repo"
    shutil.copytree(template, repo)
    if source is not None:
        (repo / "mha.py").write_text(source, encoding="utf-8")
    if notebook is not None:
        import nbformat
        nbformat.write(notebook, str(repo / "mha.ipynb"))
    _, command = grading_command(template)
    outputs = tmp_path / "github_output"
    env = dict(os.environ, GITHUB_OUTPUT=str(outputs))
    env.pop("PYTHONPATH", None)
    done = subprocess.run(command.replace("python ", f"{sys.executable} ", 1), shell=True,
                          cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(l for l in outputs.read_text().splitlines() if l.startswith("result="))
    result = json.loads(base64.b64decode(line.removeprefix("result=")))
    score = sum(t["score"] for t in result["tests"])
    assert f"Points {score:g}/{result['max_score']:g}" in done.stdout
    if log is not None:
        log.append(done.stdout)
    return result


def reporter_problems(result: dict) -> list[str]:
    """What GitHub Classroom's autograding reporter reads from a runner's result."""
    found = [] if result.get("version") == 1 else ["version is not 1"]
    if result.get("status") not in ("pass", "fail", "error"):
        found.append(f"status {result.get('status')!r}")
    if not isinstance(result.get("max_score"), (int, float)) or not result.get("tests"):
        found.append("no max_score or no tests")
    for t in result.get("tests", []):
        if t.get("status") not in ("pass", "fail", "error") or not isinstance(t.get("name"), str) \
                or not isinstance(t.get("score"), (int, float)) or not isinstance(t.get("message"), str):
            found.append(f"test {t!r}")
    return found


def test_classroom_reports_full_points_for_a_correct_submission(template, tmp_path):
    """Does the reference get every public point, as the rubric's public checks give them?"""
    result = run_classroom(template, SOLUTION.read_text(encoding="utf-8"), tmp_path)
    points = json.loads((template / ".github" / "classroom" / "points.json").read_text())
    assert reporter_problems(result) == []
    assert result["status"] == "pass"
    assert sum(t["score"] for t in result["tests"]) == result["max_score"] == sum(points.values()) > 0


def test_classroom_reports_lost_points_for_a_buggy_submission(template, tmp_path):
    """Does the split bug cost exactly the points of the public checks of split_heads (this
    override checks no width either), and nothing of the module's, tested with a correct
    split_heads (error carried forward), as `grade --public-only` charges it?"""
    result = run_classroom(template, buggy_source(), tmp_path)
    points = json.loads((template / ".github" / "classroom" / "points.json").read_text())
    assert reporter_problems(result) == []
    failed = {t["name"] for t in result["tests"] if t["status"] != "pass"}
    assert failed == {"split_heads_values", "split_heads_raises"}
    assert result["status"] == "fail"
    assert sum(t["score"] for t in result["tests"]) == sum(points.values()) - (
        points["test_split_heads_values"] + points["test_split_heads_raises"])
    split = next(t for t in result["tests"] if t["name"] == "split_heads_values")
    assert split["message"] and split["score"] == 0


def worked_notebook(template: Path):
    """The template's notebook with the reference's code in its solution cells (the nbgrader
    source notebook's), as a student who worked in the notebook hands it in."""
    import nbformat
    source = {c.id: c.source for c in nbformat.read(str(package.NOTEBOOK), as_version=4).cells}
    nb = nbformat.read(str(template / "mha.ipynb"), as_version=4)
    solved = 0
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source, solved = source[cell.id], solved + 1
    assert solved >= 8
    return nb


def test_classroom_grades_the_notebook_when_it_holds_the_work(template, tmp_path):
    """With the work in mha.ipynb and mha.py the untouched stub, does the workflow grade the
    notebook (every public point) and say that it graded the notebook, not mha.py?"""
    log = []
    result = run_classroom(template, None, tmp_path, notebook=worked_notebook(template), log=log)
    points = json.loads((template / ".github" / "classroom" / "points.json").read_text())
    assert sum(t["score"] for t in result["tests"]) == sum(points.values()) > 0
    assert "Graded mha.ipynb: mha.ipynb holds the work (8 of 8 functions written, 0 in mha.py)" in log[0]


def test_classroom_grades_mha_py_when_it_holds_the_work(template, tmp_path):
    """With the work in mha.py and the notebook untouched, is mha.py graded, and said so?"""
    log = []
    result = run_classroom(template, buggy_source(), tmp_path, log=log)
    assert {t["name"] for t in result["tests"] if t["status"] != "pass"} == {"split_heads_values",
                                                                             "split_heads_raises"}
    assert "Graded mha.py: 8 of 8 functions written, 0 in mha.ipynb" in log[0]


def test_classroom_names_the_graded_functions_of_the_contract(template):
    """Does the template's grade.py count the contract's API names, no more and no fewer?"""
    from autograder import submission
    text = (template / ".github" / "classroom" / "grade.py").read_text(encoding="utf-8")
    api = re.search(r"^API = (\(.*?\))", text, re.S | re.M).group(1)
    assert tuple(eval(api)) == tuple(submission.API)


def test_classroom_points_come_from_the_public_checks(template):
    """Is each public test worth its public check's points in the rubric, and only those?"""
    from autograder import checks, scoring
    rubric = scoring.load_rubric()
    public = [c for c in checks.load_all().values() if not c.hidden and rubric.enabled(c.name)]
    points = json.loads((template / ".github" / "classroom" / "points.json").read_text())
    assert points == {"test_" + c.name.replace(".", "_"): rubric.points[c.name] for c in public}
    assert points["test_split_heads_values"] == rubric.points["split_heads.values"] > 0
    assert points["test_split_heads_raises"] == rubric.points["split_heads.raises"] > 0


def test_classroom_template_holds_no_hidden_code_or_solution(template):
    """Does the template hold only the stub, the public tests and CI glue: no check, no solution?"""
    files = sorted(p.relative_to(template).as_posix() for p in template.rglob("*") if p.is_file())
    assert files == [".github/classroom/grade.py", ".github/classroom/points.json",
                     ".github/classroom/requirements.txt", ".github/workflows/classroom.yml",
                     "README.md", "mha.ipynb", "mha.py", "public_answers.json", "requirements.txt",
                     "test_public.py"]
    assert package.hidden_code_in(template) == []
    text = "\n".join((template / f).read_text(encoding="utf-8") for f in files)
    solution = SOLUTION.read_text(encoding="utf-8")
    regions = re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", solution, re.S)
    solved = {line.strip() for region in regions for line in region.splitlines()
              if len(line.strip()) > 30}
    assert solved and not [line for line in solved if line in text]
    from autograder import checks
    hidden = [c for c in checks.load_all().values() if c.hidden]
    assert hidden and not [c.name for c in hidden if f'"{c.name}"' in text]


def test_package_refuses_a_template_with_grader_code(tmp_path):
    """Does the leak guard name a file that holds grader-only code?"""
    (tmp_path / "helper.py").write_text("from solutions import split_heads\n")
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "mha.py").write_text("x = 1\n")
    leaks = package.hidden_code_in(tmp_path)
    assert any("helper.py" in leak for leak in leaks) and any("solutions/mha.py" in l for l in leaks)


PARSE_ALL = """
import ast, sys, zipfile
bad = []
with zipfile.ZipFile(sys.argv[1]) as archive:
    for name in archive.namelist():
        if name.endswith(".py"):
            try:
                ast.parse(archive.read(name).decode("utf-8"), name)
            except SyntaxError as e:
                bad.append(f"{name}:{e.lineno}: {e.msg}")
print("\\n".join(bad))
sys.exit(1 if bad else 0)
"""


@pytest.mark.parametrize("python", ["3.10", "3.12"])
def test_bundle_sources_parse_on_ubuntu_pythons(bundle, python):
    """Does every Python file of the bundle parse with the Python of Ubuntu 22.04 (3.10) and
    24.04 (3.12), so that setup.sh's final `autograder checks` can run there?"""
    interpreter = shutil.which(f"python{python}")
    if interpreter is None:
        pytest.skip(f"no python{python} on this machine")
    env = dict(os.environ, PYENV_VERSION=python)
    done = subprocess.run([interpreter, "-c", PARSE_ALL, str(bundle)], capture_output=True,
                          text=True, timeout=120, env=env)
    if "command not found" in done.stderr or "is not installed" in done.stderr:
        pytest.skip(f"python{python} is a shim without an interpreter: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stdout + done.stderr
