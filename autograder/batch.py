"""Grading a class: grade every submission below a folder that is not graded yet, and
write one result per student plus ``grades.csv`` (see ``outfolder`` for the layout).

    roster.discover -> roster.plan -> executor.run (in parallel) -> outfolder writes

A run killed at any moment (Ctrl-C, ``kill -9``) is finished by running the same command
again. Results are written by this process only, after a check that the grader's own files
are unchanged.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from . import integrity, outfolder
from .outfolder import BatchError
from .roster import Job, Task, discover, plan

CHECK_EVERY = 0.5               #: seconds between checks that the grader's files are intact


@dataclass
class Summary:
    """What a run did, for its closing lines and exit status."""

    total: int
    reused: int = 0                                  #: already graded by an earlier run
    graded: int = 0                                  #: graded by this run
    failures: dict = field(default_factory=dict)     #: key -> why the grader failed on it
    seed: int = 0


def run(root, out, *, seed=None, rubric=None, device="auto", assignment=None,
        executor=None, progress=None, secret: str = "") -> Summary:
    """Grade every submission below ``root`` not yet graded into ``out``.

    ``executor(options)`` returns an object with ``run(tasks)`` (yielding ``(task, outcome)``
    as they finish) and ``close()``; the default grades here, in threads. With the course's
    ``secret``, each student is graded against their own variant (``autograder.variants``).
    """
    root, out = Path(root).resolve(), Path(out).resolve()
    if not root.is_dir():
        raise BatchError(f"{root}: no such folder")
    jobs = discover(root, assignment=assignment, exclude=[out])
    if not jobs:
        raise BatchError(f"{root}: no submission found (.py or .ipynb files, one folder per "
                         "student, or an nbgrader submitted/ tree)")
    with outfolder.Lock(out):
        chosen = outfolder.settings(out, seed=seed, rubric=rubric, device=device)
        outfolder.sweep(out)
        todo, done, unreadable = plan(jobs, out)
        summary = Summary(total=len(jobs), reused=len(done), seed=chosen["seed"])
        for job, why in unreadable:
            _record_failure(out, job, why, summary)
        options = {"seed": chosen["seed"], "device": device, "hide": [str(root), str(out)],
                   "rubric_text": chosen["rubric_text"], "secret": secret}
        _grade(todo, out, options, executor, progress, summary)
        outfolder.write_grades(out, jobs)
    return summary


def _grade(todo, out, options, executor, progress, summary) -> None:
    """Grade each distinct submission once; identical ones (same digest) share its result."""
    if not todo:
        if progress:
            progress.start(todo=0, already=summary.reused)
        return
    twins: dict[tuple, list[Task]] = {}
    for task in todo:       # with variants, one student's copy of another's is graded as theirs
        twins.setdefault(_twin(task, options), []).append(task)
    if executor is None:
        from .executors import LocalExecutor as executor
    engine = executor(options)
    if progress:                                 # after the start-up: the ETA counts grading only
        progress.start(todo=len(todo), already=summary.reused)
    pending: list = []
    before, checked = integrity.digest(), time.monotonic()
    try:
        for first, outcome in engine.run([group[0] for group in twins.values()]):
            for task in twins[_twin(first, options)]:
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


def _twin(task, options) -> tuple:
    """Tasks graded once for all: the same code, and (with variants) the same student."""
    return (task.digest, task.job.student if options.get("secret") else "")


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
        outfolder.write_result(out, task.job, task.digest, task.file, report)
        summary.failures.pop(task.job.key, None)
        summary.graded += 1
    pending.clear()


def _record_failure(out: Path, job: Job, why: str, summary: Summary) -> None:
    summary.failures[job.key] = why
    outfolder.write_failure(out, job, why)


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
