"""The rubric, and turning check outcomes into points. Pure functions, no grading."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from .model import CheckResult, Status

if sys.version_info >= (3, 11):
    import tomllib
else:                                   # pragma: no cover
    import tomli as tomllib

DEFAULT_RUBRIC = Path(__file__).with_name("rubric.toml")
POLICIES = ("rescale", "award", "withhold")


class RubricError(Exception):
    """The rubric file is wrong; the message says where and how to fix it."""


@dataclass(frozen=True)
class Rubric:
    points: dict = field(default_factory=dict)     #: check name -> points (0: not run)
    skipped: str = "rescale"
    forbidden_voids_group: str | None = "mha"
    #: a part's mistake charged once, at its own checks: what is built on it is graded
    #: again with the reference's part in its place (``carry``)
    carry_forward: bool = True
    #: a named mistake's explained failures charged once, at its price (``prices``)
    one_price: bool = True
    prices: dict = field(default_factory=dict)     #: mistake code -> price (else its home's points)
    path: str = str(DEFAULT_RUBRIC)

    def enabled(self, name: str) -> bool:
        return self.points.get(name, 0) > 0


def load_rubric(path=None, known: set[str] | None = None) -> Rubric:
    path = Path(path) if path else DEFAULT_RUBRIC
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise RubricError(f"cannot read the rubric {path}: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise RubricError(f"the rubric {path} is not valid TOML: {e}") from None
    points = data.get("points", {})
    if not isinstance(points, dict) or not points:
        raise RubricError(f"the rubric {path} has no [points] table")
    for name, value in points.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise RubricError(f"the rubric {path}: points for {name!r} must be a number >= 0")
    if known is not None:
        unknown = sorted(set(points) - known)
        if unknown:
            raise RubricError(f"the rubric {path} names checks that do not exist: "
                              f"{', '.join(unknown)} (see `python -m autograder checks`)")
    disabled = data.get("disabled", {}).get("checks", [])
    points = {k: (0.0 if k in disabled else float(v)) for k, v in points.items()}
    policy = data.get("policy", {})
    skipped = policy.get("skipped", "rescale")
    if skipped not in POLICIES:
        raise RubricError(f"the rubric {path}: policy.skipped must be one of {', '.join(POLICIES)}")
    carry_forward = policy.get("carry_forward", True)
    if not isinstance(carry_forward, bool):
        raise RubricError(f"the rubric {path}: policy.carry_forward must be true or false")
    one_price = policy.get("one_price", True)
    if not isinstance(one_price, bool):
        raise RubricError(f"the rubric {path}: policy.one_price must be true or false")
    prices = data.get("prices", {})
    if not isinstance(prices, dict):
        raise RubricError(f"the rubric {path}: [prices] must be a table of code = points")
    from .prices import HOME
    for code, value in prices.items():
        if code not in HOME:
            raise RubricError(f"the rubric {path}: [prices] names {code!r}, which is not a "
                              f"priced mistake code (see docs/mistakes.md, 'Prices')")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise RubricError(f"the rubric {path}: the price of {code!r} must be a number >= 0")
    return Rubric(points=points, skipped=skipped,
                  forbidden_voids_group=policy.get("forbidden_voids_group") or None,
                  carry_forward=carry_forward, one_price=one_price,
                  prices={k: float(v) for k, v in prices.items()}, path=str(path))


def score(results: list[CheckResult], rubric: Rubric, *, forbidden: bool = False
          ) -> tuple[list[CheckResult], list[str]]:
    """Apply the rubric's policies; returns the final results and notes for the report.

    ``forbidden``: the submission uses a built-in attention the SPEC forbids (named in its
    code, or reached or called while it ran).
    """
    notes = []
    results = list(results)
    void = rubric.forbidden_voids_group
    if void and forbidden:
        results = [replace(r, score=0.0, status=Status.FAILED,
                           feedback=(r.feedback + " " if r.feedback else "")
                           + "(0 points: the module calls a forbidden built-in attention)")
                   if r.group == void and r.score > 0 else r for r in results]
        notes.append(f"every '{void}' check scores 0: the module uses a forbidden built-in")
    skipped = [r for r in results if r.status is Status.SKIPPED]
    if skipped and rubric.skipped == "award":
        results = [replace(r, score=r.max_score) if r.status is Status.SKIPPED else r for r in results]
        notes.append(f"{len(skipped)} skipped check(s) awarded their points (rubric policy 'award')")
    elif skipped and rubric.skipped == "rescale":
        total = sum(r.max_score for r in results)
        kept = total - sum(r.max_score for r in skipped)
        factor = total / kept if kept else 0.0
        results = [replace(r, score=0.0, max_score=0.0) if r.status is Status.SKIPPED else
                   replace(r, score=r.score * factor, max_score=r.max_score * factor)
                   for r in results]
        notes.append(f"{len(skipped)} check(s) skipped ({', '.join(r.name for r in skipped)}); "
                     f"the other checks were scaled by {factor:.4f} so the total stays {total:g} "
                     "(rubric policy 'rescale')")
    return results, notes
