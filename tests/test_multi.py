"""Submissions with several mistakes, written in the styles of public code (issue 11).

Each file in submissions/multi/ names, in its ``# CODES:`` header, exactly the TAXONOMY codes
of the mistakes it holds (none for the correct files). Correct files must get every point and
no code; buggy ones must lose points; no file may get a code its header does not name. That
every file gets all its codes is the compositional diagnosis (``diagnoses/compose.py``); the
one file it does not explain yet is marked, with the reason.
``python tests/multi_report.py`` prints the same comparison as a table.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from autograder.api import Grader

import multi_report

FILES = multi_report.fixtures()
CORRECT = [p for p in FILES if not multi_report.header(p)[0]]
BUGGY = [p for p in FILES if multi_report.header(p)[0]]
DOCS = Path(__file__).resolve().parent.parent / "docs" / "mistakes.md"


@pytest.fixture(scope="module")
def grade(make_grader):
    """grade(path) -> Report, through one CPU grader of a fixed seed, each file graded once."""
    grader = make_grader(seed=1, device="cpu")
    reports = {}

    def run(path):
        if path not in reports:
            reports[path] = grader.grade(path)
        return reports[path]
    return run


def codes(report) -> set[str]:
    return {d.code for d in report.diagnoses}


def test_the_fixtures_are_as_the_issue_asks():
    """At least ten files of 2-4 mistakes and three correct ones, each with a STYLE line, and
    every header code one of the project's documented codes?"""
    documented = set(re.findall(r"^\| `([a-z]+\.[a-z0-9-]+)` \|", DOCS.read_text(encoding="utf-8"), re.M))
    assert len(documented) > 30
    assert len(BUGGY) >= 10 and len(CORRECT) >= 3
    for path in FILES:
        expected, style = multi_report.header(path)
        assert style, path.name
        assert expected <= documented, (path.name, expected - documented)
        assert not expected or 2 <= len(expected) <= 4, path.name


@pytest.mark.parametrize("path", CORRECT, ids=lambda p: p.stem)
def test_correct_files_get_full_marks_and_no_code(grade, path):
    """Is correct code in unusual real-code styles given 100 and no diagnosis?"""
    report = grade(path)
    assert report.score == pytest.approx(100.0)
    assert not codes(report), sorted(codes(report))


@pytest.mark.parametrize("path", BUGGY, ids=lambda p: p.stem)
def test_multi_mistake_files_lose_points(grade, path):
    """Does every file with mistakes score below 100?"""
    assert grade(path).score < 100


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_no_code_that_the_file_does_not_hold(grade, path):
    """Is every code the grader names one of the file's own mistakes (no false codes)?"""
    expected, _ = multi_report.header(path)
    assert codes(grade(path)) <= expected, sorted(codes(grade(path)) - expected)


@pytest.mark.parametrize("path", BUGGY, ids=lambda p: p.stem)
def test_every_file_gets_exactly_its_codes(grade, path):
    """Does each file with several mistakes get each of its codes, and no other?"""
    expected, _ = multi_report.header(path)
    assert codes(grade(path)) == expected


@pytest.mark.parametrize("name", ["nanogpt_view", "annotated_clones_fill", "timm_stacked_qkv"])
def test_the_same_file_gets_the_same_codes_and_score_under_ten_seeds(name):
    """Are the diagnoses (and the score, to 0.01) independent of the run's seed?"""
    path = next(p for p in FILES if p.stem == name)
    g = Grader(seed=1)
    try:
        seen = set()
        for seed in range(1, 11):
            g.seed = seed
            report = g.grade(path)
            seen.add((tuple(sorted(d.code for d in report.diagnoses)), round(report.score, 2)))
    finally:
        g.close()
    assert len(seen) == 1, seen


@pytest.mark.slow
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_a_file_graded_as_a_notebook_cell_gets_what_it_gets_as_a_py_file(grade, path, tmp_path):
    """Is each real-style file, pasted into the graded cell of a notebook (as `bench --class
    realistic` does), given the score and the codes its .py gets? (A correct file once got
    0 there: a line beginning with % inside a statement was taken for an IPython magic.)"""
    import nbformat

    from autograder import bench
    assert FILES == sorted(bench.REALISTIC.glob("*.py"))          # the bench's order
    kind, code = bench.realistic()(FILES.index(path))
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(code, metadata={"nbgrader": {
        "solution": True, "grade": False, "grade_id": "mha-code", "locked": False,
        "schema_version": 3}})]
    cell = tmp_path / "mha.ipynb"
    nbformat.write(notebook, cell)
    as_py, as_cell = grade(path), grade(cell)
    assert (as_cell.score, codes(as_cell)) == (pytest.approx(as_py.score), codes(as_py))
    assert kind == ("mistaken" if multi_report.header(path)[0] else "correct")
