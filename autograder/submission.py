"""Loading a submission: a .py module, a notebook's graded cells, or a folder holding one.

Nothing here runs student code: sources are read, decoded and compiled (compiling runs
nothing), so that syntax and encoding problems get clear messages before any sandbox.
"""
from __future__ import annotations

import ast
import io
import json
import os
import re
import shutil
import tempfile
import threading
import tokenize
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import archives

MAX_BYTES = 2 << 20                 #: a submission's source above this is refused
MAX_NOTEBOOK_BYTES = 32 << 20       #: a notebook may carry outputs (plots), so more
MAX_NOTEBOOK_DEPTH = 200            #: JSON nesting; Jupyter's own notebooks need about ten
MAX_CELLS = 2000                    #: the assignment's notebook has about 50 cells
MAX_CELL_NOTES = 50                 #: notes on single cells a report lists, then one "and N more"
JSON_ESCAPE = re.compile(rb"\\.", re.S)   #: an escaped character: \" does not end a string
CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=]", re.M)      #: PEP 263 declaration
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
    """The submission at ``path``. Whatever is wrong with the student's file (too deep, too
    large, not UTF-8, not JSON, anything that makes reading it raise) is that submission's
    ``problem``, graded as zero with the reason; only a path that is no submission at all
    (``LoadError``) or cannot be read by this process (``OSError``) raises."""
    try:
        return _load(Path(path))
    except (LoadError, OSError):
        raise
    except Exception as e:                   # noqa: BLE001 — RecursionError, MemoryError, ...
        name = Path(path).name
        return Submission(name=name, path=str(path), source=b"", problem=(
            f"{name} could not be read ({type(e).__name__}{': ' if str(e) else ''}"
            f"{str(e)[:200]}), so no check could run; save it again in Jupyter or your editor "
            "and resubmit"))


def _load(path: Path) -> Submission:
    if path.is_file() and archives.is_archive(path):
        return _load_archive(path)
    notes: tuple[str, ...] = ()
    if path.is_dir():
        path, notes, problem = _find_in_folder(path)
        if problem:
            return Submission(name=path.name, path=str(path), source=b"", notes=notes,
                              problem=problem)
    if not path.is_file():
        raise LoadError(f"{path}: no such file")
    if path.suffix == ".ipynb":
        sub = _load_notebook(path)
        return replace(sub, notes=notes + sub.notes)
    if path.suffix != ".py":
        raise LoadError(f"{path}: a submission is a .py file, an .ipynb notebook, a folder "
                        "holding one, or a .zip/.tar(.gz) archive of such a folder")
    data = _read(path, MAX_BYTES)
    problem = _compile_problem(data, path.name) if data is not None else \
        f"{path.name} is larger than {MAX_BYTES >> 20} MiB; submit only your mha.py"
    if problem is None and not data.strip():
        problem = f"{path.name} is empty: it defines none of the API names ({', '.join(API)})"
    bad = _utf8_problem(data) if problem is None and not CODING.search(data[:400]) else None
    if bad:                       # only in comments: Python imports it, so it is graded
        notes += (f"{path.name} is not valid UTF-8: byte 0x{bad[2]:02X} at offset {bad[0]} "
                  f"(line {bad[1]}). Python imports it anyway (the byte is in a comment), but "
                  "save the file as UTF-8.",)
    return Submission(name=path.name, path=str(path), source=data or b"", notes=notes,
                      problem=problem)


def _read(path: Path, limit: int) -> bytes | None:
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    return None if len(data) > limit else data


