"""Benchmark: `batch` against `nbgrader autograde` on the same generated notebooks.

``python -m autograder bench -n 20`` builds a minimal nbgrader course (one source
notebook: a solution cell with the reference, and nbgrader test cells), releases it with
``nbgrader generate_assignment``, and writes N student notebooks: half correct, half with
one of a few classic mistakes (or the untouched stub). Then it times, as subprocesses
with their start-up included, ``python -m autograder batch`` over all N and ``nbgrader
autograde`` over the first K (all N unless ``--nbgrader K``; the per-notebook time is
then extrapolated to N, and said to be), and prints both times and the ratio.

``--class realistic`` grades a class as real ones are instead: the notebooks cycle through
the real-style files of ``tests/submissions/multi/`` (in the styles of D2L, the Annotated
Transformer, CS231n, nanoGPT, HuggingFace and others; most with two or three mistakes, a
quarter correct), so the figure includes what mistakes cost (the carried pass, the
diagnoses, the pricing). It needs a clone of the repository (the fixtures are not
installed with the package).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import nbformat

from .api import PROJECT
from .errors import UsageError

SOLUTION_ID = "mha-code"


def _replace(old: str, new: str):
    def mutate(source: str) -> str:
        if old not in source:
            raise RuntimeError(f"bench: the reference no longer contains {old!r}; update the "
                               "benchmark's mutations")
        return source.replace(old, new)
    return mutate


VARIANTS = {                                    #: name -> the student's code, from the reference's
    "correct": lambda s: s,
    "pool.no-scale": lambda s: _replace(" / math.sqrt(self.head_dim)", "")(
        _replace(" / math.sqrt(p)", "")(s)),
    "split.no-transpose": _replace("    return X.transpose(-3, -2)",
                                   "    return X.reshape(X.shape[0], num_heads, -1, p)"),
    "mask.zero-len-uniform": _replace("    return weights.masked_fill(~keep, 0.0)",
                                      "    return weights"),
    "syntax-error": lambda s: s + "\n\ndef broken(:  # {student}\n    pass\n",
    "stub": None,                               # the released notebook, untouched
}
BUGS = [name for name in VARIANTS if name != "correct"]
#: The real-style files ``--class realistic`` cycles through (a clone's tests, not installed).
REALISTIC = PROJECT / "tests" / "submissions" / "multi"

TESTS = {                                       #: nbgrader's test cells: grade_id -> (points, code)
    "test-shapes": (2, """import torch
assert head_weight_shape(12, 12, 3) == (12, 4)
X = torch.randn(2, 5, 12, dtype=torch.float64)
assert split_heads(X, 3).shape == (2, 3, 5, 4)
assert torch.equal(split_heads(X, 3)[:, 1], X[..., 4:8])
assert torch.equal(concat_heads(split_heads(X, 3)), X)"""),
    "test-softmax": (2, """s = torch.randn(2, 3, 4, dtype=torch.float64)
w = masked_softmax(s, torch.tensor([0, 2]))
assert torch.all(w[0] == 0) and torch.all(w[1, :, 2:] == 0)
assert torch.allclose(w[1].sum(-1), torch.ones(3, dtype=torch.float64))"""),
    "test-pool": (2, """Q, K, V = (torch.randn(2, 3, n, 4, dtype=torch.float64) for n in (5, 6, 6))
out, w = attention_pool(Q, K, V)
ref = torch.softmax(Q @ K.transpose(-2, -1) / 2.0, dim=-1)
assert torch.allclose(w, ref) and torch.allclose(out, ref @ V)"""),
    "test-mha": (4, """torch.manual_seed(0)
