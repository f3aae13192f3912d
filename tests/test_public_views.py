"""One definition of public: the four views a student or a CI job gets before the deadline
run the same checks with the same points (``autograder.public``).

* the kit's ``pytest`` (one test per function, pass or fail);
* ``grade --public-only`` (the checks with ``hidden=False``);
* nbgrader's public test cells (``test_<api>``, scored from the autograder's full report
  as ``autograder.nbgrader_plugin`` scores them, with the notebook's cell points);
* the GitHub Classroom workflow (its ``grade.py`` and ``points.json``).

Compared on the reference, the stub and five single mistakes: per function, the same
points at stake and the same verdict (all of them, or none of them).

One difference is by design: error carried forward (rubric ``carry_forward``). Where a
function's own code is right but it calls a wrong part, the grader grades it again with
that part answered by the reference and credits it; the kit has no reference, so its
pytest (and Classroom's) fails that function too. Such a function is compared apart: full
in the grader's views, failed in the kit's, and only beside a part that fails everywhere.
"""
from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import mistakes
from autograder import api, package, parts, public, scoring
from kit_env import run_pytest, student_env

ROOT = Path(__file__).resolve().parent.parent
SOURCE_NOTEBOOK = ROOT / "assignments" / "source" / "mha" / "mha.ipynb"
SEED = 20240607
#: one mistake per kind of public check: values, masks (the empty-row case), heads, raises
MISTAKES = ("split.no-transpose", "mask.zero-len-uniform", "proj.heads-no-permute",
            "shape.no-valueerror", "pool.no-scale")
SUBMISSIONS = ("reference", "stub") + MISTAKES

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("views")
    kit = package.student(base / "kit")
    template = package.classroom(base / "template")
    return base, Path(kit["path"]), Path(template["path"]), kit["points"]


def submission_source(name: str) -> str:
    if name == "reference":
        return (ROOT / "solutions" / "mha.py").read_text(encoding="utf-8")
    if name == "stub":
        return (ROOT / "assignments" / "stub" / "mha.py").read_text(encoding="utf-8")
    return mistakes.source(name)


def cell_points(notebook: Path) -> dict[str, float]:
    nb = nbformat.read(str(notebook), as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"])
            for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")
            and parts.cell_part(c.metadata["nbgrader"]["grade_id"])}


def classroom_result(template: Path, tmp: Path) -> dict:
    """What the workflow hands GitHub Classroom: its own command, in the template."""
    output = tmp / "github-output"
    output.write_text("")
    env = dict(student_env(tmp), GITHUB_OUTPUT=str(output))
    done = subprocess.run([sys.executable, ".github/classroom/grade.py"], cwd=template, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    encoded = output.read_text().strip().removeprefix("result=")
    return json.loads(base64.b64decode(encoded))


@pytest.fixture(scope="module")
def views(built):
    """{submission: {view: {api: (earned, possible)}}}."""
    base, kit, template, _ = built
    rubric = scoring.load_rubric()
    maxima = cell_points(SOURCE_NOTEBOOK)
    released = cell_points(kit / "mha.ipynb")
    public_grader = api.Grader(public_only=True, seed=SEED, device="cpu")
    full_grader = api.Grader(seed=SEED, device="cpu")
    found = {}
    try:
        for name in SUBMISSIONS:
            tmp = base / name
            tmp.mkdir()
            path = tmp / "mha.py"
            path.write_text(submission_source(name), encoding="utf-8")
            views = {}
            # 1. the kit's pytest
            copy = tmp / "kit"
            shutil.copytree(kit, copy)
            shutil.copy(path, copy / "mha.py")
            outcomes, log = run_pytest(copy, tmp)
            views["pytest"] = {a: (p if outcomes[f"test_{a}"][0] == "passed" else 0.0, p)
                               for a, p in public.points(rubric).items()}
            # 2. grade --public-only
            report = public_grader.grade(path)
            # error carried forward, and a named mistake's failures charged once at its price
            # (prices): the graders give points the kit's plain pytest cannot
            views["carried"] = {a: any("error carried forward" in r.feedback or
                                       "charged once at its price" in r.feedback
                                       for r in report.results
                                       if public.api_of(r.name) == a) for a in public.points(rubric)}
            views["public-only"] = {a: (sum(r.score for r in report.results if public.api_of(r.name) == a),
                                        sum(r.max_score for r in report.results if public.api_of(r.name) == a))
                                    for a in public.points(rubric)}
            # 3. nbgrader's public cells, from the full report
            scores = parts.cell_scores(full_grader.grade(path), maxima)
            views["nbgrader"] = {a: (scores.get(parts.PUBLIC + a, 0.0), released.get(parts.PUBLIC + a, 0.0))
                                 for a in public.points(rubric)}
            # 4. GitHub Classroom
            shutil.copy(path, template / "mha.py")
            result = classroom_result(template, tmp)
            views["classroom"] = {t["name"]: (float(t["score"]), float(built[3]["test_" + t["name"]]))
                                  for t in result["tests"]}
            found[name] = views
    finally:
        public_grader.close()
        full_grader.close()
    return found


def test_public_points_are_the_same_in_all_four_views(views, built):
    """Is each function worth the same public points in pytest, --public-only, nbgrader's
    public cell and Classroom, and do they add up to the public checks' rubric points?"""
    rubric = scoring.load_rubric()
    expected = public.points(rubric)
    assert sum(expected.values()) == sum(rubric.points[c.name] for c in public.checks(rubric))
    for name, by_view in views.items():
        for view, per_api in by_view.items():
            if view == "carried":
                continue
            assert {a: possible for a, (_, possible) in per_api.items()} == expected, (name, view)
    assert built[3] == {f"test_{a}": p for a, p in expected.items()}


@pytest.mark.parametrize("name", SUBMISSIONS)
def test_the_four_views_agree(views, name):
    """Per function: full points in every view, or in none (reference: all; stub: none)."""
    by_view = dict(views[name])
    carried = by_view.pop("carried")
    verdicts = {view: {a: earned >= possible > 0 for a, (earned, possible) in per_api.items()}
                for view, per_api in by_view.items()}
    same = {view: {a: v for a, v in verdict.items() if not carried[a]} for view, verdict in verdicts.items()}
    assert len({json.dumps(v, sort_keys=True) for v in same.values()}) == 1, verdicts
    for a in (a for a, c in carried.items() if c):          # error carried forward: see above
        assert verdicts["public-only"][a] and verdicts["nbgrader"][a], (a, verdicts)
        assert not verdicts["pytest"][a] and not verdicts["classroom"][a], (a, verdicts)
        assert not all(same["pytest"].values()), "a carried function needs a wrong part beside it"
    passed = same["pytest"]
    if name == "reference":
        assert all(passed.values())
    elif name == "stub":
        assert not any(passed.values())
    else:
        assert 0 < sum(passed.values()) < len(passed), (name, passed)
