"""Recognising mistakes by their behaviour, with the TAXONOMY's codes."""
from __future__ import annotations

from ..model import Diagnosis

DIAGNOSES: list = []


def diagnosis(code: str):
    def register(fn):
        DIAGNOSES.append((code, fn))
        return fn
    return register


def diagnose(probe, results) -> list[Diagnosis]:
    from . import values  # noqa: F401  (registers)
    by_name = {r.name: r for r in results}
    found = []
    for code, fn in DIAGNOSES:
        message = fn(probe, by_name)
        if message:
            found.append(Diagnosis(code, message))
    return found
