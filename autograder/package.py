"""Bundles for students and for the two places courses grade code: Gradescope and GitHub Classroom.

    python -m autograder package student --output mha-kit/
    python -m autograder package gradescope --output autograder.zip
    python -m autograder package classroom --output mha-template/

``student`` writes the kit students get, built from the build's outputs
(``python -m assignments.build``): the notebook released as ``nbgrader generate_assignment``
releases it (:func:`release_notebook`), the stub, the public tests and their recorded
answers (``public_answers.json``: data, no code) of ``assignments/stub/``, the README of ``assignments/kit/`` and the requirements (torch,
numpy, pytest). It holds no hidden check and no solution: :func:`hidden_code_in` refuses
to write one that does.

``gradescope`` writes the zip Gradescope's "Configure Autograder" page takes: at its root
``setup.sh`` and ``run_autograder`` (from ``assignments/gradescope/``), the grader and the
reference (``autograder/``, ``solutions/``), the rubric in force (its policy for skipped
checks set by ``--skipped``, "award" by default), and ``requirements.txt`` with the
dependencies pinned to the versions installed here, checked against PyPI for the Python of
each image Gradescope builds on (:data:`TARGETS`).

``classroom`` writes the student repository's template: the student kit plus
``assignments/classroom/`` (the workflow, its grading script, the Classroom README), the
points of each public test (:func:`autograder.public.points`) and pinned requirements.

Both read the sources of a checkout of this project, not an installed copy.
"""
from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import shutil
import stat
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

import nbformat

from . import checks as registry
from . import public, scoring

PROJECT = Path(__file__).resolve().parent.parent
GRADESCOPE = PROJECT / "assignments" / "gradescope"
CLASSROOM = PROJECT / "assignments" / "classroom"
STUB = PROJECT / "assignments" / "stub"
KIT = PROJECT / "assignments" / "kit"
NOTEBOOK = PROJECT / "assignments" / "source" / "mha" / "mha.ipynb"   #: nbgrader's source
BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
BEGIN_SCHEME, END_SCHEME = "### BEGIN MARK SCHEME", "### END MARK SCHEME"
SOURCES = ("autograder", "solutions")
SCRIPTS = ("setup.sh", "run_autograder")
CLASSROOM_NEEDS = ("torch", "numpy", "pytest")     #: what the public tests import
#: what the kit's notebook needs besides: Jupyter to open it, matplotlib for its heads figure
KIT_NEEDS = CLASSROOM_NEEDS + ("notebook", "matplotlib")
#: the Pythons a student's requirements.txt must install on
KIT_PYTHONS = ("3.10", "3.11", "3.12")
#: the oldest version that serves, for a Python the installed version does not support, and
#: for the notebook's needs where they are not installed here (pyproject.toml's dependencies
#: are read from there); what the public tests import must be installed, to be pinned
KIT_FLOORS = {"pytest": "7.4", "notebook": "7", "matplotlib": "3.7"}
TOMLI = 'tomli>=2; python_version < "3.11"\n'   #: scoring.py reads the rubric with it there
ZIP_TIME = (2020, 1, 1, 0, 0, 0)    #: fixed, so the same sources give the same zip
#: what only the grader has: solution regions, the reference, the hidden suite, the rubric
HIDDEN_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION", "BEGIN HIDDEN TESTS",
                  "END HIDDEN TESTS", "BEGIN MARK SCHEME", "END MARK SCHEME", "from solutions", "import solutions",
                  "from autograder", "import autograder", "@check(", "[points]")


class PackageError(Exception):
    """The bundle cannot be made; the message says what to fix."""


QUESTION_CHOICES = ("exclude", "include")   #: ``package gradescope --questions``


