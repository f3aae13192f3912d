"""The project's own docs agree with the code: every mistake code the diagnoses can emit is
in docs/mistakes.md and nothing else is; the exit statuses in docs/contract.md are the
ones the CLI uses; the README points at these docs, not at files outside the repository."""
from __future__ import annotations

import re
from pathlib import Path

from autograder import errors
from autograder.diagnoses import DIAGNOSES, structure, values  # noqa: F401  (registers)

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def documented_codes() -> list[str]:
    """The codes of mistakes.md's tables (the first cell of each row)."""
    text = (DOCS / "mistakes.md").read_text(encoding="utf-8")
    return re.findall(r"^\| `([a-z]+\.[a-z0-9-]+)` \|", text, re.M)


def test_every_code_the_grader_emits_is_documented_and_no_other():
    emitted = [code for code, _ in DIAGNOSES]
    documented = documented_codes()
    assert len(emitted) == len(set(emitted)), "a code is registered twice"
    assert len(documented) == len(set(documented)), "a code is listed twice in docs/mistakes.md"
    assert set(emitted) - set(documented) == set(), "emitted but not in docs/mistakes.md"
    assert set(documented) - set(emitted) == set(), "in docs/mistakes.md but never emitted"
    assert len(emitted) >= 30


def test_every_code_has_its_mistake_and_symptom():
    """Each row: the code, what the mistake is, how it shows; no cell left empty."""
    text = (DOCS / "mistakes.md").read_text(encoding="utf-8")
    for row in re.findall(r"^\| `[a-z]+\.[a-z0-9-]+` \|.*$", text, re.M):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        assert len(cells) == 3 and all(len(c) > 10 for c in cells[1:]), row


def test_contract_lists_the_exit_statuses_the_cli_uses():
    text = (DOCS / "contract.md").read_text(encoding="utf-8")
    table = text.split("## Exit statuses")[1].split("##")[0]
    listed = {int(n) for n in re.findall(r"^\| (\d+) \|", table, re.M)}
    used = {getattr(errors, name) for name in dir(errors) if name.startswith("EXIT_")}
    assert listed == used


def test_contract_names_every_part_of_the_api():
    text = (DOCS / "contract.md").read_text(encoding="utf-8")
    import solutions
    assert len(solutions.__all__) == 8
    for name in solutions.__all__:
        assert f"def {name}(" in text or f"class {name}(" in text, name
    for section in ("## The student's API", "## Shapes", "## Masking", "## The command line",
                    "## The JSON result", "## Exit statuses"):
        assert section in text


