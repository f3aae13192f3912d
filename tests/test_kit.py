"""The student kit (``python -m autograder package student``): what students get, and only that.

It must hold the released notebook, the stub, the public tests and a README; every pointer
of the stub must resolve inside it; it must hold no reference code, no hidden check and no
grader; and plain ``pytest`` in it, on a Python that cannot import this project, must fail
the stub with one clear message per function and pass the reference.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from assignments import build
from autograder import checks, package, parts, public, scoring
from kit_env import run_pytest, student_env

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "mha.py"
API = ("head_weight_shape", "project", "project_heads", "split_heads", "concat_heads",
       "masked_softmax", "attention_pool", "MultiHeadAttention")


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("kit") / "mha-kit"
    built = package.student(folder)
    assert built["files"] == ["README.md", "mha.ipynb", "mha.py", "public_answers.json",
                              "requirements.txt", "test_public.py"]
    return folder


def kit_texts(kit: Path) -> dict[str, str]:
    """Every file's text; the notebook as its cells' sources, one after the other."""
    texts = {}
    for path in kit.rglob("*"):
        if path.suffix == ".ipynb":
            nb = nbformat.read(str(path), as_version=4)
            texts[path.name] = "\n".join(cell.source for cell in nb.cells)
        elif path.is_file():
            texts[path.name] = path.read_text(encoding="utf-8")
    return texts


def solution_lines() -> set[str]:
    """The lines students write: inside the reference's solution regions, markers excluded."""
    ref = build.read_reference(SOLUTION.read_text(encoding="utf-8"))
    lines = set()
    for region in ref.regions:
        for line in ref.lines[region.begin + 1:region.end]:
            text = line.strip()
            if len(text) >= 12 and not text.startswith("#"):
                lines.add(text)
    return lines


def test_kit_holds_no_solution_line_no_hidden_check_no_grader(kit):
    """Is no line of the reference's solution regions, no solution or hidden-test marker, no
    hidden check's name and no grader code in any file of the kit?"""
    texts = kit_texts(kit)
    regions = solution_lines()
    assert len(regions) > 30                            # the reference was read
    leaked = {(name, line) for name, text in texts.items()
              for line in {raw.strip() for raw in text.splitlines()} & regions}
    assert not leaked, sorted(leaked)[:5]
    assert package.hidden_code_in(kit) == []
    hidden = [c.name for c in checks.load_all().values() if c.hidden]
    assert hidden and not [(n, h) for n, text in texts.items() for h in hidden if h in text]
    assert not any(p.is_dir() for p in kit.iterdir())   # no autograder/, no solutions/
    generated = build.generate()                        # the stub and tests: the build's, verbatim
    assert texts["mha.py"] == generated[build.STUB]
    assert texts["test_public.py"] == generated[build.PUBLIC_TESTS]


def test_released_notebook_holds_only_stubs_public_tests_and_comments(kit):
    """Is each code cell of the released notebook a stub, the imports, the public helpers, a
    public test cell verbatim from assignments/public_checks.py, or a hidden cell with
    nothing but comments; and is every written answer blank?"""
    public = build.read_checks((ROOT / "assignments" / "public_checks.py").read_text(encoding="utf-8"))
    nb = nbformat.read(str(kit / "mha.ipynb"), as_version=4)
    seen = set()
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", cell.get("id"))
        meta = cell.metadata.get("nbgrader", {})
        assert not cell.get("outputs")
        if cell.cell_type == "markdown":
            if meta.get("solution"):
                assert cell.source == "YOUR ANSWER HERE"
            continue
        kind = parts.cell_part(grade_id)
        if meta.get("solution"):
            assert "raise NotImplementedError()" in cell.source
            seen.add(grade_id)
        elif kind and not kind[1]:                       # hidden_<part>
            assert all(not line.strip() or line.lstrip().startswith("#")
                       for line in cell.source.splitlines()), cell.source
        elif kind:                                       # test_<api>: its public checks
            code = cell.source
            for name in public.of(kind[0]):
                assert public.checks[name] in code
                code = code.replace(public.checks[name], "")
            functions = ", ".join(build.check_function(name) for name in public.of(kind[0]))
            assert [line for line in code.splitlines() if line.strip() and not line.startswith("#")] \
                == [f"run_checks([{functions}], globals())"]
        else:
            assert grade_id in ("imports", "test_helpers", "figure_helpers", "show_heads"), grade_id
            if grade_id == "test_helpers":
                assert public.helpers in cell.source
    assert seen >= set(API)
    text = "\n".join(cell.source for cell in nb.cells)
    assert "Model answer" not in text and "MARK SCHEME" not in text     # nbgrader's ClearMarkScheme


