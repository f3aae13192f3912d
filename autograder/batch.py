"""Grading a class: grade every submission below a folder that is not graded yet, and
write one result per student plus ``grades.csv`` (see ``outfolder`` for the layout).

    course_settings -> roster.discover -> roster.plan -> executor.run (in parallel)
        -> outfolder writes

On an nbgrader course (the folder, or the parent of its ``submitted/``, holds
``nbgrader_config.py``) the course's ``TrustedGrades`` settings are read as ``audit``
reads them: the variant secret, seed, device and rubric, for what the command line does
not give; a course whose config names a secret that cannot be read is refused.

A run killed at any moment (Ctrl-C, ``kill -9``) is finished by running the same command
again. Results are written by this process only, after a check that the grader's own files
are unchanged.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from . import integrity, outfolder, variants
from .outfolder import BatchError
from .roster import Job, Task, discover, plan

CONFIG = "nbgrader_config.py"

CHECK_EVERY = 0.5               #: seconds between checks that the grader's files are intact


@dataclass
class Summary:
    """What a run did, for its closing lines and exit status."""

    total: int
    reused: int = 0                                  #: already graded by an earlier run
    graded: int = 0                                  #: graded by this run
    failures: dict = field(default_factory=dict)     #: key -> why the grader failed on it
    seed: int = 0
    course: str = ""                                 #: what was read from the course's config


def run(root, out, *, seed=None, rubric=None, device="auto", assignment=None,
        executor=None, progress=None, secret: str | None = None) -> Summary:
    """Grade every submission below ``root`` not yet graded into ``out``.

    ``executor(options)`` returns an object with ``run(tasks)`` (yielding ``(task, outcome)``
    as they finish) and ``close()``; the default grades here, in threads. With the course's
    ``secret``, each student is graded against their own variant (``autograder.variants``);
    None: the course's own (its ``nbgrader_config.py``), else ``$MHA_VARIANT_SECRET``.
    """
    root, out = Path(root).resolve(), Path(out).resolve()
    if not root.is_dir():
        raise BatchError(f"{root}: no such folder")
    course = course_settings(root)
    if secret is None:
        secret = course["variant_secret"] if "variant_secret" in course else \
            variants.secret_from()
    seed = course.get("seed") if seed is None else seed
    rubric = rubric or course.get("rubric") or None
    device = course.get("device", device) if device == "auto" else device
    jobs = discover(root, assignment=assignment, exclude=[out])
    if not jobs:
        raise BatchError(f"{root}: no submission found (.py or .ipynb files, one folder per "
                         "student, or an nbgrader submitted/ tree)")
    with outfolder.Lock(out):
        chosen = outfolder.settings(out, seed=seed, rubric=rubric, device=device)
        outfolder.sweep(out)
        todo, done, unreadable = plan(jobs, out)
        summary = Summary(total=len(jobs), reused=len(done), seed=chosen["seed"],
                          course=course.get("said", ""))
        for job, why in unreadable:
            _record_failure(out, job, why, summary)
        # What the executors (and Dask's workers) get: never the course's secret. Each
        # student's variant (numbers and seed) is derived here and travels with the task.
        options = {"seed": chosen["seed"], "device": device,
                   "hide": [str(root), str(out)] + _config_files(root),
                   "rubric_text": chosen["rubric_text"]}
        todo = [with_variant(task, secret) for task in todo]
        _grade(todo, out, options, executor, progress, summary)
        outfolder.write_grades(out, jobs)
    return summary


def course_config(root: Path) -> Path | None:
    """The course's nbgrader_config.py, if ``root`` is a course or its submitted/ folder."""
    for folder in (root, root.parent) if root.name == "submitted" else (root,):
        if (folder / CONFIG).is_file():
            return folder / CONFIG
    return None


