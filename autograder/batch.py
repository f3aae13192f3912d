"""Grading a class: find every submission below a folder, grade what is not graded yet,
and write one result per student plus ``grades.csv``.

The output folder is the batch's only state, so a run killed at any moment (Ctrl-C,
``kill -9``) is finished by running the same command again:

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
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import integrity, scoring, submission
from .cli import write_atomic

FORMAT = 1                      #: version of OUT's layout, recorded in batch.json
CHECK_EVERY = 0.5               #: seconds between checks that the grader's files are intact
SUFFIXES = (".py", ".ipynb")


class BatchError(ValueError):
    """The batch cannot start as asked (a usage problem); the message says how to fix it."""


@dataclass(frozen=True)
class Job:
    """One student's submission, as found below the batch's folder."""

    key: str            #: unique in the batch: results/<key>.json ("alice", or "mha/alice" for nbgrader)
    student: str
    assignment: str     #: the nbgrader assignment; "" for the other layouts
    path: str           #: a file or a folder; ``submission.load`` picks the file in a folder


@dataclass(frozen=True)
class Task:
    """A job resolved to the file that will be graded, and a digest of the code in it."""

    job: Job
    file: str
    digest: str


@dataclass
class Summary:
    total: int
    reused: int = 0                                  #: already graded by an earlier run
    graded: int = 0                                  #: graded by this run
    failures: dict = field(default_factory=dict)     #: key -> why the grader failed on it
    seed: int = 0


# ---------------------------------------------------------------------------------------
# Finding the submissions

def discover(root, *, assignment: str | None = None, exclude=()) -> list[Job]:
    """Every submission below ``root``, in a stable order.

    An nbgrader tree (``submitted/<student>/<assignment>/``) gives one job per student and
    assignment; otherwise each ``.py``/``.ipynb`` file directly in ``root`` is a student (by
    its stem) and each folder is one (GitHub Classroom clones one repository per student).
    """
    root = Path(root)
    skip = {Path(p).resolve() for p in exclude}
    submitted = root if root.name == "submitted" else root / "submitted"
    if submitted.is_dir():
        found = [(f"{a.name}/{s.name}", s.name, a.name, a)
                 for s in _entries(submitted, skip) if s.is_dir()
                 for a in _entries(s, skip) if a.is_dir() and assignment in (None, a.name)]
        found.sort(key=lambda f: (f[2], f[1]))
    else:
        if assignment is not None:
            raise BatchError(f"--assignment needs an nbgrader tree ({root}/submitted/<student>/"
                             "<assignment>/), and there is none")
        found = [(e.stem if e.is_file() else e.name, e.stem if e.is_file() else e.name, "", e)
                 for e in _entries(root, skip) if e.is_dir() or e.suffix in SUFFIXES]
        stems = [f[0] for f in found]
        found = [(e.name if stems.count(key) > 1 else key, student, a, e)
                 for key, student, a, e in found]
    return [Job(key, student, a, str(path)) for key, student, a, path in found]


def _entries(folder: Path, skip: set) -> list[Path]:
    return sorted(e for e in folder.iterdir()
                  if not e.name.startswith(".") and e.name != "__pycache__"
                  and e.resolve() not in skip)


def plan(jobs: list[Job], out: Path) -> tuple[list[Task], list[Task], list[tuple[Job, str]]]:
    """(to grade, already graded, [(unreadable job, why)]). Reads submissions, runs nothing."""
    todo, done, unreadable = [], [], []
    for job in jobs:
        try:
            sub = submission.load(job.path)
        except (submission.LoadError, OSError) as e:
            unreadable.append((job, str(e)))
            continue
        h = hashlib.sha256(sub.name.encode() + b"\0" + sub.source + b"\0"
                           + (sub.problem or "").encode())
        task = Task(job, sub.path, h.hexdigest())
        (done if _complete(out, task) else todo).append(task)
    return todo, done, unreadable


def _complete(out: Path, task: Task) -> bool:
    try:
        data = json.loads(_result_path(out, task.job.key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("source_digest") == task.digest and "score" in data


def _result_path(out: Path, key: str) -> Path:
    return out / "results" / f"{key}.json"


def _failure_path(out: Path, key: str) -> Path:
    return out / "failures" / f"{key}.json"


# ---------------------------------------------------------------------------------------
# The output folder: its settings, its lock, its leftovers

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


# ---------------------------------------------------------------------------------------
# Grading and recording

def run(root, out, *, seed=None, rubric=None, device="auto", assignment=None,
        executor=None, progress=None) -> Summary:
    """Grade every submission below ``root`` not yet graded into ``out``.

    ``executor(options)`` returns an object with ``run(tasks)`` (yielding ``(task, outcome)``
    as they finish) and ``close()``; the default grades here, in threads.
    """
    root, out = Path(root).resolve(), Path(out).resolve()
    if not root.is_dir():
        raise BatchError(f"{root}: no such folder")
    jobs = discover(root, assignment=assignment, exclude=[out])
    if not jobs:
        raise BatchError(f"{root}: no submission found (.py or .ipynb files, one folder per "
                         "student, or an nbgrader submitted/ tree)")
    with Lock(out):
        chosen = settings(out, seed=seed, rubric=rubric, device=device)
        sweep(out)
        todo, done, unreadable = plan(jobs, out)
        summary = Summary(total=len(jobs), reused=len(done), seed=chosen["seed"])
        for job, why in unreadable:
            _record_failure(out, job, why, summary)
        options = {"seed": chosen["seed"], "device": device, "hide": [str(root), str(out)],
                   "rubric_text": chosen["rubric_text"]}
        _grade(todo, out, options, executor, progress, summary)
        write_grades(out, jobs)
    return summary


def _grade(todo, out, options, executor, progress, summary) -> None:
    """Grade each distinct submission once; identical ones (same digest) share its result."""
    if not todo:
        if progress:
            progress.start(todo=0, already=summary.reused)
        return
    twins: dict[str, list[Task]] = {}
    for task in todo:
        twins.setdefault(task.digest, []).append(task)
    if executor is None:
        from .executors import LocalExecutor as executor
    engine = executor(options)
    if progress:                                 # after the start-up: the ETA counts grading only
        progress.start(todo=len(todo), already=summary.reused)
    pending: list = []
    before, checked = integrity.digest(), time.monotonic()
    try:
        for first, outcome in engine.run([group[0] for group in twins.values()]):
            for task in twins[first.digest]:
                _take(task, outcome, out, pending, progress, summary)
            if time.monotonic() - checked > CHECK_EVERY:
                _flush(pending, out, before, summary)
                checked = time.monotonic()
    except KeyboardInterrupt:
        _flush(pending, out, before, summary)
        raise
    finally:
        engine.close()
    _flush(pending, out, before, summary)


def _take(task, outcome: dict, out: Path, pending: list, progress, summary) -> None:
    if "report" in outcome:
        pending.append((task, outcome["report"]))
    else:
        why = outcome.get("error", "unknown failure")
        _record_failure(out, task.job, why, summary)
        if progress:
            progress.note(f"{task.job.key}: the grader failed: {why}")
    if progress:
        progress.advance()


def _flush(pending: list, out: Path, before: str, summary: Summary) -> None:
    """Write the results graded so far, once the grader's files are known to be intact."""
    if not pending:
        return
    if integrity.digest() != before:
        pending.clear()
        raise integrity.TamperedError("the grader's own files changed during the batch; the "
                                      "results since the last check were not written")
    for task, report in pending:
        job = task.job
        data = dict(report, student=job.student, assignment=job.assignment, path=task.file,
                    source_digest=task.digest)
        write_atomic(str(_result_path(out, job.key)), json.dumps(data, indent=1) + "\n")
        _failure_path(out, job.key).unlink(missing_ok=True)
        summary.failures.pop(job.key, None)
        summary.graded += 1
    pending.clear()


