"""Who is in the class: every submission below a folder, and what is left to grade.

Three layouts are recognised. An nbgrader tree (``submitted/<student>/<assignment>/``)
gives one job per student and assignment. Otherwise each ``.py``/``.ipynb`` file directly
in the folder is a student (by its stem), and each sub-folder is one (GitHub Classroom
clones one repository per student). Nothing here runs student code.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from . import outfolder, submission
from .outfolder import BatchError

SUFFIXES = (".py", ".ipynb")


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
                  and _resolved(e) not in skip)


def _resolved(entry: Path) -> Path:
    """Where an entry leads; a link loop leads nowhere (its load then says so)."""
    try:
        return entry.resolve()
    except (OSError, RuntimeError):
        return entry


def plan(jobs: list[Job], out: Path) -> tuple[list[Task], list[Task], list[tuple[Job, str]]]:
    """(to grade, already graded, [(unreadable job, why)]). Reads submissions, runs nothing."""
    todo, done, unreadable = [], [], []
    for job in jobs:
        try:                                 # the student's file's faults are its problem
            sub = submission.load(job.path)
        except (submission.LoadError, OSError) as e:
            unreadable.append((job, str(e)))
            continue
        h = hashlib.sha256(_bytes(sub.name) + b"\0" + sub.source + b"\0" + _bytes(sub.problem or ""))
        task = Task(job, sub.path, h.hexdigest())
        (done if outfolder.complete(out, task.job.key, task.digest) else todo).append(task)
    return todo, done, unreadable


def _bytes(text: str) -> bytes:
    """A name or message as bytes, even one holding a file name that is not UTF-8."""
    return text.encode("utf-8", "surrogatepass")