def gradescope(output, rubric=None, *, skipped: str = "award", questions: str = "exclude",
               check_pins: bool = True) -> dict:
    """Write Gradescope's autograder zip; returns {"path", "max_score", "files", "pins"}.

    ``skipped``: the bundled rubric's policy for a check that cannot run there (Gradescope
    has no GPU, so ``device.cuda`` is skipped); "award" keeps every score a whole number,
    and the student's overview says how it was handled. ``check_pins``: ask the package
    index (PyPI) whether each pin has a wheel for the Python of every :data:`TARGETS` image,
    and pin an older version, under a marker, for a Python the installed one does not
    support; ``pins`` says what was found. ``questions``: the notebook's numeric questions
    (section 7) "exclude"d from the bundle's rubric (0 points: a .py and a notebook are both
    graded out of the code's points) or "include"d for every upload (a .py is reported as
    not answering them, 0 of their points): either way the stated ``max_score`` is what
    every upload is graded out of (:func:`with_questions`)."""
    chosen = _rubric(rubric)
    files = {name: _require(GRADESCOPE / name).read_bytes() for name in SCRIPTS}
    for package in SOURCES:
        for path in sorted((PROJECT / package).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".toml", ".json") \
                    and "__pycache__" not in path.parts:    # .json: released_cells.json
                files[path.relative_to(PROJECT).as_posix()] = path.read_bytes()
    text = with_questions(with_skipped_policy(Path(chosen.path).read_text(encoding="utf-8"),
                                              skipped), questions)
    files["autograder/rubric.toml"] = text.encode()
    bundled = _rubric_of(text)
    unconditional = [d for d in _dependencies() if ";" not in d]     # tomli: TOMLI below
    pins = [f"{_name(d)}=={_installed(_name(d))}" for d in unconditional]
    lines, said = (resolve_for_targets(pins) if check_pins
                   else (pins, "The pins were not checked against the package index (--no-pin-check)."))
    files["requirements.txt"] = (
        "# Pinned by `python -m autograder package` from the grader's environment.\n"
        "# setup.sh installs torch first, from https://download.pytorch.org/whl/cpu.\n"
        + "\n".join(lines) + "\n" + TOMLI).encode()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, ZIP_TIME)
            mode = 0o755 if name in SCRIPTS else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, files[name])
    output.write_bytes(buffer.getvalue())
    return {"path": str(output), "max_score": _total(bundled), "files": sorted(files), "pins": said}


def with_skipped_policy(text: str, skipped: str) -> str:
    """The rubric's TOML with ``[policy] skipped`` set to ``skipped``."""
    if skipped not in scoring.POLICIES:
        raise PackageError(f"skipped must be one of {', '.join(scoring.POLICIES)}, not {skipped!r}")
    line = f'skipped = "{skipped}"   # set by `package gradescope --skipped`'
    if re.search(r"(?m)^skipped\s*=", text):
        text = re.sub(r"(?m)^skipped\s*=.*$", line, text, count=1)
    elif re.search(r"(?m)^\[policy\]\s*$", text):
        text = re.sub(r"(?m)^\[policy\]\s*$", "[policy]\n" + line, text, count=1)
    else:
        text = f"[policy]\n{line}\n\n" + text
    scoring.tomllib.loads(text)          # still a rubric
    return text


def with_questions(text: str, questions: str) -> str:
    """The rubric's TOML with the numeric questions "exclude"d (each question check's points
    set to 0) or "include"d for every upload (``[policy] questions = "every"``)."""
    if questions not in QUESTION_CHOICES:
        raise PackageError(f"questions must be one of {', '.join(QUESTION_CHOICES)}, "
                           f"not {questions!r}")
    if questions == "include":
        line = 'questions = "every"   # set by `package gradescope --questions include`'
        if re.search(r"(?m)^questions\s*=", text):
            text = re.sub(r"(?m)^questions\s*=.*$", line, text, count=1)
        else:
            text = re.sub(r"(?m)^\[policy\]\s*$", "[policy]\n" + line, text, count=1)
    else:
        for name, check in registry.load_all().items():
            if check.group == "questions":
                text = re.sub(rf'(?m)^"{re.escape(name)}"\s*=.*$', f'"{name}" = 0   # set by '
                              "`package gradescope --questions exclude`", text)
    scoring.tomllib.loads(text)          # still a rubric
    return text


