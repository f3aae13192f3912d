"""One definition of public: the four views a student or a CI job gets before the deadline
run the same checks with the same points (``autograder.public``), and give the same points.

* the kit's ``pytest`` (one test per public check, pass or fail, worth that check's points;
  a function built on other parts tested with the reference's answers for those parts);
* ``grade --public-only`` (the checks with ``hidden=False``);
* nbgrader's public test cells (``test_<api>``, scored from the autograder's full report
  as ``autograder.nbgrader_plugin`` scores them, with the notebook's cell points);
* the GitHub Classroom workflow (its ``grade.py`` and ``points.json``).

Compared on the reference, the stub and five single mistakes: per public check, the points
earned in pytest, Classroom and ``--public-only``; per function, those and nbgrader's public
cell. Error carried forward is no exception: the kit's tests of the module and of
``attention_pool`` run with their parts answered by the reference's recorded answers.

One difference is by design, and only one: a check the grader fails but charges nothing
because a named mistake it diagnosed is already charged elsewhere (``autograder.prices``,
"charged once at its price"). Telling that the module's failure is the same mistake as
``attention_pool``'s needs the grader's simulation of named mistakes, which the kit does
not have; there the kit's test may fail and lose the check's points (``pool.no-scale``: the
module, which computes its own scores, fails ``MultiHeadAttention.values`` in the kit).
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
    """{submission: {"checks": {view: {check: earned}}, "nbgrader": {api: (earned, possible)},
    "priced": {check the grader failed but charged nothing: a mistake charged elsewhere}}}."""
    base, kit, template, points = built
    rubric = scoring.load_rubric()
    maxima = cell_points(SOURCE_NOTEBOOK)
    released = cell_points(kit / "mha.ipynb")
    by_test = {public.test_name(c): c for c in public.check_points(rubric)}
    public_grader = api.Grader(public_only=True, seed=SEED, device="cpu")
    full_grader = api.Grader(seed=SEED, device="cpu")
    found = {}
    try:
        for name in SUBMISSIONS:
            tmp = base / name
            tmp.mkdir()
            path = tmp / "mha.py"
            path.write_text(submission_source(name), encoding="utf-8")
            checks = {}
            # 1. the kit's pytest
            copy = tmp / "kit"
            shutil.copytree(kit, copy)
            shutil.copy(path, copy / "mha.py")
            outcomes, log = run_pytest(copy, tmp)
            assert set(outcomes) == set(by_test), log
            checks["pytest"] = {c: points[t] if outcomes[t][0] == "passed" else 0.0
                                for t, c in by_test.items()}
            # 2. grade --public-only
            report = public_grader.grade(path)
            checks["public-only"] = {r.name: r.score for r in report.results}
            priced = {r.name for r in report.results
                      if r.status.value == "failed" and "charged once at its price" in r.feedback}
            # 3. GitHub Classroom
            shutil.copy(path, template / "mha.py")
            result = classroom_result(template, tmp)
            checks["classroom"] = {by_test["test_" + t["name"]]: float(t["score"]) for t in result["tests"]}
            # 4. nbgrader's public cells, from the full report
            scores = parts.cell_scores(full_grader.grade(path), maxima, full_grader.rubric.points)
            nbgrader = {a: (scores.get(parts.PUBLIC + a, 0.0), released.get(parts.PUBLIC + a, 0.0))
                        for a in public.points(rubric)}
            found[name] = {"checks": checks, "nbgrader": nbgrader, "priced": priced}
    finally:
        public_grader.close()
        full_grader.close()
    return found


def per_api(earned: dict[str, float]) -> dict[str, float]:
    total = {a: 0.0 for a in public.points(scoring.load_rubric())}
    for check, value in earned.items():
        total[public.api_of(check)] += value
    return total


def test_public_points_are_the_same_in_all_four_views(built):
    """Is each public check worth its rubric points in pytest and Classroom, each function the
    same in nbgrader's public cell, and do they add up to the public checks' rubric points?"""
    rubric = scoring.load_rubric()
    expected = public.check_points(rubric)
    assert sum(expected.values()) == sum(rubric.points[c.name] for c in public.checks(rubric)) == 71
    assert built[3] == {public.test_name(c): p for c, p in expected.items()}
    released = cell_points(built[1] / "mha.ipynb")
    assert {a: released[parts.PUBLIC + a] for a in public.points(rubric)} == per_api(expected)


@pytest.mark.parametrize("name", SUBMISSIONS)
def test_the_four_views_give_the_same_points(views, name):
    """Per public check, the same points earned in pytest, Classroom and --public-only; per
    function, the same in nbgrader's public cell; the same total everywhere. The one exception
    (see above): a check the grader charges nothing because its mistake is charged elsewhere."""
    found = views[name]
    checks, priced = found["checks"], found["priced"]
    grader = checks["public-only"]
    assert set(grader) == set(checks["pytest"]) == set(checks["classroom"])
    assert checks["pytest"] == checks["classroom"], name
    for check, earned in grader.items():
        if check in priced:
            assert checks["pytest"][check] in (0.0, earned), (name, check)
        else:
            assert checks["pytest"][check] == earned, (name, check, checks["pytest"][check], earned)
    nbgrader = {a: earned for a, (earned, _) in found["nbgrader"].items()}
    assert nbgrader == per_api(grader), (name, nbgrader, per_api(grader))
    totals = {view: sum(earned.values()) for view, earned in checks.items()}
    totals["nbgrader"] = sum(nbgrader.values())
    if not priced:
        assert len(set(totals.values())) == 1, (name, totals)
    if name == "reference":
        assert totals["pytest"] == 71
    elif name == "stub":
        assert set(totals.values()) == {0}
    else:
        assert 0 < totals["pytest"] < 71, (name, totals)


def test_the_split_bug_scores_the_same_everywhere(views):
    """Does split.no-transpose earn the same total in all four views: everything but
    split_heads.values (the module is right given a correct split_heads)?"""
    found = views["split.no-transpose"]
    rubric = scoring.load_rubric()
    totals = {view: sum(earned.values()) for view, earned in found["checks"].items()}
    totals["nbgrader"] = sum(earned for earned, _ in found["nbgrader"].values())
    assert set(totals.values()) == {71 - rubric.points["split_heads.values"]} == {65}, totals


def test_only_a_mistake_charged_elsewhere_parts_the_views(views):
    """Is pool.no-scale the one submission where the views differ, and only on the module's
    checks the grader charges nothing for (its scores repeat attention_pool's mistake)? (The
    grader also charges attention_pool.masked nothing, the mistake being charged once at
    attention_pool.values; the kit's masked examples do not depend on the scale, so the kit
    gives that check its points too.)"""
    assert {name for name, found in views.items() if found["priced"]} == {"pool.no-scale"}
    found = views["pool.no-scale"]
    assert found["priced"] <= {"attention_pool.masked", "MultiHeadAttention.values",
                               "MultiHeadAttention.masked"}
    differ = {c for c, earned in found["checks"]["pytest"].items()
              if earned != found["checks"]["public-only"][c]}
    assert differ and differ <= found["priced"]
