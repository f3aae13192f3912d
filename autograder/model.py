"""The grader's data: checks, their results, diagnoses and the report. Plain frozen data."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable


class Status(str, enum.Enum):
    """Outcome of one check; always one of the four words of the SPEC."""

    PASSED = "passed"
    FAILED = "failed"    #: the submission ran and gave a wrong answer
    ERROR = "error"      #: the submission raised, timed out, crashed, or lacks the name
    SKIPPED = "skipped"  #: the grader could not run it here (e.g. no CUDA), decided by the grader


@dataclass(frozen=True)
class Check:
    """One graded property of a submission, declared with ``@check``."""

    name: str                      #: "<api>.<property>", e.g. "split_heads.values"
    group: str                     #: the SPEC part: shape project split concat softmax pool mha heads cost device
    points: float                  #: default points; the rubric may change them
    body: Callable = field(repr=False, compare=False)
    hidden: bool = True            #: False: students may see it (``--public-only`` runs only these)
    needs: frozenset = frozenset()  #: {"cuda"}: skipped, with the reason, where the grader has none
    requires: tuple = ()           #: checks that must pass first, else this one fails unearned
    doc: str = ""                  #: what it checks, from the docstring (cites the SPEC)
    #: the sandbox's measurements its verdict rests on ("exception", "mutation", "parameters",
    #: "forbidden", "trace", "device", "precision"), for the reader of the report
    instruments: frozenset = frozenset()
    #: the part of the API it is about: one of ``submission.API``, "conventions" (checks that
    #: span the API) or "questions" (the notebook's numeric questions)
    part: str = "conventions"
    #: what it holds the part to: "values" (its answers: these decide whether the part is
    #: right, for error carried forward), "raises", "structure" (weights, heads) or
    #: "instrument" (a measurement of the running code: cost, device, precision, purity,
    #: built-ins; never graded again with parts answered by the reference), "question"
    kind: str = "values"


@dataclass(frozen=True)
class CheckResult:
    name: str
    group: str
    status: Status
    score: float
    max_score: float
    feedback: str = ""
    hidden: bool = True
    blocked_by: tuple = ()         #: not graded: these checks it requires did not pass
    part: str = ""                 #: the API part it is about (``Check.part``)


@dataclass(frozen=True)
class Diagnosis:
    """A recognised mistake, by its TAXONOMY code."""

    code: str
    message: str


@dataclass(frozen=True)
class Deduction:
    """One line of a marker's rubric: a named mistake and the points it cost (``prices``)."""

    code: str
    points: float
    message: str

    def line(self) -> str:
        return f"-{self.points:g} {self.code}: {self.message}"


@dataclass(frozen=True)
class Fact:
    """One thing verdicts rest on, and who established it: ``source`` (the grader read the
    submission's code), ``grader`` (computed by the grader from data it sent and got back),
    or ``sandbox`` (measured inside the sandbox: trusted only while the code reaches for
    none of the grader's instruments)."""

    name: str
    value: object          #: plain data: a list of strings, a bool, counts
    established_by: str


@dataclass(frozen=True)
class Report:
    """Everything the writers need; scores are derived, never stored twice."""

    submission: str
    results: tuple[CheckResult, ...]
    diagnoses: tuple[Diagnosis, ...] = ()
    seed: int = 0
    notes: tuple[str, ...] = ()    #: grader-level remarks: load problems, reduced isolation, rescaling
    facts: tuple[Fact, ...] = ()   #: what the structural verdicts rest on, and who said so
    #: what each named mistake cost, where its failures were charged at its price
    deductions: tuple[Deduction, ...] = ()

    @property
    def max_score(self) -> float:
        return round(sum(r.max_score for r in self.results), 2)

    @property
    def score(self) -> float:
        return round(sum(r.score for r in self.results), 2)

    def to_dict(self) -> dict:
        """The SPEC's JSON object (plus the compatible extras ``seed``, ``notes``, ``facts``,
        ``deductions``)."""
        return {
            "score": self.score,
            "max_score": self.max_score,
            "checks": [_check_dict(r) for r in self.results],
            "diagnoses": [{"code": d.code, "message": d.message} for d in self.diagnoses],
            "submission": self.submission,
            "seed": self.seed,
            "notes": list(self.notes),
            "facts": [{"name": f.name, "value": f.value, "established_by": f.established_by}
                      for f in self.facts],
            "deductions": [{"code": d.code, "points": round(d.points, 4), "message": d.message}
                           for d in self.deductions],
        }


def _check_dict(r: CheckResult) -> dict:
    """One check of the JSON; ``blocked_by`` only where the check was held back."""
    data = {"name": r.name, "group": r.group, "part": r.part, "score": round(r.score, 4),
            "max_score": round(r.max_score, 4), "status": r.status.value, "feedback": r.feedback}
    if r.blocked_by:
        data["blocked_by"] = list(r.blocked_by)
    return data