def test_every_pointer_of_the_stub_resolves_in_the_kit(kit):
    """Does every "see section N (short) of FILE" of mha.py name a file of the kit whose
    section N has that title?"""
    stub = (kit / "mha.py").read_text(encoding="utf-8")
    pointers = re.findall(r"see section (\d+) \(([^)]*)\) of ([\w.]+)", stub)
    assert len(pointers) >= len(API)
    for number, short, name in pointers:
        assert (kit / name).is_file(), name
        nb = nbformat.read(str(kit / name), as_version=4)
        headings = [c.source.splitlines()[0] for c in nb.cells
                    if c.cell_type == "markdown" and c.source.startswith(f"## {number}. ")]
        assert len(headings) == 1 and short.lower() in headings[0].lower(), (number, short, headings)


def test_kit_pytest_fails_the_stub_once_per_check_and_passes_the_reference(kit, tmp_path):
    """Plain `pytest` in a copy of the kit outside the project, on a Python that cannot import
    the project: one failure per public check naming its function and section for the stub,
    and every test passing with the reference copied in."""
    copy = tmp_path / "student"
    shutil.copytree(kit, copy)
    env = student_env(tmp_path)
    blocked = subprocess.run([sys.executable, "-c", "import autograder"], cwd=copy, env=env,
                             capture_output=True, text=True)
    assert blocked.returncode != 0 and "not installed" in blocked.stderr
    outcomes, log = run_pytest(copy, tmp_path)
    tests = {public.test_name(c): public.api_of(c) for c in public.check_points(scoring.load_rubric())}
    assert sorted(outcomes) == sorted(tests), log
    assert set(tests.values()) == set(API)
    for test, name in tests.items():
        outcome, message = outcomes[test]
        assert outcome == "failure", (name, outcome, message)
        assert re.match(rf"AssertionError: {name} (is not implemented yet|calls \w+, which is "
                        rf"not implemented yet): implement {name}\S*: see section \d+ ", message), message
    shutil.copy(SOLUTION, copy / "mha.py")
    outcomes, log = run_pytest(copy, tmp_path)
    assert outcomes == {test: ("passed", "") for test in tests}, log


def test_kit_refuses_a_folder_in_use(tmp_path):
    """Does `package student` refuse a folder that is not empty, with a clear message?"""
    (tmp_path / "x").write_text("mine")
    with pytest.raises(package.PackageError, match="not an empty folder"):
        package.student(tmp_path)


def test_release_clears_solutions_and_hidden_regions():
    """Are solution regions replaced by a raise at their indentation, and hidden test regions
    removed, as nbgrader's ClearSolutions and ClearHiddenTests do?"""
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 42\n    ### END SOLUTION",
                                  metadata={"nbgrader": {"solution": True, "grade_id": "f"}}),
        nbformat.v4.new_code_cell("# t\n### BEGIN HIDDEN TESTS\nassert f() == 42\n### END HIDDEN TESTS",
                                  metadata={"nbgrader": {"grade": True, "grade_id": "t"}}),
        nbformat.v4.new_markdown_cell("the answer is 42", metadata={"nbgrader": {"solution": True}}),
        nbformat.v4.new_markdown_cell("**(a)** Why?\n\n### BEGIN MARK SCHEME\nBecause 42.\n### END MARK SCHEME",
                                      metadata={"nbgrader": {"task": True, "locked": True}})])
    out = package.release_notebook(nb)
    assert out.cells[0].source == "def f():\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    assert out.cells[1].source == "# t"
    assert out.cells[2].source == "YOUR ANSWER HERE"
    assert out.cells[3].source == "**(a)** Why?"


