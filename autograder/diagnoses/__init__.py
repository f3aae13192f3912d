"""Recognising mistakes by their behaviour, with the TAXONOMY's codes."""
from __future__ import annotations

from ..model import Diagnosis, Status
from ..runner import grader_fault
from ..sandbox.host import StudentError

DIAGNOSES: list = []
#: Diagnoses read from the grader's own facts (the source, the guard), made whatever the
#: checks said.
FROM_SOURCE = ("api.forbidden-sdpa", "api.breaks-code-rules")


def diagnosis(code: str):
    def register(fn):
        DIAGNOSES.append((code, fn))
        return fn
    return register


def diagnose(probe, results) -> list[Diagnosis]:
    """The mistakes the submission's behaviour shows. One that passes every check it could
    run shows none but what its source shows, and is not probed further (the mutants'
    forwards cost the most here)."""
    from . import compose, structure, values  # noqa: F401  (registers)
    clean = all(r.status in (Status.PASSED, Status.SKIPPED) for r in results)
    by_name = {r.name: r for r in results}
    forced = set() if clean else _attempt(probe, "the combinations", compose.explained,
                                          frozenset())
    found = []
    for code, fn in DIAGNOSES:
        if clean and code not in FROM_SOURCE:
            continue
        message = _attempt(probe, f"diagnosis {code}", lambda p: fn(p, by_name), None)
        if not message and code in forced:      # several mistakes: the combination says it
            message = values.MESSAGES.get(code)
        if message:
            found.append(Diagnosis(code, message))
    if not clean and found:      # the named mistakes together, simulated on the module
        together = _attempt(probe, "the named mistakes' simulation",
                            lambda p: compose.simulated(p, [d.code for d in found]), frozenset())
        probe.evidence.module_simulated |= together
    return found


def _attempt(probe, what: str, make, otherwise):
    """make(probe); a StudentError or any exception judging the submission's data gives
    ``otherwise`` (the latter noted for the instructor): a diagnosis never crashes grading."""
    try:
        return make(probe)
    except StudentError:
        return otherwise
    except Exception as e:   # noqa: BLE001 — judging the submission's data never crashes
        grader_fault(probe, what, e, "it was not made")
        return otherwise
