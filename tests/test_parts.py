"""The notebook's parts: points per cell, scores from a report, and the outputs nbgrader reads.

Fast, without a kernel or a sandbox: reports are built by hand. ``test_nbgrader.py`` runs
the same code end to end through nbgrader.
"""
from __future__ import annotations

import nbformat
import pytest
from nbformat.v4 import new_output

from assignments import build, narrative
from autograder import parts, scoring
from autograder.audit import restore_locked
from autograder.model import CheckResult, Diagnosis, Report, Status

RUBRIC = scoring.load_rubric()


def result(name, status="passed", points=None, hidden=True, scale=1.0):
    points = RUBRIC.points[name] * scale if points is None else points
    return CheckResult(name, name.split(".")[0], Status(status),
                       points if status == "passed" else 0.0, points, "feedback for " + name, hidden)


def report(*results, diagnoses=()):
    return Report("mha.ipynb", tuple(results), tuple(diagnoses))


@pytest.fixture(scope="module")
def notebook():
    return nbformat.read(build.ROOT / build.NOTEBOOK, as_version=4)


def maxima_of(nb) -> dict[str, float]:
    return {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"])
            for c in nb.cells if parts.cell_part(c.metadata.get("nbgrader", {}).get("grade_id", ""))}


def test_every_check_belongs_to_one_part_and_the_parts_hold_the_rubric():
    """Does every check of the rubric fall in a part, the parts' points summing to the rubric's?"""
    assert all(parts.part_of(name) in parts.PARTS for name in RUBRIC.points)
    assert parts.part_of("split_heads.values") == "split_heads"
    assert parts.part_of("cost.flops") == parts.part_of("functions.pure") == parts.CONVENTIONS
    assert sum(parts.points(RUBRIC).values()) == pytest.approx(sum(RUBRIC.points.values()))


def test_a_checks_part_is_declared_never_read_from_its_name():
    """A name the registry does not know (an older report's) goes by the part its result
    declares, else conventions: never by what its name starts with."""
    from autograder.model import CheckResult, Status
    assert parts.part_of("split_heads.renamed") == parts.CONVENTIONS
    assert parts.part_of("split_heads.renamed", "concat_heads") == "concat_heads"
    assert parts.part_of("split_heads.renamed", "no-such-part") == parts.CONVENTIONS
    old = CheckResult("split_heads.renamed", "split", Status.FAILED, 0.0, 2.0, part="concat_heads")
    assert parts.result_part(old) == "concat_heads"
    assert parts.result_part({"name": "split_heads.renamed", "part": "project"}) == "project"
    assert parts.result_part({"name": "split_heads.values"}) == "split_heads"   # the registry's
    from autograder import public
    assert public.api_of("split_heads.raises") == "split_heads"
    assert public.api_of("split_heads.renamed") is None and public.api_of("cost.flops") is None


def test_the_notebooks_test_cells_hold_each_parts_rubric_points(notebook):
    """Do a part's public and hidden test cells together carry the rubric points of its checks,
    the public cell the points of its public checks (autograder.public), and has every part
    whose checks are not all public a hidden cell?"""
    from autograder import public as public_checks
    maxima = maxima_of(notebook)
    public = public_checks.points(RUBRIC)
    for part, points in parts.points(RUBRIC).items():
        assert maxima.get(parts.PUBLIC + part, 0) == public.get(part, 0)
        assert (parts.HIDDEN + part in maxima) == (points > public.get(part, 0)), part
        assert maxima.get(parts.PUBLIC + part, 0) + maxima.get(parts.HIDDEN + part, 0) == points, part
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in notebook.cells}
    for part in parts.PARTS:
        if parts.HIDDEN + part not in cells:
            continue
        source = cells[parts.HIDDEN + part].source
        assert source.count(build.HIDDEN_BEGIN) == source.count(build.HIDDEN_END) == 1
        assert cells[parts.HIDDEN + part].metadata["nbgrader"]["locked"]


def test_full_marks_and_no_marks_fill_and_empty_every_cell(notebook):
    """Does a report with every check passed give each cell its points, and none give 0?"""
    maxima = maxima_of(notebook)
    every = [result(name) for name in RUBRIC.points]
    assert parts.cell_scores(report(*every), maxima) == pytest.approx(maxima)
    failed = [result(name, "failed") for name in RUBRIC.points]
    assert set(parts.cell_scores(report(*failed), maxima).values()) == {0.0}


def test_public_cell_follows_the_public_checks_and_the_part_keeps_its_fraction():
    """With the public check passed and the hidden one failed, does the public cell get its
    points and the hidden cell the rest of the part's fraction (and the other way round)?"""
    maxima = {"test_split_heads": 2.0, "hidden_split_heads": 6.0}
    values, raises = "split_heads.values", "split_heads.raises"        # 6 public, 2 hidden
    scores = parts.cell_scores(report(result(values, hidden=False), result(raises, "failed")), maxima)
    assert scores == {"test_split_heads": 2.0, "hidden_split_heads": 4.0}
    scores = parts.cell_scores(report(result(values, "failed", hidden=False), result(raises)), maxima)
    assert scores == {"test_split_heads": 0.0, "hidden_split_heads": 2.0}


