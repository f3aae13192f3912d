"""Disabling a check in the rubric changes no other check's outcome: the reference keeps
full marks, and a one-part mistake's other checks keep their statuses and points (what a
check gates, what error carried forward and the diagnoses see do not depend on the rubric)."""
from __future__ import annotations

import dataclasses

import pytest

from mistakes import REFERENCE, source

pytestmark = pytest.mark.slow
REF = REFERENCE.read_text(encoding="utf-8")


#: the options of this module's `grader` (tests/conftest.py)
GRADER = {"seed": 9, "device": "cpu"}


def _outcomes(grader, path, disabled: str | None = None) -> dict:
    base = grader.rubric
    if disabled:
        grader.rubric = dataclasses.replace(base, points={**base.points, disabled: 0.0})
    try:
        report = grader.grade(path)
    finally:
        grader.rubric = base
    return {r.name: (r.status.value, r.score) for r in report.results}, report


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("invariance")
    ref = folder / "reference.py"
    ref.write_text(REF, encoding="utf-8")
    split = folder / "split.py"
    split.write_text(source("split.no-transpose"), encoding="utf-8")
    return {"reference": ref, "split": split}


def test_disabling_any_check_keeps_every_other_outcome(grader, files):
    names = [c.name for c in grader.selected() if not c.name.startswith("questions.")]
    base = {k: _outcomes(grader, p) for k, p in files.items()}
    assert base["split"][1].score < base["split"][1].max_score     # the mistake costs
    changed = []
    for name in names:
        for kind, path in files.items():
            outcomes, report = _outcomes(grader, path, name)
            assert name not in outcomes                             # left out of the report
            if kind == "reference":
                assert report.score == report.max_score, (name, report.score)
            # every other check as without the change (scores before any rescaling of
            # skipped points: compare statuses, and points where nothing was skipped)
            before = base[kind][0]
            for other, (status, _) in outcomes.items():
                if before[other][0] != status:
                    changed.append((name, kind, other, before[other][0], status))
    assert changed == []