def _load_archive(path: Path) -> Submission:
    """Extract the .py/.ipynb files of an archive into a temporary folder, then load that."""
    folder = Path(tempfile.mkdtemp(prefix="autograder-archive-"))
    try:
        try:
            notes = archives.extract(path, folder, max_file=MAX_NOTEBOOK_BYTES)
        except archives.ArchiveError as e:
            return Submission(name=path.name, path=str(path), source=b"", problem=str(e))
        try:
            sub = load(folder)
        except LoadError as e:
            return Submission(name=path.name, path=str(path), source=b"", notes=tuple(notes),
                              problem=str(e).replace(str(folder), path.name))
        inner = Path(sub.path).relative_to(folder)
        return replace(sub, name=f"{path.name}:{inner}", path=str(path),
                       notes=tuple(notes) + sub.notes)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _find_in_folder(folder: Path) -> tuple[Path, tuple[str, ...], str | None]:
    """mha.py first, then a single .py or .ipynb. Links leading outside the folder are not
    read: a note names them, and if nothing else is left, that is the problem."""
    root = folder.resolve()
    candidates, outside = [], []
    for dirpath, dirnames, filenames in os.walk(folder):        # links to folders not followed
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        for name in sorted(filenames):
            p = Path(dirpath, name)
            if p.suffix not in (".py", ".ipynb") or name.startswith(("test", ".")):
                continue
            try:
                real = p.resolve()
            except (OSError, RuntimeError):                     # a link loop
                outside.append(p)
                continue
            if not real.is_relative_to(root):
                outside.append(p)
            elif p.is_file():
                candidates.append(p)
    notes = tuple(f"{p.relative_to(folder)} was not read: it is a symbolic link to a file "
                  "outside the submission's folder" for p in outside[:5])
    for preferred in ("mha.py", "mha.ipynb"):
        for p in candidates:
            if p.name == preferred:
                return p, notes, None
    notebooks = [p for p in candidates if p.suffix == ".ipynb"]
    pick = notebooks or candidates
    if len(pick) == 1:
        return pick[0], notes, None
    if not pick and outside:
        return outside[0], notes, (f"{outside[0].name} is a symbolic link to a file outside the "
                                   "submission's folder, so it was not read; submit the file "
                                   "itself, not a link to it")
    if not pick:
        raise LoadError(f"{folder}: holds no .py or .ipynb submission")
    raise LoadError(f"{folder}: holds several candidates ({', '.join(p.name for p in pick[:5])}); "
                    "name the file to grade, or call it mha.py")


def _compile_problem(data: bytes, filename: str) -> str | None:
    try:
        compile(data, filename, "exec", dont_inherit=True)
    except SyntaxError as e:
        return _syntax_message(e, filename, data)
    except (ValueError, UnicodeDecodeError) as e:         # NUL bytes, bad encodings
        return f"{filename} could not be read as Python: {e}"
    except (RecursionError, MemoryError):                 # absurdly nested expressions
        return f"{filename} is too deeply nested for Python to compile"
    return None


