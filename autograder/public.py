"""What "public" means, in one place: the checks with ``hidden=False`` and their rubric points.

Every view a student or a CI job sees before the deadline is derived from this:

* ``python -m autograder grade --public-only`` runs exactly :func:`checks`;
* the student kit's ``test_public.py`` has one test per public check (``<api>.<aspect>`` ->
  ``test_<api>_<aspect>``, :func:`test_name`) whose fixed examples cover what that check
  checks, worth :func:`check_points` ``[check]``; a function built on other parts is tested
  with those parts answered by the reference's recorded answers (error carried forward);
* nbgrader's public test cell of a part (``test_<api>``) is worth the same points
  (``assignments/build.py`` writes them into the notebook);
* GitHub Classroom's ``points.json`` holds the same points per test (``package classroom``).

Pure functions over the registry and a rubric; no torch, no student code.
"""
from __future__ import annotations

from . import checks as registry
from .submission import API


def checks(rubric) -> list:
    """The public checks in force under ``rubric``: ``hidden=False``, enabled, worth points."""
    return [c for c in registry.load_all().values()
            if not c.hidden and rubric.enabled(c.name) and rubric.points.get(c.name, 0) > 0]


def check_points(rubric) -> dict[str, float]:
    """{public check: its rubric points}, in the registry's order."""
    return {c.name: float(rubric.points[c.name]) for c in checks(rubric)}


def test_name(check_name: str) -> str:
    """The kit's pytest test of a public check: ``split_heads.values`` -> ``test_split_heads_values``."""
    return "test_" + check_name.replace(".", "_")


def api_of(check_name: str) -> str | None:
    """The API name a check tests (its declared part: ``split_heads.raises`` ->
    ``split_heads``), None for the checks that span the whole API (``functions.pure``,
    ``cost.*``, ``device.*``) and for a name the registry does not know."""
    known = registry.load_all().get(check_name)
    return known.part if known is not None and known.part in API else None


def points(rubric) -> dict[str, float]:
    """{api: points of its public checks}, for every API name in the order of ``API``
    (0 where a name has none). A public check outside the API names is a contradiction:
    no public test could show it, so it is refused here."""
    total = {name: 0.0 for name in API}
    for c in checks(rubric):
        owner = api_of(c.name)
        if owner is None:
            raise ValueError(f"check {c.name} is public but tests no single API name; "
                             "no public test can show it (make it hidden)")
        total[owner] += float(rubric.points[c.name])
    return total


def by_api(rubric) -> dict[str, list[str]]:
    """{api: the names of its public checks}."""
    names: dict[str, list[str]] = {name: [] for name in API}
    for c in checks(rubric):
        names[api_of(c.name)].append(c.name)
    return names