def test_public_cell_of_an_all_hidden_part_follows_the_whole_part():
    """When a part has no public check, does its public cell get the part's fraction?"""
    maxima = {"test_project_heads": 2.0, "hidden_project_heads": 2.0}
    scores = parts.cell_scores(report(result("project_heads.values", "failed")), maxima)
    assert scores == {"test_project_heads": 0.0, "hidden_project_heads": 0.0}
    scores = parts.cell_scores(report(result("project_heads.values")), maxima)
    assert scores == {"test_project_heads": 2.0, "hidden_project_heads": 2.0}


def test_a_skipped_check_leaves_the_fraction_of_the_checks_that_ran():
    """Rescaled results (device.cuda skipped): does a cell count the fraction of its part's
    checks that ran, never more than its points?"""
    scale = 100 / 98
    rescaled = [result(name, scale=scale) for name in RUBRIC.points if name != "device.cuda"]
    skipped = CheckResult("device.cuda", "device", Status.SKIPPED, 0.0, 0.0, "skipped", True)
    maxima = {"hidden_conventions": 15.0, "test_concat_heads": 2.0, "hidden_concat_heads": 4.0}
    scores = parts.cell_scores(report(*rescaled, skipped), maxima)
    assert scores == {"hidden_conventions": 15.0, "test_concat_heads": 2.0, "hidden_concat_heads": 4.0}
    half = [r if r.name != "cost.params" else result("cost.params", "failed", scale=scale) for r in rescaled]
    assert parts.cell_scores(report(*half, skipped), maxima)["hidden_conventions"] == pytest.approx(15 * 11 / 13)


def test_outputs_replace_whatever_the_kernel_wrote(notebook):
    """Do our cells end with the report's feedback and score only, so that nbgrader's
    determine_grade reads the report's score however the kernel's output was forged?"""
    nbgrader_utils = pytest.importorskip("nbgrader.utils")
    from autograder.nbgrader_plugin import write_outputs
    nb = nbformat.from_dict(notebook)
    maxima = maxima_of(nb)
    for cell in nb.cells:
        if cell.id in maxima:
            cell.outputs = [new_output("stream", name="stderr", text="UserWarning: ..."),
                            new_output("execute_result", data={"text/plain": "1000"}, execution_count=1)]
    results = [result(name, "failed" if name.startswith("split_heads") else "passed",
                      hidden=name not in ("split_heads.values", "project.values")) for name in RUBRIC.points]
    found = Diagnosis("split.no-transpose", "reshape, then transpose(1, 2)")
    scores = write_outputs(nb, report(*results, diagnoses=[found]), maxima)
    for cell in nb.cells:
        if cell.id not in maxima:
            continue
        assert [o.output_type for o in cell.outputs] == ["stream", "execute_result"]
        assert cell.outputs[0].name == "stdout"
        assert nbgrader_utils.determine_grade(cell) == (scores[cell.id], maxima[cell.id])
        # the part's hidden cell shows it; every check of split_heads is public: its public cell
        shown_in = "hidden_split_heads" if "hidden_split_heads" in maxima else "test_split_heads"
        assert ("split.no-transpose" in cell.outputs[0].text) == (cell.id == shown_in)
    assert scores["test_split_heads"] == scores.get("hidden_split_heads", 0.0) == 0.0
    assert sum(scores.values()) == pytest.approx(104 - 8)      # 100 + the numeric questions


def test_audit_puts_back_the_locked_cells_and_keeps_the_answers(notebook):
    """Does the audit's re-grade see the course's locked cells, not a student's edits of them,
    and the student's own answers?"""
    nb = nbformat.from_dict(notebook)
    cells = {c.id: c for c in nb.cells}
    cells["imports"].source = "import torch\ntorch.allclose = lambda *a, **k: True"
    cells["imports"].metadata["nbgrader"]["solution"] = True
    cells["split_heads"].source = "def split_heads(X, num_heads):\n    return X"
    twin = nbformat.from_dict(cells["concat_heads"])
    twin.id, twin.source = "twin", "def concat_heads(X):\n    return X"
    nb.cells.insert(0, twin)                      # nbgrader keeps the last of two same grade_ids
    restored = restore_locked(nb, notebook)
    assert restored.cells[0].metadata["nbgrader"] == {}
    restored = {c.id: c for c in restored.cells}
    original = {c.id: c for c in notebook.cells}
    assert restored["imports"].source == original["imports"].source
    assert restored["imports"].metadata["nbgrader"] == original["imports"].metadata["nbgrader"]
    assert restored["split_heads"].source == "def split_heads(X, num_heads):\n    return X"
    assert restored["concat_heads"].metadata["nbgrader"]["solution"]