#: the images Gradescope builds on, and the Python their system ``python3`` is
TARGETS = (("Ubuntu 22.04", "3.10"), ("Ubuntu 24.04", "3.12"))


def resolve_for_targets(pins: list[str], targets=TARGETS, *, pip=None,
                        problems=None) -> tuple[list[str], str]:
    """(requirement lines, what was found): every pin checked against PyPI for each target
    Python (wheels only). A pin with no wheel for a target's Python is kept for the others,
    and the newest version that has one is pinned for that Python under a marker. Raises
    PackageError where a package has no wheel at all for a target's Python."""
    replaced: dict[str, dict[str, str]] = {}          # pin -> {python: other version}
    for image, python in targets:
        answer = (problems or pin_problems)(pins, python, pip=pip)
        if answer is None:
            return pins, ("Could not reach the package index to check the pins for "
                          + ", ".join(f"Python {v} ({i})" for i, v in targets)
                          + "; check them before uploading.")
        for pin, available in answer.items():
            if not available:
                raise PackageError(f"{pin} has no wheel for Python {python} ({image}) and no "
                                   "other version does either; the image would not build")
            replaced.setdefault(pin, {})[python] = available[-1]
    lines = []
    for pin in pins:
        name = pin.split("==")[0]
        others = replaced.get(pin, {})
        if not others:
            lines.append(pin)
            continue
        lines.append(pin + "; " + " and ".join(f'python_version != "{v}"' for v in others))
        lines += [f'{name}=={version}; python_version == "{v}"' for v, version in others.items()]
    said = "The pins resolve for " + ", ".join(f"Python {v} ({i})" for i, v in targets)
    if replaced:
        said += " (" + "; ".join(f"{pin.split('==')[0]} {version} on Python {v}" for pin, o in
                                 replaced.items() for v, version in o.items()) + ")"
    return lines, said + "."


def pin_problems(pins: list[str], python: str, *, pip=None) -> dict[str, list[str]] | None:
    """{pin: the versions that do have a wheel for ``python``, oldest first} for each pin
    without one; {} when all resolve; None when the index cannot be reached."""
    ok, _ = _pip_dry_run(pins, python, pip)
    if ok is None or ok:
        return None if ok is None else {}
    problems = {}
    for pin in pins:
        ok, text = _pip_dry_run([pin], python, pip)
        if ok is None:
            return None
        if not ok:
            listed = re.search(r"\(from versions: ([^)]*)\)", text)
            found = [v.strip() for v in listed.group(1).split(",")] if listed else []
            problems[pin] = [v for v in found if v and v.lower() != "none" and not
                             re.search(r"[a-z]", v.split("+")[0])]        # no pre-releases
    return problems


def _pip_dry_run(pins, python: str, pip) -> tuple[bool | None, str]:
    """Can pip find a wheel of each pin for ``python``? (True/False, or None: unreachable)."""
    import subprocess
    import sys
    import tempfile
    command = list(pip or (sys.executable, "-m", "pip")) + [
        "--isolated", "--disable-pip-version-check", "install", "--dry-run", "--ignore-installed",
        "--no-deps", "--only-binary=:all:", "--python-version", python, "--quiet", "--timeout", "20"]
    with tempfile.TemporaryDirectory() as target:
        try:
            done = subprocess.run(command + ["--target", target, *pins], capture_output=True,
                                  text=True, timeout=180)
        except (OSError, subprocess.TimeoutExpired) as e:
            return None, str(e)
    text = done.stdout + done.stderr
    if done.returncode == 0:
        return True, text
    if "from versions:" in text or "No matching distribution" in text:
        return (None if re.search(r"NewConnectionError|Failed to establish|Name or service",
                                  text) and "from versions: none" in text else False), text
    return None, text


