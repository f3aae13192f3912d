"""The fields of Gradescope's results.json, as its autograder specification lists them.

Used by test_writers.py and test_package.py. ``problems(results)`` returns what is wrong
with a results object: an unknown key, a value of the wrong type, a word outside the
allowed ones. Gradescope ignores nothing silently that it documents, so neither do we.
"""
from __future__ import annotations

import numbers

VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}
FORMATS = {"text", "html", "simple_format", "md", "ansi"}
STATUS = {"passed", "failed"}


def _number(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _string(v):
    return isinstance(v, str)


def _strings(v):
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


TOP = {"score": _number, "execution_time": _number, "output": _string,
       "output_format": FORMATS.__contains__, "test_output_format": FORMATS.__contains__,
       "test_name_format": FORMATS.__contains__, "visibility": VISIBILITY.__contains__,
       "stdout_visibility": VISIBILITY.__contains__, "extra_data": lambda v: isinstance(v, dict),
       "tests": lambda v: isinstance(v, list), "leaderboard": lambda v: isinstance(v, list)}
TEST = {"score": _number, "max_score": _number, "status": STATUS.__contains__, "name": _string,
        "name_format": FORMATS.__contains__, "number": _string, "output": _string,
        "output_format": FORMATS.__contains__, "tags": _strings,
        "visibility": VISIBILITY.__contains__, "extra_data": lambda v: isinstance(v, dict)}


def problems(results: dict) -> list[str]:
    found = _check(results, TOP, "results")
    if "score" not in results and not all("score" in t for t in results.get("tests", [])):
        found.append("a score is needed at the top level or on every test")
    for i, test in enumerate(results.get("tests", [])):
        found += _check(test, TEST, f"tests[{i}]") if isinstance(test, dict) else [f"tests[{i}] is not an object"]
    return found


def _check(obj: dict, fields: dict, where: str) -> list[str]:
    found = [f"{where}: unknown key {key!r}" for key in obj if key not in fields]
    found += [f"{where}.{key} = {obj[key]!r} is not allowed" for key, ok in fields.items()
              if key in obj and not ok(obj[key])]
    return found
