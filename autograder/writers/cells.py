"""The text of an autograded nbgrader cell's output: what the student reads in the feedback.

One cell shows one part of a report (see ``autograder.parts``): the cell's score, each of
its checks with the grader's feedback, the recognised mistakes placed in this part, and,
in the notebook's first autograded cell, the notes about the notebook itself. It quotes
only the report: feedback names cases and sizes of errors, never an expected tensor, and
no test source ever reaches it.
"""
from __future__ import annotations

import textwrap

from ..parts import result_part
from .clean import clean
from .outcome import blocked_label, outcome

MARKS = {"passed": "passed ", "failed": "FAILED ", "error": "ERROR  ", "skipped": "skipped",
         "blocked": "BLOCKED"}
WIDTH = 96
#: Notes left out: about the grader's isolation (for instructors), and about the rubric's
#: rescaling of skipped checks (an nbgrader cell keeps its points; see autograder.parts).
_LEFT_OUT = ("isolation", "sandbox", "rubric policy")


def render(report, *, part: str, public: bool, score: float, points: float,
           diagnoses=(), notes: bool = False) -> str:
    results = [r for r in report.results if result_part(r) == part and r.hidden != public]
    kind = "public" if public else "hidden"
    lines = [f"{part}, {kind} tests: {score:g} / {points:g} points, graded by the autograder "
             "outside this notebook's kernel."]
    if not results:
        lines.append("  (this part's checks are all hidden: see its hidden test cell below)" if public
                     else "  (this part's checks are all public: see its public test cell)")
    for r in results:
        lines.append(f"  {MARKS[outcome(r)]} {clean(r.name)}"
                     + (f" ({clean(blocked_label(r))})" if r.blocked_by else ""))
        if r.feedback and r.status.value != "passed":
            lines += _wrap(clean(r.feedback), "            ")
    if diagnoses:
        lines += ["", "What went wrong:"]
        for d in diagnoses:
            lines += _wrap(f"[{clean(d.code)}] {clean(d.message)}", "  ", "    ")
    shown = [n for n in report.notes if not any(w in n.lower() for w in _LEFT_OUT)]
    if notes and shown:
        lines += ["", "About your notebook:"]
        for note in shown:
            lines += _wrap(clean(note), "  - ", "    ")
    return "\n".join(lines) + "\n"


def _wrap(text: str, first: str, rest: str | None = None) -> list[str]:
    out = []
    for paragraph in text.splitlines() or [""]:
        if paragraph.startswith("    "):       # quoted code (a syntax error's line): as it is
            out.append((rest or first) + paragraph)
            continue
        out += textwrap.wrap(paragraph, WIDTH, initial_indent=first if not out else (rest or first),
                             subsequent_indent=rest or first) or [first.rstrip()]
    return out

