"""The notebook's parts, and how a Report's points are shared out over a part's cells.

The nbgrader notebook has one *part* per API name, plus ``conventions`` for the checks that
span the whole API (``functions.pure``, ``cost.*``, ``device.*``, ``precision.*``) and
``questions`` for the numeric questions (``questions.*``). A part
owns the rubric points of its checks and is graded by up to two autograded cells:

* ``test_<part>``: the public test cell, worth the narrative's points for it (none for
  ``conventions`` and ``questions``);
* ``hidden_<part>``: the hidden test cell, worth the rest of the part's rubric points.

Both cells are scored from the autograder's report, never from the student's kernel
(``autograder.nbgrader_plugin``). Per part, the two cells together get the fraction of the
part's points that the report gives: with nothing skipped that is exactly the report's
points for the part. The public cell follows the part's public checks (``hidden=False``)
when they carry at least its points, and the part as a whole otherwise.

A skipped check (``device.cuda`` without CUDA) is where nbgrader and the report can differ:
the rubric's "rescale" scales every other check, while an nbgrader cell has fixed points,
so here a part's cells count the fraction of the part's checks that ran. Pure functions,
no nbgrader and no torch: the build, the plugin and ``audit`` all use them.
"""
from __future__ import annotations

from .submission import API

CONVENTIONS = "conventions"
QUESTIONS = "questions"               #: the numeric questions (``questions.*``): a hidden cell only
PARTS = API + (CONVENTIONS, QUESTIONS)   #: every part; the notebook gives them their order
NO_PUBLIC_CELL = (CONVENTIONS, QUESTIONS)
PUBLIC, HIDDEN = "test_", "hidden_"   #: grade_id prefixes of a part's two autograded cells
#: The contract's dependency graph: a part -> the parts it is built from, which error carried
#: forward may answer with the reference's (the module on its six parts; attention_pool on
#: masked_softmax). Nothing else is built on another part.
BUILT_ON = {"MultiHeadAttention": ("project", "project_heads", "split_heads", "concat_heads",
                                   "masked_softmax", "attention_pool"),
            "attention_pool": ("masked_softmax",)}
#: Diagnosis code area -> check groups where that kind of mistake shows (TAXONOMY areas)
AREAS = {"shape": ("shape",), "proj": ("project", "mha"), "split": ("split",),
         "concat": ("concat",), "pool": ("pool",), "mask": ("softmax", "pool", "mha"),
         "module": ("mha",), "heads": ("heads",), "cost": ("cost",), "device": ("device",),
         "api": ("api",)}


def part_of(check: str, declared: str = "") -> str:
    """The part a check belongs to, as the check declares it (``Check.part``); a name the
    registry does not know (an older report's) goes by the part its result ``declared``
    (``CheckResult.part``), else ``conventions``. Never read from the name."""
    from .checks import load_all
    known = load_all().get(check)
    if known is not None:
        return known.part
    return declared if declared in PARTS else CONVENTIONS


def result_part(r) -> str:
    """``part_of`` a check's result (a CheckResult, or a report's JSON entry)."""
    if isinstance(r, dict):
        return part_of(str(r.get("name", "")), str(r.get("part", "")))
    return part_of(r.name, r.part)


def cell_part(grade_id: str) -> tuple[str, bool] | None:
    """(part, is_public) of one of our autograded cells; None for any other grade_id."""
    for prefix, public in ((PUBLIC, True), (HIDDEN, False)):
        if grade_id.startswith(prefix) and grade_id[len(prefix):] in PARTS:
            part = grade_id[len(prefix):]
            return None if public and part in NO_PUBLIC_CELL else (part, public)
    return None


def points(rubric) -> dict[str, float]:
    """Rubric points per part, for the parts that have any."""
    total: dict[str, float] = {}
    for name, value in rubric.points.items():
        if value > 0:
            total[part_of(name)] = total.get(part_of(name), 0.0) + value
    return {part: total[part] for part in PARTS if part in total}


def _fraction(results) -> tuple[float, float]:
    """(earned / possible, possible) over some results; a part with nothing that could
    run here (every check skipped) keeps its points, as the rubric's rescale does overall."""
    possible = sum(r.max_score for r in results)
    earned = sum(r.score for r in results)
    return (min(1.0, earned / possible) if possible > 0 else 1.0), possible


def _weighted(results, points: dict[str, float]) -> float:
    """The fraction earned over some results, each weighing its rubric points (not the
    points a rescale shared out in whole points, which weigh a part's checks unevenly)."""
    ran = [r for r in results if r.max_score > 0 and points.get(r.name, 0) > 0]
    possible = sum(points[r.name] for r in ran)
    return min(1.0, sum(points[r.name] * r.score / r.max_score for r in ran) / possible) \
        if possible > 0 else 1.0


def cell_scores(report, maxima: dict[str, float], points: dict[str, float] | None = None) -> dict[str, float]:
    """Score of each autograded cell (grade_id -> points), given each cell's points; with the
    rubric's ``points``, the public cell weighs its checks by them, so that it gives what
    ``grade --public-only`` gives those checks even where a skipped check's points were
    shared out over the others (rubric policy "rescale")."""
    by_part: dict[str, list] = {}
    for r in report.results:
        by_part.setdefault(result_part(r), []).append(r)
    scores = {}
    for part in PARTS:
        public_id, hidden_id = PUBLIC + part, HIDDEN + part
        p, h = maxima.get(public_id, 0.0), maxima.get(hidden_id, 0.0)
        if not (public_id in maxima or hidden_id in maxima):
            continue
        results = by_part.get(part, [])
        whole, possible = _fraction(results)
        public, public_possible = _fraction([r for r in results if not r.hidden])
        if public_possible <= 0 or p > (p + h) * public_possible / possible:
            public = whole                # the public checks cannot carry the public cell
        elif points is not None:
            public = _weighted([r for r in results if not r.hidden], points)
        share = (p + h) * whole
        public_score = p * public
        scores[public_id] = round(public_score, 4)
        scores[hidden_id] = round(min(h, max(0.0, share - public_score)), 4)
    return {k: v for k, v in scores.items() if k in maxima}


def diagnosis_parts(report, order: list[str]) -> dict[str, list]:
    """Part -> the diagnoses to show in its hidden cell: each diagnosis goes to the first
    part (in notebook ``order``) that lost points on a check where its kind of mistake
    shows, else to the first part that lost points, else to the last part."""
    lost = [part for part in order
            if any(r.status.value in ("failed", "error") and result_part(r) == part
                   for r in report.results)]
    placed: dict[str, list] = {}
    for d in report.diagnoses:
        groups = AREAS.get(d.code.split(".")[0], ())
        fitting = [part for part in lost if any(
            result_part(r) == part and r.group in groups and r.status.value in ("failed", "error")
            for r in report.results)]
        target = (fitting or lost or order[-1:] or [CONVENTIONS])[0]
        placed.setdefault(target, []).append(d)
    return placed
