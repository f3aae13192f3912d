"""A table for a student in a terminal: checks, points, feedback, and what the mistakes are.

Every string passes through ``clean`` (no terminal escapes from a submission's messages),
and a message keeps its own line breaks (a syntax error's offending line stays on its own).
"""
from __future__ import annotations

import textwrap

from .clean import clean
from .outcome import blocked_label, outcome

HELP = "a table for a terminal (default)"   #: what ``grade --format`` says of this format
MARKS = {"passed": "ok  ", "failed": "FAIL", "error": "ERR ", "skipped": "skip", "blocked": "BLKD"}
WIDTH = 100


def render(report) -> str:
    lines = [f"{clean(report.submission)}: {report.score:g} / {report.max_score:g} points", ""]
    width = max((len(r.name) for r in report.results), default=10)
    for r in report.results:
        lines.append(f"  {MARKS[outcome(r)]} {clean(r.name):<{width}} {r.score:6.2f} / "
                     f"{r.max_score:<6.2f}")
        if r.blocked_by:
            lines += wrap(blocked_label(r) + ": not graded until they pass", " " * 9)
        if r.feedback and not r.feedback.startswith("not graded until"):      # a passed check has some only when it was carried forward
            lines += wrap(clean(r.feedback), " " * 9)
    if report.diagnoses:
        lines += ["", "What went wrong:"]
        for d in report.diagnoses:
            lines += wrap(f"[{clean(d.code)}] {clean(d.message)}", "  ", "    ")
    if getattr(report, "deductions", ()):
        lines += ["", "Deductions (one price per mistake):"]
        for d in report.deductions:
            lines += wrap(clean(d.line()), "  ", "    ")
    if report.notes:
        lines += ["", "Notes:"]
        for note in report.notes:
            lines += wrap(clean(note), "  - ", "    ")
    lines += ["", f"(seed {report.seed}: rerun with --seed {report.seed} to replay these inputs)"]
    return "\n".join(lines) + "\n"


def wrap(text: str, first: str, rest: str | None = None) -> list[str]:
    """Each line of ``text`` wrapped on its own; a line indented as code is kept as it is."""
    out: list[str] = []
    for line in text.splitlines() or [""]:
        indent = first if not out else (rest or first)
        if line.startswith("    "):
            out.append((rest or first) + line)
            continue
        out += textwrap.wrap(line, WIDTH, initial_indent=indent,
                             subsequent_indent=rest or first) or []
    return out or [first.rstrip()]