def student(output, rubric=None, *, force: bool = False) -> dict:
    """Write the student kit: the released notebook, the stub, the public tests, a README
    and the requirements; returns {"path", "files", "points"}. It holds no reference code,
    no hidden test and no rubric: :func:`hidden_code_in` refuses to write one that does.
    Everything it needs is checked before anything is written, and the folder is written
    whole or not at all (:func:`_whole_folder`); ``force`` replaces a folder in use."""
    chosen = _rubric(rubric)
    needs = _kit_needs()
    with _whole_folder(output, force) as folder:
        points = _write_kit(folder, chosen, needs)
    output = Path(output)
    return {"path": str(output), "files": sorted(p.relative_to(output).as_posix()
                                                 for p in output.rglob("*") if p.is_file()),
            "points": points}


def _kit_needs() -> dict:
    """What the kit is made from, checked before anything is written: the build's outputs,
    the kit's README, the pins of its requirements (their packages installed here) and the
    rubric's public points; a PackageError says what is missing."""
    sources = [STUB / "mha.py", STUB / "test_public.py", STUB / "public_answers.json", NOTEBOOK]
    for path in sources:
        if not path.is_file():
            raise PackageError(f"{path} is missing: run `python -m assignments.build` first")
    _require(KIT / "README.md")
    text = requirements(KIT_NEEDS, install_note=(
        "Install torch first, from https://download.pytorch.org/whl/cpu (or any torch you have); "
        "notebook opens mha.ipynb, matplotlib draws its figure of your heads."))
    released = release_notebook(nbformat.read(str(NOTEBOOK), as_version=4))
    return {"sources": sources[:3], "requirements": text,
            "notebook": nbformat.writes(released) + "\n"}


def _write_kit(folder: Path, chosen: scoring.Rubric, needs: dict) -> dict:
    points = public_points(STUB / "test_public.py", chosen)
    for path in needs["sources"]:
        shutil.copy2(path, folder / path.name)
    (folder / NOTEBOOK.name).write_text(needs["notebook"], encoding="utf-8")
    shutil.copy2(KIT / "README.md", folder / "README.md")
    (folder / "requirements.txt").write_text(needs["requirements"], encoding="utf-8")
    _refuse_leaks(folder, "the kit")
    return points


@contextlib.contextmanager
def _whole_folder(output, force: bool):
    """A new folder beside ``output`` to write into; once the block ends without an error it
    is renamed to ``output`` (a folder in use moved aside first, only with ``force``), else
    removed: ``output`` is never left half-written."""
    output = Path(output)
    if output.exists() and not output.is_dir():
        raise PackageError(f"{output} exists and is not a folder; choose a new one")
    if output.is_dir() and any(output.iterdir()) and not force:
        raise PackageError(f"{output} exists and is not an empty folder; choose a new one, "
                           "or pass --force to replace it")
    output.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(dir=output.parent, prefix=f".{output.name}.partial-"))
    umask = os.umask(0)
    os.umask(umask)
    temp.chmod(0o777 & ~umask)                 # mkdtemp's 0700 would hide the kit
    try:
        yield temp
        old = None
        if output.is_dir():
            old = Path(tempfile.mkdtemp(dir=output.parent, prefix=f".{output.name}.old-"))
            os.replace(output, old / "folder")
        os.replace(temp, output)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def release_notebook(nb):
    """The notebook students get, as ``nbgrader generate_assignment`` makes it: each solution
    region replaced by ``raise NotImplementedError()``, each written answer by "YOUR ANSWER
    HERE", each hidden test region and each mark scheme removed, and no outputs."""
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        if meta.get("solution") and cell.cell_type == "markdown":
            cell.source = "YOUR ANSWER HERE"
            continue
        cell.source = _clear_region(cell.source, BEGIN_HIDDEN, END_HIDDEN, None)
        cell.source = _clear_region(cell.source, BEGIN_SCHEME, END_SCHEME, None).rstrip("\n")
        if meta.get("solution"):
            cell.source = _clear_region(cell.source, BEGIN_SOLUTION, END_SOLUTION,
                                        ("# YOUR CODE HERE", "raise NotImplementedError()"))
    return nb


