"""What one batch result says, for the class report and the LMS files: read once, checked.

``load(OUT)`` reads ``OUT/results`` (written by ``batch``) and returns the results that can
be reported on, each as the plain dict of the JSON plus its ``key``, and a note for each
one that cannot (so that one student's bad data costs that student's entry, never the
page). Beside it, the readings every output of the report shares: a check's outcome
(``blocked`` apart from ``failed``), who a result is, its percent, and why a zero.
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

from .writers.escape import readable


def load(out) -> tuple[list[dict], list[str]]:
    """(usable results, notes on the entries left out), in the order of their keys."""
    folder = Path(out) / "results"
    found, left_out = [], []
    for path in sorted(folder.rglob("*.json")):
        if path.name.startswith("."):
            continue
        key = str(path.relative_to(folder).with_suffix(""))
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            found.append(checked(dict(data, key=key)))
        except Exception as e:      # noqa: BLE001 — e.g. OverflowError: a score of 1e400
            left_out.append(f"{readable(key)}: its result could not be read "
                            f"({type(e).__name__}: {readable(str(e))[:200]}), so it is left out")
    return found, left_out


def checked(result: dict) -> dict:
    """The result, its fields of the types the report uses (numbers finite), or an error."""
    for name in ("score", "max_score"):
        value = float(result.get(name, 0))
        if not math.isfinite(value):
            raise ValueError(f"its {name} is {value}")
        result[name] = value
    checks = result.get("checks", [])
    diagnoses = result.get("diagnoses", [])
    if not isinstance(checks, list) or not isinstance(diagnoses, list):
        raise TypeError("its checks or diagnoses are not lists")
    for c in checks:
        if not isinstance(c["name"], str):
            raise TypeError("a check's name is not text")
        c["score"], c["max_score"] = float(c.get("score", 0)), float(c.get("max_score", 0))
    for d in diagnoses:
        if not isinstance(d["code"], str):
            raise TypeError("a diagnosis's code is not text")
    if not isinstance(result.get("notes", []), list):
        raise TypeError("its notes are not a list")
    return result


def status_of(check: dict) -> str:
    """A check's outcome for the report: its status, or "blocked" where it was not graded
    because a check it requires did not pass (``blocked_by``; older results: the message)."""
    if check.get("blocked_by") or (check.get("status") == "failed" and
                                   str(check.get("feedback", "")).startswith("not graded until")):
        return "blocked"
    return str(check.get("status", "error"))


def who(result: dict) -> str:
    """The student, as text that can be written anywhere (undecodable bytes as U+FFFD)."""
    return readable(result.get("student") or result["key"])


def name_of(result) -> str:
    """``who``, for a result of any shape (a row or note that says it could not be shown)."""
    try:
        return who(result)
    except Exception:               # noqa: BLE001 — its entry says what is wrong
        return readable(result.get("key", "?") if isinstance(result, dict) else "?")


def percent(result: dict) -> float:
    top = result.get("max_score") or 0
    return 100.0 * result.get("score", 0) / top if top else 0.0


def lost(check: dict) -> float:
    return max(0.0, float(check.get("max_score", 0)) - float(check.get("score", 0)))


_POLICY_NOTE = re.compile(r"rubric policy|were scaled by|^sandbox limits in force")


#: the reason of a submission whose every check that ran met the stub's raise
STUB_REASON = "unchanged stub: every function still raises NotImplementedError"
#: what a check's feedback says where the submission's function is still the stub (or a
#: numeric question is still unanswered)
_STUB_FEEDBACK = re.compile(r"not implemented yet|raised NotImplementedError|is not answered yet")


def zero_reason(result: dict) -> str | None:
    """Why a submission scored nothing, in a few words; None where it scored points."""
    if float(result.get("score", 0)) > 0:
        return None
    notes = [str(n) for n in result.get("notes", []) if not _POLICY_NOTE.search(str(n))]
    for note in notes:
        first = note.splitlines()[0] if note else ""
        if first.startswith("syntax error"):
            return first.split(". The line:")[0]
        if " is empty" in first:
            return "empty file: it defines none of the functions"
        if "unchanged stub" in first:
            return first
    checks = [c for c in result.get("checks", []) if status_of(c) not in ("skipped", "blocked")]
    if checks and all(c.get("status") == "error" and _STUB_FEEDBACK.search(str(c.get("feedback", "")))
                      for c in checks):
        return STUB_REASON
    if notes:
        return notes[0].splitlines()[0][:200] if notes[0] else "no check passed"
    errors = Counter(str(c.get("feedback", "")).split(":")[0][:120] for c in checks
                     if c.get("status") == "error")
    if errors and sum(errors.values()) == len(checks):
        return "every check raised an error, most often: " + errors.most_common(1)[0][0]
    return "no check passed"
