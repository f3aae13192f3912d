"""Bundles for the two places courses grade code: Gradescope and GitHub Classroom.

    python -m autograder package gradescope --output autograder.zip
    python -m autograder package classroom --output mha-template/

``gradescope`` writes the zip Gradescope's "Configure Autograder" page takes: at its root
``setup.sh`` and ``run_autograder`` (from ``assignments/gradescope/``), the grader and the
reference (``autograder/``, ``solutions/``), the rubric in force, and
``requirements.txt`` with the dependencies pinned to the versions installed here.

``classroom`` writes the student repository's template: ``assignments/classroom/`` (the
workflow, its grading script, the student README) plus the stub and public tests of
``assignments/stub/``, the points of each public test and pinned requirements. It holds
no hidden check and no solution: :func:`hidden_code_in` refuses to write one that does.

Both read the sources of a checkout of this project, not an installed copy.
"""
from __future__ import annotations

import ast
import io
import json
import re
import shutil
import stat
import zipfile
from importlib import metadata
from pathlib import Path

from . import checks as registry
from . import scoring

PROJECT = Path(__file__).resolve().parent.parent
GRADESCOPE = PROJECT / "assignments" / "gradescope"
CLASSROOM = PROJECT / "assignments" / "classroom"
STUB = PROJECT / "assignments" / "stub"
SOURCES = ("autograder", "solutions")
SCRIPTS = ("setup.sh", "run_autograder")
CLASSROOM_NEEDS = ("torch", "numpy", "pytest")     #: what the public tests import
TOMLI = 'tomli>=2; python_version < "3.11"\n'   #: scoring.py reads the rubric with it there
ZIP_TIME = (2020, 1, 1, 0, 0, 0)    #: fixed, so the same sources give the same zip
#: what only the grader has: solution regions, the reference, the hidden suite, the rubric
HIDDEN_MARKERS = ("### BEGIN SOLUTION", "from solutions", "import solutions",
                  "from autograder", "import autograder", "@check(", "[points]")


class PackageError(Exception):
    """The bundle cannot be made; the message says what to fix."""


def gradescope(output, rubric=None) -> dict:
    """Write Gradescope's autograder zip; returns {"path", "max_score", "files"}."""
    chosen = _rubric(rubric)
    files = {name: _require(GRADESCOPE / name).read_bytes() for name in SCRIPTS}
    for package in SOURCES:
        for path in sorted((PROJECT / package).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".toml", ".json") \
                    and "__pycache__" not in path.parts:    # .json: released_cells.json
                files[path.relative_to(PROJECT).as_posix()] = path.read_bytes()
    files["autograder/rubric.toml"] = Path(chosen.path).read_bytes()
    unconditional = [d for d in _dependencies() if ";" not in d]     # tomli: TOMLI below
    files["requirements.txt"] = (requirements([_name(d) for d in unconditional], install_note=(
        "setup.sh installs torch first, from https://download.pytorch.org/whl/cpu."))
        + TOMLI).encode()
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
    return {"path": str(output), "max_score": _total(chosen), "files": sorted(files)}


def classroom(output, rubric=None) -> dict:
    """Write the GitHub Classroom template repository; returns {"path", "max_score", "points"}."""
    chosen = _rubric(rubric)
    output = Path(output)
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise PackageError(f"{output} exists and is not an empty folder; choose a new one")
    _require(CLASSROOM / ".github" / "workflows" / "classroom.yml")
    stub_files = [STUB / "mha.py", STUB / "test_public.py"]
    for path in stub_files:
        if not path.is_file():
            raise PackageError(f"{path} is missing: run `python -m assignments.build` first")
    points = public_points(STUB / "test_public.py", chosen)
    shutil.copytree(CLASSROOM, output, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for path in stub_files:
        shutil.copy2(path, output / path.name)
    extras = output / ".github" / "classroom"
    (extras / "points.json").write_text(json.dumps(points, indent=2) + "\n", encoding="utf-8")
    (extras / "requirements.txt").write_text(requirements(CLASSROOM_NEEDS, install_note=(
        "The workflow installs torch first, from https://download.pytorch.org/whl/cpu.")),
        encoding="utf-8")
    leaks = hidden_code_in(output)
    if leaks:
        shutil.rmtree(output)
        raise PackageError("the template would give students grader-only code: " + "; ".join(leaks))
    return {"path": str(output), "max_score": sum(points.values()), "points": points}


def public_points(tests: Path, rubric: scoring.Rubric) -> dict[str, float]:
    """{"test_<api>": points}: each public test is worth the rubric points of the public
    checks of its function (``<api>.*`` with ``hidden=False``), 0 where it has none."""
    names = [node.name for node in ast.parse(tests.read_text(encoding="utf-8")).body
             if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]
    public = [c for c in registry.load_all().values() if not c.hidden and rubric.enabled(c.name)]
    return {name: float(sum(rubric.points[c.name] for c in public
                            if c.name.split(".")[0] == name.removeprefix("test_")))
            for name in names}


def requirements(names, *, install_note: str) -> str:
    """``names`` pinned to the versions installed here. torch is pinned without its local
    label (``+cpu``), so that the CPU wheel index and PyPI both satisfy the pin."""
    lines = [f"{name}=={_installed(name)}" for name in names]
    header = (f"# Pinned by `python -m autograder package` from the grader's environment.\n"
              f"# {install_note}\n")
    return header + "\n".join(lines) + "\n"


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


def _total(rubric: scoring.Rubric) -> float:
    """The points of a mha.py upload: the numeric questions are asked of notebooks only."""
    return round(sum(rubric.points[c] for c, check in registry.load_all().items()
                     if rubric.enabled(c) and check.group != "questions"), 4)


def _dependencies() -> list[str]:
    """The ``[project] dependencies`` of pyproject.toml."""
    pyproject = _require(PROJECT / "pyproject.toml")
    return scoring.tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement.strip(), maxsplit=1)[0]


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
