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
#: who is asked the notebook's numeric questions: "notebook" (a .py upload is graded out of
#: the other checks' points) or "every" (a .py upload is reported as not answering them, 0
#: points, so every upload is graded out of the same total)
QUESTIONS = ("notebook", "every")


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
    questions: str = "notebook"                    #: one of QUESTIONS
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
    questions = policy.get("questions", "notebook")
    if questions not in QUESTIONS:
        raise RubricError(f"the rubric {path}: policy.questions must be one of "
                          f"{', '.join(QUESTIONS)}")
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
                  carry_forward=carry_forward, questions=questions, one_price=one_price,
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
        ran = [r for r in results if r.status is not Status.SKIPPED]
        shares = iter(whole_shares([r.max_score for r in ran], total))
        results = [replace(r, score=0.0, max_score=0.0) if r.status is Status.SKIPPED else
                   _rescaled(r, next(shares)) for r in results]
        notes.append(f"{len(skipped)} check(s) skipped ({', '.join(r.name for r in skipped)}); "
                     f"their points were shared out over the other checks in whole points, "
                     f"in proportion to their points, so the total stays {total:g} "
                     "(rubric policy 'rescale')")
    return results, notes


def _rescaled(r: CheckResult, points: float) -> CheckResult:
    earned = points * r.score / r.max_score if r.max_score else 0.0
    return replace(r, score=earned, max_score=points)


def whole_shares(weights: list[float], total: float) -> list[float]:
    """``total`` shared out in proportion to ``weights``, in whole points where the total
    and every weight are whole (the largest-remainder method: each share rounded down, then
    the points left over go one each to the largest remainders, ties to the earlier
    weight), else exactly in proportion. The shares always add up to ``total``."""
    kept = sum(weights)
    if not kept:
        return [0.0] * len(weights)
    exact = [w * total / kept for w in weights]
    if not (float(total).is_integer() and all(float(w).is_integer() for w in weights)):
        return exact
    shares = [int(x + 1e-9) for x in exact]
    left = int(round(total)) - sum(shares)
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - shares[i]), i))
    for i in order[:left]:
        shares[i] += 1
    return [float(x) for x in shares]
