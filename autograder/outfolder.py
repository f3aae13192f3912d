"""The batch's output folder, its only state; a rerun picks up where a run stopped.

    OUT/batch.json             the seed, rubric and device this folder is graded with
    OUT/results/<key>.json     one per student: the SPEC's JSON, plus who and what was graded
    OUT/failures/<key>.json    the grader failed on that submission; the next run retries it
    OUT/grades.csv             one row per student, rebuilt at the end of every run

Every file is written whole or not at all (a temporary file, then ``os.replace``), and a
result names the digest of the code it graded: a rerun skips a student whose result
matches the code found now, and grades again one who has resubmitted.
"""
from __future__ import annotations

import csv
import fcntl
import hashlib
import io
import json
import os
from pathlib import Path

from . import scoring
from .files import write_atomic
from .writers.escape import csv_cell

FORMAT = 1                      #: version of OUT's layout, recorded in batch.json


class BatchError(ValueError):
    """The batch cannot start as asked (a usage problem); the message says how to fix it."""


def result_path(out: Path, key: str) -> Path:
    return out / "results" / f"{key}.json"


def failure_path(out: Path, key: str) -> Path:
    return out / "failures" / f"{key}.json"


def complete(out: Path, key: str, digest: str) -> bool:
    """Whether a whole result of exactly this code is there."""
    try:
        data = json.loads(result_path(out, key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("source_digest") == digest and "score" in data


def write_result(out: Path, job, digest: str, file: str, report: dict) -> None:
    data = dict(report, student=job.student, assignment=job.assignment, path=file,
                source_digest=digest)
    write_atomic(str(result_path(out, job.key)), json.dumps(data, indent=1) + "\n")
    failure_path(out, job.key).unlink(missing_ok=True)


def write_failure(out: Path, job, why: str) -> None:
    record = {"student": job.student, "assignment": job.assignment, "path": job.path,
              "error": why}
    write_atomic(str(failure_path(out, job.key)), json.dumps(record, indent=1) + "\n")


def settings(out: Path, *, seed: int | None, rubric: str | None, device: str) -> dict:
    """The settings the folder is graded with; a rerun must not change them."""
    rubric_text = Path(rubric).read_text(encoding="utf-8") if rubric else None
    rubric_digest = hashlib.sha256((rubric_text or scoring.DEFAULT_RUBRIC.read_text(
        encoding="utf-8")).encode()).hexdigest()
    path = out / "batch.json"
    if path.exists():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise BatchError(f"{path} is unreadable ({e}); grade into a new --output folder")
        for name, now in (("seed", seed), ("rubric_sha256", rubric_digest), ("device", device)):
            if now is not None and old.get(name) != now:
                raise BatchError(
                    f"{out} was graded with {name} {old.get(name)}, not {now}: rerun with the "
                    f"same settings to finish it, or grade into a new --output folder")
        return dict(old, rubric_text=rubric_text)
    chosen = {"format": FORMAT, "seed": _new_seed() if seed is None else int(seed),
              "rubric_sha256": rubric_digest, "device": device}
    write_atomic(str(path), json.dumps(chosen, indent=2) + "\n")
    return dict(chosen, rubric_text=rubric_text)


def _new_seed() -> int:
    import secrets
    return secrets.randbelow(2**31)


class Lock:
    """At most one batch writes to an output folder at a time."""

    def __init__(self, out: Path):
        out.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(out / ".lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise BatchError(f"another batch is writing to {out}; wait for it to finish") from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def sweep(out: Path) -> int:
    """Remove the temporary files of writes that a killed run left unfinished."""
    leftovers = [*out.glob(".batch.json.*"), *out.glob(".grades.csv.*")]
    for folder in ("results", "failures"):
        leftovers += (out / folder).rglob(".*.json.*")
    for tmp in leftovers:
        tmp.unlink(missing_ok=True)
    return len(leftovers)


GRADES_COLUMNS = ("student", "assignment", "score", "max_score", "status", "diagnoses",
                  "submission", "message")


def write_grades(out: Path, jobs: list) -> None:
    """grades.csv, one row per student found, from the result files on disk. Every cell is
    UTF-8 (a file name's undecodable bytes as U+FFFD) and none is one a spreadsheet would
    run as a formula (``writers.escape.csv_cell``: an id such as ``=HYPERLINK(...)``).
    Rows end in CRLF (RFC 4180), so a cell holding a CR is quoted: with LF endings the csv
    module left it bare, and readers split the row there (the id ``\\r+3+4`` became a row
    beginning ``+3+4``)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(GRADES_COLUMNS)
    for job in jobs:
        writer.writerow([csv_cell(v) for v in _grades_row(out, job)])
    write_atomic(str(out / "grades.csv"), buffer.getvalue())


def _grades_row(out: Path, job) -> list:
    base = [job.student, job.assignment]
    try:
        data = json.loads(result_path(out, job.key).read_text(encoding="utf-8"))
        codes = ";".join(d["code"] for d in data.get("diagnoses", []))
        return base + [data["score"], data["max_score"], "graded", codes,
                       data.get("submission", ""), ""]
    except (OSError, ValueError, KeyError):
        pass
    try:
        why = json.loads(failure_path(out, job.key).read_text(encoding="utf-8"))["error"]
        return base + ["", "", "grader-failed", "", "", why]
    except (OSError, ValueError, KeyError):
        return base + ["", "", "not-graded", "", "", "interrupted before it was graded"]
