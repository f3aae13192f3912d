"""Who is in the class: every submission below a folder, and what is left to grade.

Three layouts are recognised. An nbgrader tree (``submitted/<student>/<assignment>/``)
gives one job per student and assignment. Otherwise each ``.py``/``.ipynb`` file directly
in the folder is a student (by its stem), and each sub-folder is one (GitHub Classroom
clones one repository per student). Nothing here runs student code.
"""
from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field
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
    """A job resolved to the file that will be graded, and a digest of what the result
    depends on (code, file name, load notes and problem, the choice of the file)."""

    job: Job
    file: str
    digest: str
    notes: tuple = ()       #: why this file was graded (a folder with mha.py and mha.ipynb)
    #: the student's variant as plain data (``variants.Variant`` fields), or None
    variant: dict | None = field(default=None, compare=False)


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
            path, chosen = choose(Path(job.path))
            sub = submission.load(path)
        except (submission.LoadError, OSError) as e:
            unreadable.append((job, str(e)))
            continue
        task = Task(job, sub.path, digest(sub, chosen), chosen)
        (done if outfolder.complete(out, task.job.key, task.digest) else todo).append(task)
    return todo, done, unreadable


def digest(sub, chosen=()) -> str:
    """A digest of everything the result depends on that differs between students: the file's
    name and code, what loading it noted or found wrong, and why this file was chosen."""
    h = hashlib.sha256()
    for piece in (sub.name, sub.source, sub.problem or "", *sub.notes, "\0\0", *chosen):
        h.update((piece if isinstance(piece, bytes) else _bytes(piece)) + b"\0")
    return h.hexdigest()


def _bytes(text: str) -> bytes:
    """A name or message as bytes, even one holding a file name that is not UTF-8."""
    return text.encode("utf-8", "surrogatepass")


# ---------------------------------------------------------------------------------------
# mha.py or mha.ipynb: a Classroom clone holds both, and the student worked in one

def choose(path: Path) -> tuple[Path, tuple[str, ...]]:
    """The path to load, and a note saying why, where a folder holds both mha.py and
    mha.ipynb: the one in which more of the API is implemented (not an untouched stub);
    mha.py when both hold as much (as ``submission.load`` would pick)."""
    if not path.is_dir():
        return path, ()
    module, notebook = _first(path, "mha.py"), _first(path, "mha.ipynb")
    if module is None or notebook is None:
        return path, ()
    work = {p: implemented(submission.load(p)) for p in (module, notebook)}
    pick = notebook if work[notebook] > work[module] else module
    other = module if pick is notebook else notebook
    why = (f"{pick.name} was graded, not {other.name}: it holds the work ({work[pick]} of "
           f"{len(submission.API)} parts implemented, {work[other]} in {other.name}"
           + (", an untouched stub)" if work[other] == 0 else ")"))
    if work[pick] == work[other]:
        why = (f"{pick.name} was graded: {other.name} beside it holds as much work "
               f"({work[pick]} of {len(submission.API)} parts implemented in each)")
    return pick, (why,)


def _first(folder: Path, name: str) -> Path | None:
    """The first file called ``name`` below ``folder``, as ``submission.load`` searches."""
    for found in sorted(folder.rglob(name)):
        parts = found.relative_to(folder).parts
        if found.is_file() and not any(p.startswith(".") or p == "__pycache__" for p in parts):
            return found
    return None


def implemented(sub) -> int:
    """How many parts of the API the code defines with a body that does not raise
    NotImplementedError (the stub's body); MultiHeadAttention counts once any method does."""
    if sub.problem and not sub.source:
        return 0
    try:
        tree = submission.parse(sub.source)
    except (SyntaxError, ValueError):
        return 0
    done: dict[str, bool] = {}                  # a name defined twice: the last one stands
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in submission.API:
            done[node.name] = not _stub(node)
        elif isinstance(node, ast.ClassDef) and node.name in submission.API:
            done[node.name] = any(isinstance(m, ast.FunctionDef) and not _stub(m)
                                  for m in node.body)
    return sum(done.values())


def _stub(function: ast.FunctionDef) -> bool:
    """Whether the function's body raises NotImplementedError at its top level."""
    for statement in function.body:
        if isinstance(statement, ast.Raise) and statement.exc is not None:
            raised = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
            if isinstance(raised, ast.Name) and raised.id == "NotImplementedError":
                return True
    return False