def _record_failure(out: Path, job: Job, why: str, summary: Summary) -> None:
    summary.failures[job.key] = why
    record = {"student": job.student, "assignment": job.assignment, "path": job.path,
              "error": why}
    write_atomic(str(_failure_path(out, job.key)), json.dumps(record, indent=1) + "\n")


def describe(summary: Summary, out) -> str:
    """The closing lines of a batch, for the instructor."""
    lines = [f"{summary.graded} graded now, {summary.reused} already graded, "
             f"{len(summary.failures)} not graded (seed {summary.seed}); results in "
             f"{Path(out) / 'results'}, grades in {Path(out) / 'grades.csv'}"]
    if summary.failures:
        lines.append(f"the grader failed on {len(summary.failures)} submission(s), recorded in "
                     f"{Path(out) / 'failures'}; fix the cause and run the same command again:")
        lines += [f"  {key}: {why}" for key, why in sorted(summary.failures.items())[:10]]
    return "\n".join(lines)


GRADES_COLUMNS = ("student", "assignment", "score", "max_score", "status", "diagnoses",
                  "submission", "message")


def write_grades(out: Path, jobs: list[Job]) -> None:
    """grades.csv, one row per student found, from the result files on disk."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(GRADES_COLUMNS)
    for job in jobs:
        writer.writerow(_grades_row(out, job))
    write_atomic(str(out / "grades.csv"), buffer.getvalue())


def _grades_row(out: Path, job: Job) -> list:
    base = [job.student, job.assignment]
    try:
        data = json.loads(_result_path(out, job.key).read_text(encoding="utf-8"))
        codes = ";".join(d["code"] for d in data.get("diagnoses", []))
        return base + [data["score"], data["max_score"], "graded", codes,
                       data.get("submission", ""), ""]
    except (OSError, ValueError, KeyError):
        pass
    try:
        why = json.loads(_failure_path(out, job.key).read_text(encoding="utf-8"))["error"]
        return base + ["", "", "grader-failed", "", "", why]
    except (OSError, ValueError, KeyError):
        return base + ["", "", "not-graded", "", "", "interrupted before it was graded"]


def load_results(out) -> list[dict]:
    """Every result in an output folder, with its key (for the class report)."""
    folder = Path(out) / "results"
    found = []
    for path in sorted(folder.rglob("*.json")):
        if path.name.startswith("."):
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        found.append(dict(data, key=str(path.relative_to(folder).with_suffix(""))))
    return found
