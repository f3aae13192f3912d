"""For the LMS: one Markdown feedback file per student, and a grades CSV.

``feedback/<name>.md`` holds what ``grade --format text`` says about one submission (score,
each check with its outcome and feedback, the recognised mistakes, the reason for a zero),
every piece of student text escaped for Markdown (``writers.escape.markdown``: no link,
image or HTML of theirs is live). Its name is a readable slug of the student's key plus a
short digest of the whole key, so two students never share a file, whatever their ids
(张伟 and 李娜, Zoë and Zoé, bytes that are not UTF-8). ``lms-grades.csv`` has one row
per student, and no cell a spreadsheet would run (``writers.escape.csv_cell``).
"""
from __future__ import annotations

import csv
import hashlib
import io
import re
import unicodedata
from pathlib import Path

from .classdata import name_of, percent, status_of, who, zero_reason
from .files import write_atomic
from .writers.escape import code_span, csv_cell, markdown

MARKS = {"passed": "passed", "failed": "FAILED", "error": "ERROR", "skipped": "skipped",
         "blocked": "BLOCKED"}
SLUG_LENGTH = 40
DIGEST_LENGTH = 10              #: hex digits of SHA-256 (40 bits): no collision in practice


def feedback_markdown(result: dict) -> str:
    """What ``grade --format text`` says about one submission, as Markdown."""
    lines = [f"# Feedback: {markdown(who(result))}", "",
             f"**{result.get('score', 0):g} / {result.get('max_score', 0):g} points** "
             f"({markdown(Path(str(result.get('submission', ''))).name)})", ""]
    reason = zero_reason(result)
    if reason:
        lines += [f"Why no points: {markdown(reason)}", ""]
    lines += ["| check | outcome | points | what the grader saw |", "|---|---|---|---|"]
    for c in result.get("checks", []):
        lines.append(f"| {code_span(c['name'])} | {_outcome(c)} | "
                     f"{c.get('score', 0):g} / {c.get('max_score', 0):g} | "
                     f"{markdown(c.get('feedback', ''))} |")
    if result.get("diagnoses"):
        lines += ["", "## What went wrong", ""]
        lines += [f"- **{markdown(d['code'])}**: {markdown(d.get('message', ''))}"
                  for d in result["diagnoses"]]
    if result.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {markdown(n)}" for n in result["notes"]]
    seed = result.get("seed")
    if isinstance(seed, int):
        lines += ["", f"_Seed {seed}: `python -m autograder grade FILE --seed {seed}` replays "
                      "these inputs._"]
    return "\n".join(lines) + "\n"


def _outcome(check: dict) -> str:
    status = status_of(check)
    if status == "blocked" and check.get("blocked_by"):
        return "BLOCKED by " + ", ".join(code_span(str(b)) for b in check["blocked_by"])
    return MARKS.get(status, markdown(status))


def feedback_name(result: dict) -> str:
    """A file name for the student's feedback: a readable ASCII slug of the key and a digest
    of all of it, unique per key on any file system (case-insensitive ones too)."""
    key = str(result["key"])
    raw = key.encode("utf-8", "surrogatepass")      # injective, undecodable bytes included
    folded = unicodedata.normalize("NFKD", key).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", folded).strip("._-")[:SLUG_LENGTH] or "student"
    return f"{slug}-{hashlib.sha256(raw).hexdigest()[:DIGEST_LENGTH]}.md"


def write_feedback(results: list[dict], folder: Path) -> tuple[dict[str, str], list[str]]:
    """One Markdown feedback file per submission: ({key: file name}, notes on those that
    could not be written; the others are written all the same)."""
    folder.mkdir(parents=True, exist_ok=True)
    names, notes = {}, []
    for r in results:
        try:
            name = feedback_name(r)
            write_atomic(str(folder / name), feedback_markdown(r))
            names[r["key"]] = name
        except Exception as e:      # noqa: BLE001 — one student's data costs their file
            notes.append(f"{name_of(r)}: no feedback file ({type(e).__name__}: {e})")
    return names, notes


LMS_COLUMNS = ("student", "assignment", "points", "max_points", "percent", "comment",
               "feedback_file")


def lms_csv(results: list[dict], feedback: dict[str, str]) -> str:
    """The grades as an LMS imports them: one row per student, numbers as plain numbers,
    a one-line comment (the reason for a zero, else the mistakes found)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(LMS_COLUMNS)
    for r in sorted(results, key=name_of):
        try:
            row = _lms_row(r, feedback)
        except Exception as e:      # noqa: BLE001 — one student's data costs their row
            row = (name_of(r), "", "", "", "", f"this result could not be read "
                   f"({type(e).__name__}); see its file in results/", "")
        writer.writerow([csv_cell(v) for v in row])
    return buffer.getvalue()


def _lms_row(r: dict, feedback: dict[str, str]) -> tuple:
    codes = sorted({str(d["code"]) for d in r.get("diagnoses", [])})
    comment = zero_reason(r) or ("mistakes found: " + ", ".join(codes) if codes else "")
    name = feedback.get(r["key"])
    return (who(r), str(r.get("assignment", "")), f"{float(r.get('score', 0)):g}",
            f"{float(r.get('max_score', 0)):g}", f"{percent(r):.1f}", " ".join(comment.split()),
            f"feedback/{name}" if name else "")
