"""Recognising mistakes by their behaviour, with the TAXONOMY's codes."""
from __future__ import annotations

from ..model import Diagnosis, Status
from ..runner import grader_fault
from ..sandbox.host import StudentError

DIAGNOSES: list = []
#: Diagnoses read from the grader's own facts (the source), made whatever the checks said.
FROM_SOURCE = ("api.forbidden-sdpa", "api.tampers-with-grader")


def diagnosis(code: str):
    def register(fn):
        DIAGNOSES.append((code, fn))
        return fn
    return register


def diagnose(probe, results) -> list[Diagnosis]:
    """The mistakes the submission's behaviour shows. One that passes every check it could
    run shows none but what its source shows, and is not probed further (the mutants'
    forwards cost the most here)."""
    from . import structure, values  # noqa: F401  (registers)
    clean = all(r.status in (Status.PASSED, Status.SKIPPED) for r in results)
    by_name = {r.name: r for r in results}
    found = []
    for code, fn in DIAGNOSES:
        if clean and code not in FROM_SOURCE:
            continue
        try:
            message = fn(probe, by_name)
        except StudentError:
            message = None
        except Exception as e:   # noqa: BLE001 — judging the submission's data never crashes
            message = grader_fault(probe, f"diagnosis {code}", e, "it was not made") and None
        if message:
            found.append(Diagnosis(code, message))
    return found
