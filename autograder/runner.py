"""Running checks: one check's outcome, modelled on pytest's CallInfo.from_call.

Body returned -> passed; CheckFailed -> failed; StudentError (the submission raised,
timed out, crashed or lacks the name) -> error; SkipCheck -> skipped.

Any other exception comes from judging the submission's data, and the boundary
(``sandbox.results``) and the comparisons (``compare``) are built so that none can: such
an exception is a bug of the grader, but one this submission's answer provoked. It must
neither crash the grading of the other checks (nor a batch, nor the report) nor pass for
the student's mistake: the check errs with "the grader could not judge this result", and
the instructor gets a note naming the check, the exception and where it was raised (in
the report's notes and, with the traceback, on the ``autograder`` logger). The grader's
own failures (``GraderError``: the zygote died) and interrupts still propagate.
"""
from __future__ import annotations

import logging
import traceback
from pathlib import Path

from .compare import Blocked, CheckFailed, SkipCheck
from .model import Check, CheckResult, Status
from .sandbox.host import GraderError, StudentError, sanitize

FEEDBACK_LIMIT = 1500
LOG = logging.getLogger("autograder")
PROJECT = Path(__file__).resolve().parent.parent


def run_check(check: Check, probe, points: float, passed: set[str], has_cuda: bool) -> CheckResult:
    def result(status: Status, feedback: str = "", blocked_by=()) -> CheckResult:
        earned = points if status is Status.PASSED else 0.0
        return CheckResult(check.name, check.group, status, earned, points,
                           sanitize(feedback, FEEDBACK_LIMIT), check.hidden, tuple(blocked_by),
                           check.part)

    if "cuda" in check.needs and not has_cuda:
        return result(Status.SKIPPED, "skipped: the grading machine has no CUDA device")
    missing = [r for r in check.requires if r not in passed]
    if missing:
        return result(Status.FAILED, f"not graded until {', '.join(missing)} passes: this check "
                      "only counts for an implementation that otherwise works", blocked_by=missing)
    try:
        check.body(probe)
    except Blocked as e:
        return result(Status.FAILED, str(e), blocked_by=e.by)
    except CheckFailed as e:
        return result(Status.FAILED, str(e))
    except StudentError as e:
        if e.not_implemented:
            return result(Status.ERROR, f"not implemented yet ({e})")
        return result(Status.ERROR, str(e))
    except SkipCheck as e:
        return result(Status.SKIPPED, f"skipped: {e}")
    except GraderError:
        raise
    except Exception as e:                       # noqa: BLE001 — the backstop: see the docstring
        grader_fault(probe, f"check {check.name}", e)
        return result(Status.ERROR, "the grader could not judge this result (what the "
                      "submission returned here is of a form the grader does not handle); "
                      "no points, and your instructor is told")
    passed.add(check.name)
    return result(Status.PASSED)


def grader_fault(probe, where: str, error: Exception,
                 outcome: str = "the check was given no points") -> str:
    """Record for the instructor that judging ``where`` raised ``error``; returns the note."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [f for f in frames if f.filename.startswith(str(PROJECT) + "/")] or frames
    at = ""
    if ours:
        place = ours[-1].filename
        place = place[len(str(PROJECT)) + 1:] if place.startswith(str(PROJECT) + "/") else place
        at = f" at {place}:{ours[-1].lineno}"
    note = sanitize(f"for the instructor: the grader could not judge {where}: "
                    f"{type(error).__name__}: {error}{at} (a bug of the grader provoked by "
                    f"this submission's data; {outcome})", 600)
    evidence = getattr(probe, "evidence", None)
    faults = evidence.grader_faults if evidence is not None else []
    if note not in faults:
        faults.append(note)
    LOG.error("%s", note, exc_info=error)
    return note