def course_settings(root: Path) -> dict:
    """The course's TrustedGrades settings ({} where ``root`` is no nbgrader course), read
    as nbgrader reads them (the file is run: it is the course's own)."""
    path = course_config(root)
    if path is None:
        return {}
    try:
        from traitlets.config.loader import PyFileConfigLoader
        ours = PyFileConfigLoader(path.name, path=str(path.parent)).load_config().TrustedGrades
    except Exception as e:          # noqa: BLE001 — the course's file raised, or no traitlets
        if "variant_secret" in path.read_text(encoding="utf-8", errors="replace"):
            raise BatchError(
                f"{path} sets the course's variant secret (c.TrustedGrades.variant_secret), but "
                f"it could not be read ({type(e).__name__}: {e}); without it every student would "
                "be graded against the generic numbers. Fix the file (or install nbgrader), or "
                "give the secret with --course-config FILE or $MHA_VARIANT_SECRET") from None
        return {"said": f"{path} could not be read ({type(e).__name__}); its settings are not used"}
    rubric = str(ours.get("rubric", "") or "")
    if rubric and not Path(rubric).is_absolute():
        rubric = str(path.parent / rubric)
    secret = ours.get("variant_secret", "")
    settings = {"variant_secret": secret if isinstance(secret, str) else "",
                "seed": int(ours.get("seed", 0)), "device": str(ours.get("device", "auto")),
                "rubric": rubric}
    settings["said"] = (f"settings of {path}: seed {settings['seed']}, device "
                        f"{settings['device']}, rubric {rubric or 'the default'}, variants "
                        f"{'on (each student graded against their own)' if settings['variant_secret'] else 'off'}")
    return settings


def _grade(todo, out, options, executor, progress, summary) -> None:
    """Grade each distinct submission once; identical ones (same digest) share its result."""
    if not todo:
        if progress:
            progress.start(todo=0, already=summary.reused)
        return
    twins: dict[tuple, list[Task]] = {}
    for task in todo:       # with variants, one student's copy of another's is graded as theirs
        twins.setdefault(_twin(task), []).append(task)
    if executor is None:
        from .executors import LocalExecutor as executor
    engine = executor(options)
    if progress:                                 # after the start-up: the ETA counts grading only
        progress.start(todo=len(todo), already=summary.reused)
    pending: list = []
    before, checked = integrity.digest(), time.monotonic()
    try:
        for first, outcome in engine.run([group[0] for group in twins.values()]):
            for task in twins[_twin(first)]:
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


def _twin(task) -> tuple:
    """Tasks graded once for all: the same digest (code, file name, load notes and
    problems: ``roster.plan``) and the same variant (with variants: the same student)."""
    return (task.digest, json.dumps(task.variant, sort_keys=True))


def with_variant(task: Task, secret: str) -> Task:
    """The task with its student's variant (plain data: numbers and a seed, no secret)."""
    if not secret:
        return task
    return replace(task, variant=asdict(variants.derive(task.job.student, secret)))


def _config_files(root: Path) -> list[str]:
    """The course's config file, hidden from the sandboxes even where its folder is not."""
    path = course_config(root)
    return [str(path)] if path else []


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
        if task.notes:                      # why this file of the folder was graded
            report = dict(report, notes=list(task.notes) + list(report.get("notes", [])))
        outfolder.write_result(out, task.job, task.digest, task.file, report)
        summary.failures.pop(task.job.key, None)
        summary.graded += 1
    pending.clear()


def _record_failure(out: Path, job: Job, why: str, summary: Summary) -> None:
    summary.failures[job.key] = why
    outfolder.write_failure(out, job, why)


def describe(summary: Summary, out) -> str:
    """The closing lines of a batch, for the instructor."""
    lines = [summary.course] if summary.course else []
    lines += [f"{summary.graded} graded now, {summary.reused} already graded, "
             f"{len(summary.failures)} not graded (seed {summary.seed}); results in "
             f"{Path(out) / 'results'}, grades in {Path(out) / 'grades.csv'}"]
    if summary.failures:
        lines.append(f"the grader failed on {len(summary.failures)} submission(s), recorded in "
                     f"{Path(out) / 'failures'}; fix the cause and run the same command again:")
        lines += [f"  {key}: {why}" for key, why in sorted(summary.failures.items())[:10]]
    return "\n".join(lines)
