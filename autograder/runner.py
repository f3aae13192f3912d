"""Running checks: one check's outcome, modelled on pytest's CallInfo.from_call.

Body returned -> passed; CheckFailed -> failed; StudentError (the submission raised,
timed out, crashed or lacks the name) -> error; SkipCheck -> skipped. Any other
exception is a bug of the grader: it propagates (exit status 1), never shown as "error".
"""
from __future__ import annotations

from .compare import CheckFailed, SkipCheck
from .model import Check, CheckResult, Status
from .sandbox.host import StudentError, sanitize

FEEDBACK_LIMIT = 1500


def run_check(check: Check, probe, points: float, passed: set[str], has_cuda: bool) -> CheckResult:
    def result(status: Status, feedback: str = "", blocked_by=()) -> CheckResult:
        earned = points if status is Status.PASSED else 0.0
        return CheckResult(check.name, check.group, status, earned, points,
                           sanitize(feedback, FEEDBACK_LIMIT), check.hidden, tuple(blocked_by))

    if "cuda" in check.needs and not has_cuda:
        return result(Status.SKIPPED, "skipped: the grading machine has no CUDA device")
    missing = [r for r in check.requires if r not in passed]
    if missing:
        return result(Status.FAILED, f"not graded until {', '.join(missing)} passes: this check "
                      "only counts for an implementation that otherwise works", blocked_by=missing)
    try:
        check.body(probe)
    except CheckFailed as e:
        return result(Status.FAILED, str(e))
    except StudentError as e:
        if e.not_implemented:
            return result(Status.ERROR, f"not implemented yet ({e})")
        return result(Status.ERROR, str(e))
    except SkipCheck as e:
        return result(Status.SKIPPED, f"skipped: {e}")
    passed.add(check.name)
    return result(Status.PASSED)