def _applies(line: str, python: str) -> bool:
    """Does a requirement line apply on ``python``? (markers: python_version ==/!= only)"""
    _, _, marker = line.partition(";")
    version = tuple(int(x) for x in python.split("."))
    return all((version == tuple(map(int, v.split(".")))) == (op == "==")
               for op, v in re.findall(r'python_version\s*(==|!=)\s*"([\d.]+)"', marker))


@pytest.mark.parametrize("python", package.KIT_PYTHONS)
def test_kit_requirements_install_on_every_supported_python(python):
    """Does the kit's requirements.txt give each of Python 3.10-3.12 exactly one line per
    package (torch, numpy, pytest, notebook, matplotlib), never a pin whose Requires-Python
    leaves that Python out (numpy 2.4 has no 3.10 wheel)?"""
    text = package.requirements(package.KIT_NEEDS, install_note="x")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    chosen = [line for line in lines if _applies(line, python)]
    assert sorted(package._name(line) for line in chosen) == sorted(package.KIT_NEEDS)
    for line in chosen:
        if "==" in line.split(";")[0]:
            assert package._supports(package._requires_python(package._name(line)), python), line


def test_kit_requirements_range_a_python_the_pin_leaves_out(monkeypatch):
    """A version needing Python 3.11: pinned for 3.11 and 3.12 under a marker, and 3.10 given
    the range from the project's floor up to that minor version; a notebook need that is not
    installed here gets its floor, not an error."""
    monkeypatch.setattr(package, "_installed", lambda name: {"numpy": "2.4.6"}.get(name, "1.0"))
    monkeypatch.setattr(package, "_requires_python",
                        lambda name: ">=3.11" if name == "numpy" else ">=3.8")
    monkeypatch.setattr(package, "_is_installed", lambda name: name != "notebook")
    lines = package.requirements(("numpy", "pytest", "notebook"), install_note="x").splitlines()
    assert 'numpy==2.4.6; python_version != "3.10"' in lines
    assert 'numpy>=1.24,<2.4; python_version == "3.10"' in lines
    assert "pytest==1.0" in lines and "notebook>=7" in lines
    assert package._supports(">=3.9,<3.12", "3.11") and not package._supports(">=3.9,<3.12", "3.12")
    assert not package._supports("!=3.10.*", "3.10") and package._supports("", "3.10")


def test_kit_checks_what_it_needs_before_writing_anything(tmp_path, monkeypatch):
    """pytest not installed here (its pin cannot be made): a clear message, and no folder."""
    real = package._installed

    def installed(name):
        if name == "pytest":
            raise package.PackageError("pytest is not installed here, so its version cannot "
                                       "be pinned; install it first (python -m pip install pytest)")
        return real(name)
    monkeypatch.setattr(package, "_installed", installed)
    with pytest.raises(package.PackageError, match="pytest is not installed"):
        package.student(tmp_path / "kit")
    assert list(tmp_path.iterdir()) == []


def test_kit_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """A failure half-way (the README cannot be copied): no kit folder and no partial folder
    beside it; --force replaces a folder in use only once the new kit is whole."""
    original = shutil.copy2

    def failing(src, dst, *a, **k):
        if Path(src).name == "README.md":
            raise OSError("disk full")
        return original(src, dst, *a, **k)
    monkeypatch.setattr(shutil, "copy2", failing)
    with pytest.raises(OSError, match="disk full"):
        package.student(tmp_path / "kit")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "kit").mkdir()
    (tmp_path / "kit" / "old.txt").write_text("mine")
    with pytest.raises(OSError):
        package.student(tmp_path / "kit", force=True)
    assert [p.name for p in (tmp_path / "kit").iterdir()] == ["old.txt"]     # untouched
    monkeypatch.setattr(shutil, "copy2", original)
    with pytest.raises(package.PackageError, match="--force"):
        package.student(tmp_path / "kit")
    built = package.student(tmp_path / "kit", force=True)
    assert "old.txt" not in built["files"] and "requirements.txt" in built["files"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kit"]