def _clear_region(source: str, begin: str, end: str, stub) -> str:
    """``source`` with every ``begin`` ... ``end`` region (markers included) replaced by the
    ``stub`` lines at the region's indentation, or removed (``stub`` None)."""
    kept, inside = [], False
    for line in source.splitlines():
        if line.strip() == begin and not inside:
            inside = True
            indent = line[:len(line) - len(line.lstrip())]
            kept += [indent + s for s in (stub or ())]
        elif line.strip() == end and inside:
            inside = False
        elif not inside:
            kept.append(line)
    if inside:
        raise PackageError(f"{NOTEBOOK}: {begin} without {end}")
    return "\n".join(kept)


def classroom(output, rubric=None, *, force: bool = False) -> dict:
    """Write the GitHub Classroom template repository, built from the student kit plus the
    workflow; returns {"path", "max_score", "points"}. Written whole or not at all. Its
``grade.py`` grades ``mha.ipynb`` instead of ``mha.py`` where the notebook holds the work
(as ``batch`` chooses: :func:`autograder.roster.choose`), and says which it graded."""
    _require(CLASSROOM / ".github" / "workflows" / "classroom.yml")
    chosen = _rubric(rubric)
    needs = _kit_needs()
    workflow_requirements = requirements(CLASSROOM_NEEDS, install_note=(
        "The workflow installs torch first, from https://download.pytorch.org/whl/cpu."))
    with _whole_folder(output, force) as folder:
        points = _write_kit(folder, chosen, needs)
        shutil.copytree(CLASSROOM, folder, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        extras = folder / ".github" / "classroom"
        (extras / "points.json").write_text(json.dumps(points, indent=2) + "\n", encoding="utf-8")
        (extras / "requirements.txt").write_text(workflow_requirements, encoding="utf-8")
        _refuse_leaks(folder, "the template")
    return {"path": str(output), "max_score": sum(points.values()), "points": points}


def _refuse_leaks(output: Path, what: str) -> None:
    leaks = hidden_code_in(output)
    if leaks:                   # _whole_folder removes what was written
        raise PackageError(f"{what} would give students grader-only code: " + "; ".join(leaks))


def public_points(tests: Path, rubric: scoring.Rubric) -> dict[str, float]:
    """{"test_<api>_<aspect>": points}: each public test is worth the rubric points of the
    public check ``<api>.<aspect>`` it stands for (:func:`autograder.public.check_points`);
    a test with no public check in force is worth 0. A public check worth points with no
    test is refused: students could not see what it checks."""
    names = [node.name for node in ast.parse(tests.read_text(encoding="utf-8")).body
             if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]
    per_test = {public.test_name(check): value for check, value in public.check_points(rubric).items()}
    untested = [test for test, value in per_test.items() if value > 0 and test not in names]
    if untested:
        raise PackageError(f"{tests} has no {', '.join(untested)}, whose public checks are "
                           f"worth points: run `python -m assignments.build`")
    return {name: per_test.get(name, 0.0) for name in names}


def requirements(names, *, install_note: str, pythons=KIT_PYTHONS) -> str:
    """``names`` pinned to the versions installed here, for every Python of ``pythons``.
    torch is pinned without its local label (``+cpu``), so that the CPU wheel index and PyPI
    both satisfy the pin. A version whose ``Requires-Python`` leaves out some of ``pythons``
    (numpy 2.4 needs 3.11) is pinned under a marker for the others, and those get a range:
    the oldest version that serves (pyproject.toml's floor, or :data:`KIT_FLOORS`) up to,
    not including, the installed minor version."""
    floors = {_name(d): _floor(d) for d in _dependencies()} | KIT_FLOORS
    lines = []
    for name in names:
        if name not in CLASSROOM_NEEDS and not _is_installed(name):   # nothing to pin: a range
            lines.append(f"{name}>={KIT_FLOORS[name]}")
            continue
        version = _installed(name)
        left_out = [v for v in pythons if not _supports(_requires_python(name), v)]
        if not left_out:
            lines.append(f"{name}=={version}")
            continue
        below = ".".join(version.split(".")[:2])
        floor = f">={floors[name]}," if floors.get(name) else ""
        lines.append(f"{name}=={version}; " + " and ".join(f'python_version != "{v}"' for v in left_out))
        lines += [f'{name}{floor}<{below}; python_version == "{v}"' for v in left_out]
    header = (f"# Pinned by `python -m autograder package` from the grader's environment,\n"
              f"# for Python {', '.join(pythons)}.\n# {install_note}\n")
    return header + "\n".join(lines) + "\n"


def _requires_python(name: str) -> str:
    try:
        return metadata.metadata(name).get("Requires-Python") or ""
    except metadata.PackageNotFoundError:
        return ""


def _supports(specifier: str, python: str) -> bool:
    """Does a ``Requires-Python`` specifier (">=3.11", ">=3.9,<3.13", "!=3.10.*") admit
    ``python`` ("3.10")? Each clause is compared on major.minor."""
    version = tuple(int(x) for x in python.split("."))
    for clause in filter(None, (c.strip() for c in specifier.split(","))):
        match = re.fullmatch(r"(>=|<=|==|!=|>|<|~=)\s*(\d+)(?:\.(\d+))?[.\d*]*", clause)
        if not match:
            continue                    # a form we do not read: assume it admits
        op, major, minor = match.group(1), int(match.group(2)), int(match.group(3) or 0)
        bound = (major, minor)
        ok = {">=": version >= bound, "~=": version >= bound, ">": version >= bound,
              "<=": version <= bound, "<": version < bound, "==": version == bound,
              "!=": version != bound}[op]
        if not ok:
            return False
    return True


def _floor(requirement: str) -> str | None:
    match = re.search(r">=\s*([\d.]+)", requirement.split(";")[0])
    return match.group(1) if match else None


def hidden_code_in(folder) -> list[str]:
    """Files of ``folder`` that hold grader-only code, each with the marker found."""
    found = []
    for path in sorted(Path(folder).rglob("*")):
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        relative = path.relative_to(folder).as_posix()
        if relative.split("/")[0] in SOURCES:
            found.append(f"{relative} (a copy of the grader or the reference)")
        found += [f"{relative} contains {marker!r}" for marker in HIDDEN_MARKERS if marker in text]
    return found


def _rubric(path) -> scoring.Rubric:
    try:
        return scoring.load_rubric(path, known=set(registry.load_all()))
    except scoring.RubricError as e:
        raise PackageError(str(e)) from None


def _rubric_of(text: str) -> scoring.Rubric:
    """The rubric a TOML text says, read as the grader reads its file."""
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rubric.toml"
        path.write_text(text, encoding="utf-8")
        return _rubric(path)


def _total(rubric: scoring.Rubric) -> float:
    """The points every upload is graded out of: with ``policy.questions`` "notebook", a
    mha.py upload is not asked the numeric questions, so they must be 0 (excluded) for the
    total to hold for a notebook too; with "every", they count for both."""
    return round(sum(rubric.points.get(c, 0) for c, check in registry.load_all().items()
                     if rubric.enabled(c) and (check.group != "questions"
                                               or rubric.questions == "every")), 4)


def _dependencies() -> list[str]:
    """The ``[project] dependencies`` of pyproject.toml."""
    pyproject = _require(PROJECT / "pyproject.toml")
    return scoring.tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement.strip(), maxsplit=1)[0]


def _is_installed(name: str) -> bool:
    try:
        metadata.version(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def _installed(name: str) -> str:
    try:
        return metadata.version(name).split("+")[0]
    except metadata.PackageNotFoundError:
        raise PackageError(f"{name} is not installed here, so its version cannot be pinned; "
                           f"install it first (python -m pip install {name})") from None


def _require(path: Path) -> Path:
    if not path.is_file():
        raise PackageError(f"{path} is missing: `package` needs a checkout of the project")
    return path
