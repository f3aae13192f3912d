"""The grader's own files must not change while it grades, and no bytecode may stand in for them.

``digest()`` hashes every file of ``autograder/`` and ``solutions/`` (sources, the rubric)
and refuses (``TamperedError``) when bytecode sits there that Python would run instead of a
source and that is not that source's compilation: a ``__pycache__`` ``.pyc`` whose header
Python accepts (a forged timestamp, an unchecked hash) but whose code differs, or a code
file with no source (a ``.so``, a sourceless ``.pyc``) that an import could pick up. So the
digest covers what is actually loaded: a source, or bytecode proved equal to it. A stale
``.pyc`` (Python would recompile it) is harmless and only listed by ``python -m autograder
audit``; a valid one, which Python writes itself at any time, changes nothing.

``autograder/__init__.py`` loads the grader's packages from their sources only, so planted
bytecode is never run by the grader's own process; the sandbox's interpreter reads its
modules' ``.pyc`` as Python does, which is why the check is made before every grading.
``load_grader()`` imports the whole grader at once, before any student code can run.
"""
from __future__ import annotations

import _imp
import contextlib
import hashlib
import importlib
import importlib.util
import marshal
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WATCHED = ("autograder", "solutions")
#: Never imported by the grader's process: the command line's entry point, the sandbox's
#: own interpreter (it imports its modules as top-level names).
NOT_IMPORTED = ("autograder/__main__.py", "autograder/sandbox/")
#: Code files an import can load with no source beside them.
CODE_SUFFIXES = (".so", ".pyd", ".pyc")
FOREIGN, STALE, ORPHAN = "foreign", "stale", "orphan"
_VERDICTS: dict[tuple, str | None] = {}


class TamperedError(Exception):
    """The grader's files changed during grading, or bytecode stands in for them: no score."""


@dataclass(frozen=True)
class Finding:
    """A bytecode file of the grader that is not simply its source's compilation."""
    path: str        #: relative to the project's root
    verdict: str     #: FOREIGN (Python would run it; not the source's code), STALE, ORPHAN
    why: str

    def to_dict(self) -> dict:
        return {"path": self.path, "verdict": self.verdict, "why": self.why}


def _source_of(pyc: Path) -> tuple[Path, int] | None:
    """(source, optimisation level) of a ``__pycache__`` file of this interpreter, else None."""
    parts = pyc.name.split(".")
    if len(parts) < 3 or parts[1] != sys.implementation.cache_tag:
        return None
    level = int(parts[2][4:]) if parts[2].startswith("opt-") and parts[2][4:].isdigit() else 0
    return pyc.parent.parent / f"{parts[0]}.py", level