def test_readme_points_at_the_projects_docs():
    """The README's links resolve inside the repository; none reaches ../shared."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/contract.md" in readme and "docs/mistakes.md" in readme
    assert "../shared" not in readme and "SPEC.md" not in readme and "TAXONOMY.md" not in readme
    for target in re.findall(r"\]\(([^)#]+)", readme):
        if "://" not in target:
            assert (ROOT / target).exists(), target


def test_readme_states_the_notebooks_true_points():
    """Does the README's nbgrader "Points" paragraph give the numbers the source notebook
    holds: public cells and their points, hidden cells and theirs, the written questions?"""
    import nbformat
    nb = nbformat.read(ROOT / "assignments" / "source" / "mha" / "mha.ipynb", as_version=4)
    cells = [c.metadata["nbgrader"] for c in nb.cells
             if c.metadata.get("nbgrader", {}).get("grade") or c.metadata.get("nbgrader", {}).get("task")]
    public = [m["points"] for m in cells if m["grade_id"].startswith("test_")]
    hidden = {m["grade_id"]: m["points"] for m in cells if m["grade_id"].startswith("hidden_")}
    written = [m["points"] for m in cells if m.get("task")]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    paragraph = " ".join(readme[readme.index("**Points.** Each part"):].split("\n\n")[0].split())
    assert f"{len(public)} public cells, {sum(public):g} points in all" in paragraph
    assert f"{len(hidden)} hidden cells, {sum(hidden.values()):g} points" in paragraph
    for name, points in hidden.items():
        assert f"`{name}`" in paragraph and f"{points:g})" in paragraph, name
    assert f"The {len(public) + len(hidden)} autograded cells" in paragraph
    assert sum(public) + sum(hidden.values()) == 104
    assert f"{len(written)} × {written[0]:g}" in paragraph.replace("three", "3")
    assert f"({sum(public) + sum(hidden.values()) + sum(written):g} in nbgrader's export)" in paragraph


def test_readme_documents_archive_uploads_in_the_grade_section():
    """Does the README's SUBMISSION paragraph say that archives are graded, naming every
    kind autograder/archives.py reads?"""
    from autograder import archives
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    paragraph = readme[readme.index("SUBMISSION is a"):].split("\n\n")[0]
    for suffix in (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz"):
        assert suffix in archives.SUFFIXES and f"`{suffix}`" in paragraph.replace("/", "` `"), suffix
    assert "64 MiB" in paragraph and f"{archives.MAX_ENTRIES:,} entries" in paragraph


def test_extending_names_only_files_and_names_that_exist():
    """Does docs/extending.md cover the four extension points, and does every repository
    file it names exist, and every `module.NAME` it names exist in that module?"""
    import importlib
    text = (DOCS / "extending.md").read_text(encoding="utf-8")
    for heading in ("## A check", "## A mistake code", "## A probe", "## An output format"):
        assert heading in text
    paths = set(re.findall(r"`((?:autograder|assignments|tests|docs)/[\w/.]+\.(?:py|toml|md|json|ipynb))", text))
    assert len(paths) >= 20
    assert [p for p in sorted(paths) if not (ROOT / p).is_file()] == []
    named = {"checks.MODULES": "autograder.checks", "checks.load_all": "autograder.checks",
             "checks.KINDS": "autograder.checks", "checks.INSTRUMENTS": "autograder.checks",
             "submission.API": "autograder.submission"}
    for dotted, module in named.items():
        assert f"`{dotted}`" in text or dotted in text
        assert hasattr(importlib.import_module(module), dotted.split(".")[1]), dotted
    for module, names in {"autograder.writers": ("MODULES",), "autograder.sandbox.probes": ("PROBES",),
                          "autograder.sandbox.results": ("FORMS",), "autograder.api": ("CARRIED_PROBES",),
                          "autograder.parts": ("AREAS",),
                          "autograder.diagnoses.values": ("register", "function_or_forward"),
                          "autograder.diagnoses.compose": ("MODULE", "_function_candidates"),
                          "autograder.diagnoses": ("diagnosis",)}.items():
        for name in names:
            assert re.search(rf"`@?{name}[`(]", text), name
            assert hasattr(importlib.import_module(module), name), name
    import sys
    sys.path.insert(0, str(ROOT / "tests"))
    import mistakes
    assert "`MISTAKES`" in text and "`ALSO_ALLOWED`" in text and mistakes.ALSO_ALLOWED
    tests = {"tests/test_core.py": ("test_default_rubric_totals_100", "test_reference_gets_full_marks",
                                    "test_mistake_is_diagnosed_with_its_code"),
             "tests/test_cli.py": ("test_format_choices_come_from_the_writers_registry",)}
    for path, functions in tests.items():
        source = (ROOT / path).read_text(encoding="utf-8")
        assert all(f"def {f}(" in source and f in text for f in functions)


def test_one_grader_fixture():
    """The tests' graders come from tests/conftest.py's fixtures (docs/extending.md): no test
    module defines its own `grader` fixture."""
    copies = [p.name for p in sorted((ROOT / "tests").glob("test_*.py"))
              if re.search(r"^def grader\(", p.read_text(encoding="utf-8"), re.M)]
    assert copies == []
    assert "def make_grader(" in (ROOT / "tests" / "conftest.py").read_text(encoding="utf-8")
    assert "`make_grader(**options)`" in (DOCS / "extending.md").read_text(encoding="utf-8")