m = MultiHeadAttention(12, 3).double()
q, kv = torch.randn(2, 5, 12, dtype=torch.float64), torch.randn(2, 7, 12, dtype=torch.float64)
y = m(q, kv, kv, torch.tensor([3, 7]))
assert y.shape == (2, 5, 12) and m.attention_weights.shape == (2, 3, 5, 7)
Q = (q @ m.W_q.weight.T).reshape(2, 5, 3, 4).transpose(1, 2)
K = (kv @ m.W_k.weight.T).reshape(2, 7, 3, 4).transpose(1, 2)
V = (kv @ m.W_v.weight.T).reshape(2, 7, 3, 4).transpose(1, 2)
keep = torch.arange(7) < torch.tensor([3, 7]).reshape(2, 1, 1, 1)
w = torch.softmax((Q @ K.transpose(-2, -1) / 2.0).masked_fill(~keep, float("-inf")), dim=-1)
ref = (w @ V).transpose(1, 2).reshape(2, 5, 12) @ m.W_o.weight.T
assert torch.allclose(y, ref)"""),
}


def reference_source() -> str:
    source = (PROJECT / "solutions" / "mha.py").read_text(encoding="utf-8")
    # Only the code: the module docstring quotes nbgrader's markers, and a notebook cell
    # that is not the first cannot hold a __future__ import.
    marker = "from __future__ import annotations\n"
    return source[source.index(marker) + len(marker):].lstrip()


def source_notebook() -> nbformat.NotebookNode:
    def meta(grade_id, *, solution=False, grade=False, points=None):
        m = {"grade_id": grade_id, "solution": solution, "grade": grade,
             "locked": not solution, "schema_version": 3}
        return {"nbgrader": dict(m, points=points) if grade else m}
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell("# Multi-head attention (benchmark course)",
                                              metadata=meta("intro")),
                nbformat.v4.new_code_cell(reference_source(),
                                          metadata=meta(SOLUTION_ID, solution=True))]
    nb.cells += [nbformat.v4.new_code_cell(code, metadata=meta(gid, grade=True, points=points))
                 for gid, (points, code) in TESTS.items()]
    return nb


def _run(command: list[str], cwd: Path, log: Path, ok=(0, 1)) -> float:
    started = time.perf_counter()
    with open(log, "ab") as out:
        done = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - started
    if done.returncode not in ok:
        raise RuntimeError(f"{' '.join(command[:4])} … exited {done.returncode}; see {log}")
    return elapsed


def classic(i: int) -> tuple[str, str | None]:
    """Student i of the classic class: half correct, half one classic bug or the stub."""
    name = "correct" if i % 2 == 0 else BUGS[(i // 2) % len(BUGS)]
    return name, None if VARIANTS[name] is None else VARIANTS[name](reference_source())


def realistic() -> Callable[[int], tuple[str, str | None]]:
    """Student i of the realistic class: the real-style files in turn, each as a notebook's
    code (a __future__ import can only open a notebook's first cell, so it is left out)."""
    files = sorted(REALISTIC.glob("*.py"))
    if not files:
        raise UsageError(f"--class realistic needs the real-style files of {REALISTIC} "
                         "(a clone of the repository has them; the installed package does not)")
    sources = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        kind = "correct" if re.search(r"^# CODES:\s*(none)?\s*$", text, re.M) else "mistaken"
        sources.append((kind, text.replace("from __future__ import annotations\n", "")))
    return lambda i: sources[i % len(sources)]


def build(folder: Path, count: int, nbgrader_count: int, pick=classic) -> dict[str, int]:
    """The course (nbgrader's first K students) and the class (all N) as nbgrader trees;
    ``pick(i)``: student i's kind and code (None: the released stub, untouched)."""
    course = folder / "course"
    (course / "source" / "mha").mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(
        "c = get_config()\nc.CourseDirectory.course_id = 'bench'\nc.Execute.timeout = 120\n")
    nbformat.write(source_notebook(), course / "source" / "mha" / "mha.ipynb")
    _run([sys.executable, "-m", "nbgrader", "generate_assignment", "mha", "--force"], course,
         folder / "nbgrader.log", ok=(0,))
    released = nbformat.read(course / "release" / "mha" / "mha.ipynb", as_version=4)
    tally = {}
    for i in range(count):
        name, code = pick(i)
        tally[name] = tally.get(name, 0) + 1
        nb = nbformat.from_dict(json.loads(json.dumps(released)))
        cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id")
                    == SOLUTION_ID)
        if code is not None:
            cell.source = code.replace("{student}", f"student{i:04d}")
        # Every notebook's graded code differs (as real ones do), so that batch cannot grade
        # identical twins once: the figures are those of N distinct gradings.
        cell.source += f"\n# submitted by student{i:04d}\n"
        roots = [folder / "class"] + ([course] if i < nbgrader_count else [])
        for root in roots:
            where = root / "submitted" / f"student{i:04d}" / "mha"
            where.mkdir(parents=True)
            nbformat.write(nb, where / "mha.ipynb")
            (where / "timestamp.txt").write_text("2026-01-01 12:00:00.000000 UTC")
    return tally


def main(count: int, *, nbgrader: int | None = None, workers: int | None = None,
         keep: str | None = None, kind: str = "classic") -> int:
    nb_count = count if nbgrader is None else max(0, min(nbgrader, count))
    folder = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="mha-bench-"))
    if keep and folder.exists() and any(folder.iterdir()):
        print(f"error: {folder} is not empty; the benchmark builds in an empty folder",
              file=sys.stderr)
        return 2
    pick = realistic() if kind == "realistic" else classic
    folder.mkdir(parents=True, exist_ok=True)
    try:
        tally = build(folder, count, nb_count, pick)
        print(f"built {count} notebooks in {folder}: "
              + ", ".join(f"{n} {name}" for name, n in tally.items()), flush=True)
        batch = [sys.executable, "-m", "autograder", "batch", str(folder / "class"),
                 "--output", str(folder / "batch-out"), "--seed", "1", "--device", "cpu"]
        batch += ["--workers", str(workers)] if workers else []
        t_batch = _run(batch, PROJECT, folder / "batch.log")
        print(f"  autograder batch   : {t_batch:8.1f} s for {count} notebooks, "
              f"{t_batch / count:6.2f} s each (start-up included)", flush=True)
        if nb_count:
            t_nb = _run([sys.executable, "-m", "nbgrader", "autograde", "mha", "--force"],
                        folder / "course", folder / "nbgrader.log")
            each = t_nb / nb_count
            extra = "" if nb_count == count else f", {each * count:.0f} s extrapolated to {count}"
            print(f"  nbgrader autograde : {t_nb:8.1f} s for {nb_count} notebooks, {each:6.2f} s "
                  f"each (serial{extra})")
            print(f"  ratio              : {each / (t_batch / count):8.1f}x faster per notebook")
        _summary(folder / "batch-out", count, folder / "batch.log")
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


def _summary(out: Path, count: int, log: Path) -> None:
    scores = [json.loads(p.read_text())["score"] for p in (out / "results").rglob("*.json")]
    full = sum(s == max(scores) for s in scores) if scores else 0
    failed = len(list((out / "failures").rglob("*.json")))
    print(f"  batch results      : {len(scores)} of {count} written, {full} with the top score"
          + (f", {failed} GRADER FAILURES (see {out / 'failures'})" if failed else ""))
    if len(scores) < count:                     # the figure above is then not of N gradings
        lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
        print(f"  WARNING            : batch wrote {count - len(scores)} results fewer than it "
              f"was given; its log ends: {lines[-1] if lines else '(empty)'}")