def _would_load(data: bytes, source: Path, source_bytes: bytes) -> bool:
    """Whether this interpreter's import would run this ``.pyc`` for that source
    (importlib's own checks: magic number, then the timestamp and size, or the hash)."""
    if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags = int.from_bytes(data[4:8], "little")
    if flags & 0b1:                                    # hash-based
        checked = _imp.check_hash_based_pycs == "always" or (
            _imp.check_hash_based_pycs == "default" and flags & 0b10)
        return not checked or data[8:16] == importlib.util.source_hash(source_bytes)
    stat = source.stat()
    return (int.from_bytes(data[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(data[12:16], "little") == stat.st_size & 0xFFFFFFFF)


def _verdict(pyc: Path) -> str | None:
    """FOREIGN, STALE, ORPHAN, or None for a ``.pyc`` equal to its source's compilation."""
    found = _source_of(pyc)
    if found is None:
        return None                                    # another interpreter's: never ours
    source, level = found
    if not source.is_file():
        return ORPHAN
    data, source_bytes = pyc.read_bytes(), source.read_bytes()
    key = (hashlib.sha256(data).digest(), hashlib.sha256(source_bytes).digest(), level,
           source.stat().st_mtime_ns, _imp.check_hash_based_pycs)
    if key not in _VERDICTS:
        _VERDICTS[key] = _classify(data, source, source_bytes, level)
    return _VERDICTS[key]


def _classify(data: bytes, source: Path, source_bytes: bytes, level: int) -> str | None:
    if not _would_load(data, source, source_bytes):
        return STALE
    try:
        planted = marshal.loads(data[16:])
        honest = compile(source_bytes, str(source), "exec", dont_inherit=True, optimize=level)
    except (ValueError, EOFError, TypeError, SyntaxError):
        return FOREIGN
    return None if planted == honest else FOREIGN


def bytecode_findings(root: Path = ROOT) -> list[Finding]:
    """Every bytecode file of the grader's folders that is not its source's compilation."""
    found = []
    for folder in WATCHED:
        for path in sorted((root / folder).rglob("*")):
            if not path.is_file() or not path.name.endswith(CODE_SUFFIXES):
                continue
            rel = str(path.relative_to(root))
            if path.parent.name != "__pycache__":
                found.append(Finding(rel, FOREIGN, "a code file with no source, which an "
                                     "import could load in place of the grader's modules"))
                continue
            verdict = _verdict(path)
            if verdict == FOREIGN:
                found.append(Finding(rel, FOREIGN, "Python would run it in place of its source, "
                                     "but it is not that source's compilation"))
            elif verdict == STALE:
                found.append(Finding(rel, STALE, "out of date: Python recompiles its source"))
            elif verdict == ORPHAN:
                found.append(Finding(rel, ORPHAN, "its source is gone: never loaded"))
    return found


def refuse_planted(root: Path = ROOT) -> None:
    """Raise TamperedError, naming the files, when foreign bytecode sits in the grader."""
    planted = [f for f in bytecode_findings(root) if f.verdict == FOREIGN]
    if planted:
        raise TamperedError(
            "planted bytecode in the grader: " + "; ".join(f"{f.path} ({f.why})" for f in planted)
            + ". Nothing is graded: delete those files (e.g. `find autograder solutions -name "
            "__pycache__ -exec rm -r {} +`), check the checkout (git status --ignored) and "
            "grade again")


def digest(root: Path = ROOT) -> str:
    """A hash of the grader's files, once no bytecode stands in for them (else TamperedError)."""
    refuse_planted(root)
    h = hashlib.sha256()
    for folder in WATCHED:
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(root)).encode())
                h.update(path.read_bytes())
    return h.hexdigest()


def load_grader() -> list[str]:
    """Import every module of the grader's process and the reference now, so that nothing of
    the grader is first read from disk after student code could have run; returns the
    modules left out because an optional dependency (nbgrader, dask) is missing."""
    missing = []
    names = [".".join(p.relative_to(ROOT).with_suffix("").parts)
             for p in sorted((ROOT / "autograder").rglob("*.py"))
             if "__pycache__" not in p.parts
             and not str(p.relative_to(ROOT).as_posix()).startswith(NOT_IMPORTED)]
    for name in [n.removesuffix(".__init__") for n in names] + ["solutions", "solutions.mha"]:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] in WATCHED:
                raise
            missing.append(name)
    from . import checks
    checks.load_all()
    return missing


def loaded_from_elsewhere() -> list[str]:
    """Modules of the grader's packages that were not loaded from this project's sources."""
    wrong = []
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] not in WATCHED:
            continue
        origin = getattr(getattr(module, "__spec__", None), "origin", None) or ""
        path = Path(origin).resolve() if origin else None
        if path is None or path.suffix != ".py" or not any(
                path.is_relative_to(ROOT / w) for w in WATCHED):
            wrong.append(f"{name} ({origin or 'no file'})")
    return wrong


@contextlib.contextmanager
def guard():
    before = digest()
    yield
    if digest() != before:
        raise TamperedError("the grader's own files changed while grading; the result is "
                            "not trustworthy and was not reported")
