"""A table for a student in a terminal: checks, points, feedback, and what the mistakes are."""
from __future__ import annotations

import textwrap

MARKS = {"passed": "ok  ", "failed": "FAIL", "error": "ERR ", "skipped": "skip"}


def render(report) -> str:
    lines = [f"{report.submission}: {report.score:g} / {report.max_score:g} points", ""]
    width = max((len(r.name) for r in report.results), default=10)
    for r in report.results:
        lines.append(f"  {MARKS[r.status.value]} {r.name:<{width}} {r.score:6.2f} / {r.max_score:<6.2f}")
        if r.feedback:      # a passed check has some only when it was carried forward
            lines += textwrap.wrap(r.feedback, 100, initial_indent=" " * 9, subsequent_indent=" " * 9)
    if report.diagnoses:
        lines += ["", "What went wrong:"]
        for d in report.diagnoses:
            lines += textwrap.wrap(f"[{d.code}] {d.message}", 100, initial_indent="  ",
                                   subsequent_indent="    ")
    if report.notes:
        lines += ["", "Notes:"]
        for note in report.notes:
            lines += textwrap.wrap(note, 100, initial_indent="  - ", subsequent_indent="    ")
    lines += ["", f"(seed {report.seed}: rerun with --seed {report.seed} to replay these inputs)"]
    return "\n".join(lines) + "\n"
