"""Gradescope's ``results.json``: one test per check, hidden checks kept until publication.

Fields follow Gradescope's autograder specification ("Output format"): at the top level
``score``, ``output``, the ``*_format`` fields, ``visibility``, ``stdout_visibility``,
``extra_data`` and ``tests``; per test ``name``, ``number``, ``score``, ``max_score``,
``status``, ``output``, ``output_format``, ``tags`` and ``visibility``.

What a student sees before grades are published: the public checks (name, points,
feedback) and the overview (public points, notes about their file). A diagnosis whose kind
of mistake shows in a failed public check (``parts.AREAS``) is shown at once, under the
first such test and in the overview: its evidence is public. What waits for publication
(``after_published``): every hidden check, and the other diagnoses whenever a hidden check
failed, since they would tell what the hidden checks found. Gradescope itself hides
the total score while any test is not yet visible. Notes about the grader's own isolation
go to a ``hidden`` test that only instructors ever see; the student-facing text never
mentions how the sandbox is set up.
"""
from __future__ import annotations

import json

from ..parts import AREAS
from .clean import clean
from .outcome import blocked_label

VISIBLE, AFTER_PUBLISHED, HIDDEN = "visible", "after_published", "hidden"
FORMAT = "text"                     #: every string is plain text (shown in a <pre>)
STATUS = {"passed": "passed", "failed": "failed", "error": "failed"}   # skipped: no status
_FAILING = ("failed", "error")
_INSTRUCTOR_NOTES = ("isolation", "sandbox")    #: notes about the grader, not the student


HELP = "Gradescope's results.json"   #: what ``grade --format`` says of this format


def render(report) -> str:
    return json.dumps(results(report), indent=2, ensure_ascii=True) + "\n"


def results(report) -> dict:
    """The results.json object for one report."""
    hidden_failed = any(r.hidden and r.status.value in _FAILING for r in report.results)
    for_student = [n for n in report.notes if not _for_instructor(n)]
    for_instructor = [n for n in report.notes if _for_instructor(n)]
    numbers = _numbers(report.results)
    placed = public_diagnoses(report)
    shown = [d for ds in placed.values() for d in ds]
    waiting = [d for d in report.diagnoses if d not in shown]
    tests = [_test(r, number, placed.get(r.name, ())) for r, number in zip(report.results, numbers)]
    extra = len({n.split(".")[0] for n in numbers}) + 1
    if waiting and hidden_failed:
        tests.append(_info("Recognised mistakes", _diagnoses(waiting),
                           AFTER_PUBLISHED, str(extra)))
    if for_instructor:
        tests.append(_info("Grader notes (instructors only)", _bullets(for_instructor),
                           HIDDEN, str(extra + 1)))
    return {
        "score": report.score,
        "output": _overview(report, for_student,
                            diagnoses=list(report.diagnoses) if not hidden_failed else shown),
        "output_format": FORMAT,
        "test_output_format": FORMAT,
        "test_name_format": FORMAT,
        "visibility": VISIBLE,
        "stdout_visibility": HIDDEN,
        "extra_data": {"submission": clean(report.submission), "seed": report.seed,
                       "max_score": report.max_score,
                       "diagnoses": [clean(d.code) for d in report.diagnoses]},
        "tests": tests,
    }


def public_diagnoses(report) -> dict[str, list]:
    """{public check name: the diagnoses shown under it}: each diagnosis goes to the first
    failed public check of a group where its kind of mistake shows; the others are absent."""
    failed_public = [r for r in report.results if not r.hidden and r.status.value in _FAILING]
    placed: dict[str, list] = {}
    for d in report.diagnoses:
        groups = AREAS.get(d.code.split(".")[0], ())
        target = next((r.name for r in failed_public if r.group in groups), None)
        if target is not None:
            placed.setdefault(target, []).append(d)
    return placed


def _test(r, number: str, diagnoses=()) -> dict:
    test = {"name": clean(r.name), "number": number, "score": round(r.score, 4),
            "max_score": round(r.max_score, 4)}
    if r.status.value in STATUS:
        test["status"] = STATUS[r.status.value]
    output = clean(r.feedback)
    if r.blocked_by:                # not a failure of its own: say what holds it back
        output = f"{clean(blocked_label(r))}: not graded until they pass.\n\n{output}".rstrip()
    if diagnoses:
        output += "\n\nRecognised mistake:\n" + _diagnoses(diagnoses)
    test.update({"output": output, "output_format": FORMAT, "tags": [clean(r.group)],
                 "visibility": AFTER_PUBLISHED if r.hidden else VISIBLE})
    return test


def _info(name: str, text: str, visibility: str, number: str) -> dict:
    """A test worth no points that only carries text."""
    return {"name": name, "number": number, "score": 0.0, "max_score": 0.0, "output": text,
            "output_format": FORMAT, "tags": ["info"], "visibility": visibility}


def _numbers(results) -> list[str]:
    """"group.index", groups numbered in the order they first appear: "3.2" is the second
    check of the third group, so Gradescope lists a function's checks together."""
    groups: dict[str, int] = {}
    counts: dict[str, int] = {}
    numbers = []
    for r in results:
        groups.setdefault(r.group, len(groups) + 1)
        counts[r.group] = counts.get(r.group, 0) + 1
        numbers.append(f"{groups[r.group]}.{counts[r.group]}")
    return numbers


def _overview(report, notes: list[str], *, diagnoses: list) -> str:
    public = [r for r in report.results if not r.hidden]
    hidden = len(report.results) - len(public)
    lines = [f"{clean(report.submission)}: graded by the multi-head attention autograder "
             f"(seed {report.seed})."]
    if public:
        earned = round(sum(r.score for r in public), 4)
        possible = round(sum(r.max_score for r in public), 4)
        lines.append(f"Public checks: {earned:g} / {possible:g} points.")
    if hidden:
        lines.append(f"{hidden} hidden check(s): their results appear when grades are published.")
    for r in report.results:
        if r.status.value == "skipped":
            handled = ("its points were awarded" if r.score >= r.max_score > 0 else
                       "its points were shared out over the other checks" if r.max_score <= 0 else
                       f"it earned {r.score:g} of {r.max_score:g} points")
            lines.append(f"{clean(r.name)} did not run here ({clean(r.feedback)}); {handled}.")
    if diagnoses:
        lines += ["", "Recognised mistakes:", _diagnoses(diagnoses)]
    if notes:
        lines += ["", "Notes:", _bullets(notes)]
    return "\n".join(lines)


def _diagnoses(diagnoses) -> str:
    return "\n".join(f"[{clean(d.code)}] {clean(d.message)}" for d in diagnoses)


def _bullets(notes) -> str:
    return "\n".join(f"- {clean(n)}" for n in notes)


def _for_instructor(note: str) -> bool:
    return any(word in note.lower() for word in _INSTRUCTOR_NOTES)
