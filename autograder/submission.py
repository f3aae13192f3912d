"""Loading a submission: a .py module, a notebook's graded cells, or a folder holding one.

Nothing here runs student code: sources are read, decoded and compiled (compiling runs
nothing), so that syntax and encoding problems get clear messages before any sandbox.
"""
from __future__ import annotations

import ast
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

MAX_BYTES = 2 << 20                 #: a submission's source above this is refused
API = ("head_weight_shape", "project", "project_heads", "split_heads", "concat_heads",
       "masked_softmax", "attention_pool", "MultiHeadAttention")


class LoadError(Exception):
    """The path given is not a submission at all (a usage problem, not a student mistake)."""


@dataclass(frozen=True)
class Submission:
    name: str                       #: what the report calls it (file name)
    path: str                       #: where it was read from
    source: bytes                   #: the Python code the sandbox imports (may be empty)
    notes: tuple[str, ...] = ()     #: what was dropped or fixed while loading, for the student
    problem: str | None = None      #: why nothing can be imported (syntax error, encoding ...)
    cells: tuple = field(default=(), compare=False)  #: notebook: (grade_id, first line) per kept cell


def load(path: str | os.PathLike) -> Submission:
    path = Path(path)
    if path.is_dir():
        path = _find_in_folder(path)
    if not path.is_file():
        raise LoadError(f"{path}: no such file")
    if path.suffix == ".ipynb":
        return _load_notebook(path)
    if path.suffix != ".py":
        raise LoadError(f"{path}: a submission is a .py file, an .ipynb notebook or a folder "
                        "holding one")
    data = _read(path)
    problem = _compile_problem(data, path.name) if data is not None else \
        f"{path.name} is larger than {MAX_BYTES // 1024} KiB; submit only your mha.py"
    if problem is None and not data.strip():
        problem = f"{path.name} is empty: it defines none of the API names ({', '.join(API)})"
    return Submission(name=path.name, path=str(path), source=data or b"", problem=problem)


def _read(path: Path) -> bytes | None:
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    return None if len(data) > MAX_BYTES else data


def _find_in_folder(folder: Path) -> Path:
    """mha.py first, then a single .py or .ipynb; symlinks leading outside are ignored."""
    root = folder.resolve()

    def inside(p: Path) -> bool:
        try:
            return p.resolve().is_relative_to(root) and p.is_file()
        except OSError:
            return False
    candidates = [p for p in sorted(folder.rglob("*"))
                  if p.suffix in (".py", ".ipynb") and inside(p)
                  and not any(part.startswith(".") or part == "__pycache__"
                              for part in p.relative_to(folder).parts)
                  and not p.name.startswith("test")]
    for preferred in ("mha.py", "mha.ipynb"):
        for p in candidates:
            if p.name == preferred:
                return p
    notebooks = [p for p in candidates if p.suffix == ".ipynb"]
    pick = notebooks or candidates
    if len(pick) == 1:
        return pick[0]
    if not pick:
        raise LoadError(f"{folder}: holds no .py or .ipynb submission")
    raise LoadError(f"{folder}: holds several candidates ({', '.join(p.name for p in pick[:5])}); "
                    "name the file to grade, or call it mha.py")


def _compile_problem(data: bytes, filename: str) -> str | None:
    try:
        compile(data, filename, "exec", dont_inherit=True)
    except SyntaxError as e:
        return _syntax_message(e, filename)
    except (ValueError, UnicodeDecodeError) as e:         # NUL bytes, bad encodings
        return f"{filename} could not be read as Python: {e}"
    return None


def _syntax_message(e: SyntaxError, filename: str) -> str:
    reason = e.msg or "invalid syntax"
    if "utf-8" in reason.lower() or "non-utf-8" in reason.lower() or "decode" in reason.lower():
        where = f" (line {e.lineno})" if e.lineno else ""
        return (f"{filename} is not valid UTF-8 text{where}: {reason}. Save the file as UTF-8 "
                "(most editors: 'Save with encoding' → UTF-8) and submit it again.")
    line = (e.text or "").strip()
    shown = f"\n    {line[:120]}" if line else ""
    return (f"syntax error in {filename}, line {e.lineno}: {reason}{shown}\n"
            "Python cannot import the file, so no check could run; fix this line and submit again.")


# ---------------------------------------------------------------------------------------
# Notebooks

def _load_notebook(path: Path) -> Submission:
    data = _read(path)
    if data is None:
        return Submission(path.name, str(path), b"", problem=f"{path.name} is too large")
    try:
        nb = json.loads(data.decode("utf-8"))
        cells = nb["cells"]
        if not isinstance(cells, list):
            raise TypeError
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        return Submission(path.name, str(path), b"", problem=(
            f"{path.name} is not a valid notebook (not JSON with a list of cells). Open it in "
            "Jupyter, save it again, and resubmit the .ipynb file."))
    graded = any(_nbgrader(c).get("solution") for c in cells if isinstance(c, dict))
    kept, notes, ids = [], [], []
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        meta = _nbgrader(cell)
        if graded and not (meta.get("solution") or _is_setup(meta)):
            continue
        if not graded and _looks_like_test(cell):
            continue
        code, dropped = _strip_magics(_text(cell.get("source", "")))
        label = meta.get("grade_id") or f"cell {index + 1}"
        if dropped:
            notes.append(f"{label}: dropped {dropped} IPython magic or shell line(s); they are "
                         "never run by the grader")
        problem = _compile_problem(code.encode(), f"{path.name} ({label})")
        if problem:
            notes.append(f"{label} was left out: {problem}")
            continue
        kept.append(f"# --- {label} ---\n{code}\n")
        ids.append(label)
    source = "\n".join(kept).encode()
    problem = None if kept else f"{path.name} has no code cell that could be graded"
    return Submission(path.name, str(path), source, tuple(notes), problem, tuple(ids))


def _nbgrader(cell: dict) -> dict:
    meta = cell.get("metadata", {})
    meta = meta.get("nbgrader", {}) if isinstance(meta, dict) else {}
    return meta if isinstance(meta, dict) else {}


def _is_setup(meta: dict) -> bool:
    """Locked, ungraded code cells (the notebook's imports) are kept; test cells are not."""
    return bool(meta.get("locked")) and not meta.get("grade") and not meta.get("solution")


def _looks_like_test(cell: dict) -> bool:
    code = _text(cell.get("source", ""))
    return code.lstrip().startswith(("assert", "# test", "#test")) or "\nassert " in code


def _text(source) -> str:
    if isinstance(source, list):
        return "".join(s for s in source if isinstance(s, str))
    return source if isinstance(source, str) else ""


def _strip_magics(code: str) -> tuple[str, int]:
    lines, dropped = [], 0
    for line in code.splitlines():
        if line.lstrip().startswith(("%", "!")):
            indent = line[:len(line) - len(line.lstrip())]
            lines.append(f"{indent}pass  # IPython line left out" if indent else "")
            dropped += 1
        else:
            lines.append(line)
    return "\n".join(lines), dropped


def defined_names(source: bytes) -> set[str]:
    """Top-level names a source defines, read without running it."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