def _utf8_problem(data: bytes) -> tuple[int, int, int] | None:
    """(offset, line, byte) of the first byte that is not valid UTF-8, if any."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start, data.count(b"\n", 0, e.start) + 1, data[e.start]
    return None


def _syntax_message(e: SyntaxError, filename: str, data: bytes = b"") -> str:
    reason = e.msg or "invalid syntax"
    if "utf-8" in reason.lower() or "non-utf-8" in reason.lower() or "decode" in reason.lower():
        bad = _utf8_problem(data)
        where = (f" (byte 0x{bad[2]:02X} at offset {bad[0]}, line {bad[1]})"
                 if bad else f" (line {e.lineno})" if e.lineno else "")
        return (f"{filename} is not valid UTF-8 text{where}. Python refuses to run it. Save "
                "the file as UTF-8 (most editors: 'Save with encoding' → UTF-8) and submit it "
                "again.")
    line_no = f", line {e.lineno}" if e.lineno else ""
    return (f"syntax error in {filename}{line_no}: {reason}.{_quoted_line(e)}\n"
            "Python cannot import the file, so no check could run; fix this line and submit again.")


def _quoted_line(e: SyntaxError) -> str:
    """The offending line on a line of its own, indented as code (every writer keeps such a
    line apart from the sentence), with a caret under the column Python names."""
    text = (e.text or "").rstrip("\n")
    stripped = text.strip()
    if not stripped:
        return ""
    shown = "".join(ch if ch.isprintable() else "?" for ch in stripped[:120])
    offset = (e.offset or 0) - 1 - (len(text) - len(text.lstrip()))
    caret = f"\n    {' ' * offset}^" if 0 <= offset <= len(shown) else ""
    return f" The line:\n    {shown}{caret}"


# ---------------------------------------------------------------------------------------
# Notebooks

def _load_notebook(path: Path) -> Submission:
    data = _read(path, MAX_NOTEBOOK_BYTES)
    if data is None:
        return Submission(path.name, str(path), b"", problem=(
            f"{path.name} is larger than {MAX_NOTEBOOK_BYTES >> 20} MiB; clear its outputs "
            "(Kernel → Restart & Clear Output), save it and submit it again"))
    cells = data.count(b'"cell_type"')          # each cell has one; strings escape their quotes
    if cells > MAX_CELLS:                       # before parsing: 280,000 cells took 36 s
        return _too_many_cells(path, f"about {cells:,}")
    depth = json_depth(data, MAX_NOTEBOOK_DEPTH)
    if depth > MAX_NOTEBOOK_DEPTH:
        return Submission(path.name, str(path), b"", problem=(
            f"{path.name} is not a notebook the grader can read: its JSON is nested more than "
            f"{MAX_NOTEBOOK_DEPTH} levels deep (a notebook saved by Jupyter needs about ten). "
            "Open it in Jupyter, save it again, and resubmit the .ipynb file."))
    try:
        nb = json.loads(data.decode("utf-8"))
        cells = nb["cells"]
        if not isinstance(cells, list):
            raise TypeError
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError, MemoryError):
        return Submission(path.name, str(path), b"", problem=(
            f"{path.name} is not a valid notebook (not JSON with a list of cells). Open it in "
            "Jupyter, save it again, and resubmit the .ipynb file."))
    if len(cells) > MAX_CELLS:          # keys the count missed ("cell\u005ftype"), or none
        return _too_many_cells(path, f"{len(cells):,}")
    graded = any(_nbgrader(c).get("solution") for c in cells if isinstance(c, dict))
    kept, notes, ids, size = [], _cell_problems(cells), [], 0
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        meta = _nbgrader(cell)
        if graded and not (meta.get("solution") or _is_setup(meta)):
            continue
        if not graded and _looks_like_test(cell):
            continue
        code, dropped = _strip_magics(_text(cell.get("source", "")))
        label = _label(meta.get("grade_id")) or f"cell {index + 1}"
        unfit = _unfit_code(code)
        if unfit:
            notes.append(f"{label} was left out: {unfit}")
            continue
        if dropped:
            notes.append(f"{label}: dropped {dropped} IPython magic or shell line(s); they are "
                         "never run by the grader")
        problem = _compile_problem(code.encode(), f"{path.name} ({label})")
        if problem:
            notes.append(f"{label} was left out: {problem}")
            continue
        kept.append(f"# --- {label} ---\n{code}\n")
        ids.append(label)
        size += len(kept[-1])
        if size > MAX_BYTES:                 # no need to compile the rest: it is too much
            break
    if len(notes) > MAX_CELL_NOTES:
        notes[MAX_CELL_NOTES:] = [f"... and {len(notes) - MAX_CELL_NOTES:,} more notes like "
                                  "these on other cells"]
    source = "\n".join(kept).encode()
    problem = None if kept else f"{path.name} has no code cell that could be graded"
    if len(source) > MAX_BYTES:
        problem = (f"the code cells of {path.name} hold {len(source) >> 20} MiB of code, more "
                   f"than the {MAX_BYTES >> 20} MiB a submission may have; keep only your "
                   "solution in the graded cells")
    return Submission(path.name, str(path), source, tuple(notes), problem, tuple(ids))


def _too_many_cells(path: Path, count: str) -> Submission:
    return Submission(path.name, str(path), b"", problem=(
        f"{path.name} has {count} cells, more than the {MAX_CELLS:,} a notebook may have (the "
        "assignment's has about 50), so it was not read; keep your solution in the "
        "assignment's cells, delete the others, save it and submit it again"))


def json_depth(data: bytes, limit: int) -> int:
    """How deep the brackets of a JSON text nest (strings skipped): a cheap scan before
    ``json.loads``, whose recursion a deep enough text exhausts (RecursionError, or worse
    under a raised recursion limit). Linear in the size (no regular expression that can
    backtrack): about 20 ms per MiB."""
    import torch                             # the grader's own dependency, already imported
    unescaped = JSON_ESCAPE.sub(b"", data)   # left to right: a run of backslashes pairs off
    outside = b"".join(unescaped.split(b'"')[::2])          # every other piece is a string
    brackets = outside.translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    steps = torch.frombuffer(bytearray(brackets.translate(_STEPS)), dtype=torch.uint8)
    return int((1 - steps.to(torch.int32)).cumsum(0).max())   # "[" "{" +1, "]" "}" -1


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEPS = bytes.maketrans(b"[]{}", b"\x00\x02\x00\x02")


def _unfit_code(code: str) -> str | None:
    """Why a cell's text cannot be graded as Python source, if it cannot."""
    if len(code) > MAX_BYTES:
        return (f"it holds {len(code) >> 20} MiB of text, more than the {MAX_BYTES >> 20} MiB "
                "a submission may have")
    try:
        code.encode("utf-8")
    except UnicodeEncodeError as e:
        return (f"its text holds a character that is not valid Unicode (U+{ord(code[e.start]):04X}"
                f" at position {e.start}, a lone surrogate); retype that line")
    return None


