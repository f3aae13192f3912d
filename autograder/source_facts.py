"""What the grader reads in a submission's source itself, before anything runs.

Two things, both rules a student can know (``docs/contract.md``) and both read from exactly
the text the sandbox compiles (UTF-8 only, the ``if __name__ == "__main__":`` block left out,
one module: a ``.py`` file is never split):

- ``forbidden``: torch's built-in attention named in the code (``scaled_dot_product_attention``,
  ``nn.MultiheadAttention``, ``flex_attention``, ``torch.nn.attention``, a Transformer layer,
  the quantizable variant ...), however it is imported or aliased. Naming one counts as using
  it: the rubric voids the module's points, and ``api.forbidden-sdpa`` is named.
- ``rules``: the code rules the syntax shows broken (``sandbox.rules.analyse``): the report
  lists them at once; the sandbox's guard makes each such line raise instead of running.

Nothing here costs points by a guess: a finding is either a rule the contract states or a
note. The notebook's own helper cells (text equal to the released cell, ``trusted``) are ours:
their lines are not reported.
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

from . import submission
from .sandbox import rules

#: torch's built-in attention by name (attribute or import), whatever module holds it.
FORBIDDEN = ("scaled_dot_product_attention", "MultiheadAttention", "multi_head_attention_forward",
             "_native_multi_head_attention", "flash_attention", "efficient_attention",
             "flex_attention")


@dataclass(frozen=True)
class Finding:
    """One thing the grader saw in the source, with the line it is on."""

    kind: str        #: "forbidden" | "rule"
    line: int
    what: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.what}"


@dataclass(frozen=True)
class SourceFacts:
    """The grader's own reading of a submission's source."""

    forbidden: tuple[Finding, ...] = ()
    rules: tuple[rules.Violation, ...] = ()
    established_by: str = "source"


def read(source: bytes | str, cells=(), trusted: dict[str, str] | None = None) -> SourceFacts:
    """The findings in a submission's source: the text the sandbox compiles, read whole.
    ``cells``: a notebook's kept cells, by label, in order; lines of a cell whose text is the
    released notebook's own (``trusted``) are not reported. Code that does not parse has no
    findings (it never runs: the load problem says why)."""
    try:
        text = source if isinstance(source, str) else rules.source_text(source)
        with submission.PARSING:                 # one thread at a time (batch)
            tree = rules.without_main(ast.parse(text))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return SourceFacts()
    ours = _trusted_lines(text, cells, trusted or {})
    names = _Names()
    try:                    # nesting that parses may still be too deep to walk: such code
        names.visit(tree)   # does not compile in the sandbox either (its load problem says so)
        found = rules.analyse(tree)
    except (RecursionError, MemoryError):
        return SourceFacts()
    forbidden = tuple(f for f in names.found if f.line not in ours)[:rules.MAX_VIOLATIONS]
    broken = tuple(v for v in found if v.line not in ours)[:rules.MAX_VIOLATIONS]
    return SourceFacts(forbidden=forbidden, rules=broken)


def _trusted_lines(text: str, cells, trusted: dict[str, str]) -> set[int]:
    """The lines of the notebook's cells whose text is exactly the released cell's."""
    if not cells or not trusted:
        return set()
    lines = text.split("\n")
    starts, at = [], 0
    for label in cells:                        # each cell after its "# --- label ---" line
        marker = f"# --- {label} ---"
        while at < len(lines) and lines[at] != marker:
            at += 1
        starts.append(at)
        at += 1
    ours = set()
    for i, label in enumerate(cells):
        first, last = starts[i] + 1, (starts[i + 1] if i + 1 < len(starts) else len(lines))
        body = "\n".join(lines[first:last])
        if label in trusted and body.rstrip("\n") == trusted[label].rstrip("\n"):
            ours |= set(range(first + 1, last + 1))
    return ours


TRUSTED = Path(__file__).with_name("released_cells.json")


def trusted_cells(path: Path = TRUSTED) -> dict[str, str]:
    """label -> text of each setup cell of the released notebook (ours: imports, helpers), as
    ``python -m assignments.build`` wrote them beside the grader; {} where there is none."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in cells.items() if isinstance(k, str) and isinstance(v, str)} \
        if isinstance(cells, dict) else {}


def cells_of_notebook(text: str) -> dict[str, str]:
    """What ``trusted_cells`` holds, from a notebook's JSON text: each setup cell as the grader
    reads it (``submission.load``), by label."""
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "mha.ipynb"
        path.write_text(text, encoding="utf-8")
        sub = submission.load(path)
    return {label: body for label, body in _cells(sub.source.decode())
            if label not in submission.API}


def _cells(text: str):
    """(label, text) of each cell of the source ``submission.load`` made of a notebook: each
    after its ``# --- label ---`` line (only a notebook's source is read this way)."""
    import re
    marks = list(re.finditer(r"^# --- (.*) ---$", text, re.M))
    for mark, after in zip(marks, marks[1:] + [None]):
        yield mark.group(1), text[mark.end() + 1:after.start() if after else len(text)]


class _Names(ast.NodeVisitor):
    """Resolves names bound by imports (and aliases of them) to dotted paths, and notes each
    forbidden built-in once per path: a path rooted in torch with a part of an attention's or
    a Transformer layer's name (by kind), or one of ``FORBIDDEN`` on anything, or named in a
    string (``getattr(F, "scaled_dot_product_attention")``)."""

    def __init__(self):
        self.modules: dict[str, str] = {}
        self.found: list[Finding] = []
        self._seen: set[str] = set()

    def note(self, line: int, what: str) -> None:
        if what not in self._seen:
            self._seen.add(what)
            self.found.append(Finding("forbidden", line, what))

    def dotted(self, node) -> str | None:
        if isinstance(node, ast.Name):
            return self.modules.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "getattr" and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            base = self.dotted(node.args[0])
            return f"{base}.{node.args[1].value}" if base else None
        return None

    def judge(self, path: str, line: int) -> None:
        parts = path.split(".")
        if parts[0] == "torch" and any(_attention_kind(p) for p in parts[1:]):
            self.note(line, path)
        elif any(p in FORBIDDEN for p in parts):
            self.note(line, path)

    def visit_Import(self, node):
        for alias in node.names:
            if alias.asname:
                self.modules[alias.asname] = alias.name
            else:
                self.modules[alias.name.split(".")[0]] = alias.name.split(".")[0]
            self.judge(alias.name, node.lineno)

    def visit_ImportFrom(self, node):
        module = node.module or ""
        for alias in node.names:
            path = f"{module}.{alias.name}"
            self.modules[alias.asname or alias.name] = path
            self.judge(path, node.lineno)

    def visit_Assign(self, node):
        path = self.dotted(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name):
                if path:
                    self.modules[target.id] = path
                else:
                    self.modules.pop(target.id, None)
        self.generic_visit(node)

    def visit_Attribute(self, node):
        path = self.dotted(node)
        if path:
            self.judge(path, node.lineno)
        elif node.attr in FORBIDDEN:
            self.note(node.lineno, node.attr)
        self.generic_visit(node)

    def visit_Call(self, node):
        path = self.dotted(node)
        if path:
            self.judge(path, node.lineno)
        self.generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, str) and node.value in FORBIDDEN:
            self.note(node.lineno, node.value)


def _attention_kind(part: str) -> bool:
    """A part of a torch path that names a built-in attention or a layer built on one."""
    low = part.lower()
    return "attention" in low or low.startswith("transformer") or low == "quantizable" \
        or "multihead" in low
