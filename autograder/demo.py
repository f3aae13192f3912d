"""``python -m autograder demo``: grade the bundled example submissions and summarise."""
from __future__ import annotations

import sys
import tempfile
import textwrap
import time
from pathlib import Path

from . import api, examples

ROOT = Path(__file__).resolve().parent.parent
#: (label, a file or the name of an example of autograder/examples.py, written when graded)
EXAMPLES: list[tuple[str, Path | str]] = [
    ("the reference solution", ROOT / "solutions" / "mha.py"),
    ("the student stub (nothing done yet)", ROOT / "assignments" / "stub" / "mha.py"),
    ("split_heads without the transpose", "split_no_transpose"),
    ("D2L-style masked_softmax", "d2l_masked_softmax"),
    ("all heads share one set of weights", "shared_heads"),
    ("a syntax error", "syntax_error"),
]

WIDTH = 100                 #: the headlines are wrapped to this width, whole, never cut


def run(grader: api.Grader, out=sys.stdout) -> list:
    """Grade each example; print one line per submission, then what each mistake was."""
    print(f"Grading {len(EXAMPLES)} example submissions (seed {grader.seed}) …\n", file=out)
    reports = []
    with tempfile.TemporaryDirectory(prefix="mha-demo-") as folder:
        for label, example in EXAMPLES:
            try:
                path = examples.write(example, Path(folder)) if isinstance(example, str) else example
            except examples.PatchError as e:
                print(f"  (example {label!r} no longer applies to the reference: {e})", file=out)
                continue
            if not path.exists():
                print(f"  (missing example: {path})", file=out)
                continue
            start = time.monotonic()
            report = grader.grade(path)
            reports.append((label, report))
            codes = ", ".join(d.code for d in report.diagnoses) or "-"
            print(f"  {report.score:6.1f} / {report.max_score:g}  {label:<38} "
                  f"{time.monotonic() - start:5.1f} s   mistakes found: {codes}", file=out,
                  flush=True)
    print("\nWhat the grader told each student (the first thing it says):", file=out)
    for label, report in reports:
        print(textwrap.fill(f"- {label}: {_headline(report)}", WIDTH, initial_indent="  ",
                            subsequent_indent="    ", break_long_words=False,
                            break_on_hyphens=False), file=out)
    print("\nGrade your own file: python -m autograder grade path/to/mha.py "
          "[--format text|json|gradescope|junit]", file=out)
    return reports


def _headline(report) -> str:
    """The one line a newcomer should read: the mistake, else what stopped the grading."""
    if report.diagnoses:
        return report.diagnoses[0].message
    if report.score >= report.max_score:
        return "full marks"
    first = next((r.feedback for r in report.results if r.score < r.max_score and r.feedback), "")
    problem = next((n for n in report.notes if "rescale" not in n), "")
    text = problem if problem and "syntax" in problem or not first else first
    # one line: a syntax error's message quotes the line on its own line, under a caret
    return " ".join(line.strip() for line in text.splitlines()
                    if line.strip() and set(line.strip()) != {"^"})