def _label(grade_id) -> str:
    """A grade_id fit for a comment line and a message: one short printable line."""
    text = grade_id if isinstance(grade_id, str) else ""
    return "".join(ch if ch.isprintable() else "?" for ch in text)[:60]


def _cell_problems(cells: list) -> list[str]:
    """Notes on cells that are not what a notebook holds: they are left out, or read as is."""
    notes, seen = [], {}
    for index, cell in enumerate(cells):
        where = f"cell {index + 1}"
        if not isinstance(cell, dict):
            notes.append(f"{where} is not a notebook cell (a {type(cell).__name__}); left out")
            continue
        kind = cell.get("cell_type")
        if kind not in ("code", "markdown", "raw"):
            notes.append(f"{where} has an unknown cell type {str(kind)[:20]!r}; left out")
        elif kind != "code" and any(f"def {n}" in _text(cell.get("source", "")) or
                                    f"class {n}" in _text(cell.get("source", "")) for n in API):
            notes.append(f"{where} is a {kind} cell that holds code; only code cells are "
                         "graded, so change its type to Code")
        cell_id = cell.get("id")
        if isinstance(cell_id, str) and cell_id in seen:
            notes.append(f"cells {seen[cell_id]} and {index + 1} have the same id "
                         f"{_label(cell_id)!r} (a notebook's cell ids must be unique; was it "
                         "merged by hand?); both were read")
        elif isinstance(cell_id, str):
            seen[cell_id] = index + 1
    if len(notes) > 20:
        notes[20:] = [f"... and {len(notes) - 20:,} more cells like these"]
    return notes


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
    """The cell without its IPython magic and shell lines (``%matplotlib inline``,
    ``!pip install x``), and how many there were. Such a line begins a statement: a line
    that begins with ``%`` inside a statement (``% (d, n))``, the modulo continuing the line
    above) or a string is Python, and a cell that compiles has no magic at all."""
    try:
        compile(code, "<cell>", "exec", dont_inherit=True)
        return code, 0
    except (SyntaxError, ValueError):
        pass
    lines, dropped = [], 0
    for line in code.splitlines():
        if line.lstrip().startswith(("%", "!")) and not _continues("\n".join(lines)):
            indent = line[:len(line) - len(line.lstrip())]
            lines.append(f"{indent}pass  # IPython line left out" if indent else "")
            dropped += 1
        else:
            lines.append(line)
    return "\n".join(lines), dropped


def _continues(code: str) -> bool:
    """Does the next line of ``code`` continue a statement or a string (an open bracket, a
    backslash, an unclosed triple-quoted string)?"""
    if code.rstrip().endswith("\\"):
        return True
    try:
        for _ in tokenize.generate_tokens(io.StringIO(code + "\n").readline):
            pass
    except tokenize.TokenError:                 # EOF in a multi-line statement or string
        return True
    except (SyntaxError, ValueError):           # something else is wrong: not a continuation
        return False
    return False


#: ast.parse in several threads at once can fail with "AST constructor recursion depth
#: mismatch" (CPython gh-106905), and batch grades in threads: every parse takes this lock.
PARSING = threading.Lock()


def parse(source) -> ast.Module:
    """ast.parse, one thread at a time."""
    with PARSING:
        return ast.parse(source)


def defined_names(source: bytes) -> set[str]:
    """Top-level names a source defines, read without running it."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        return set()
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
