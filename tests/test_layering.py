"""Layering: no import cycle among the autograder's modules.

The imports are read with ``ast`` (nothing is imported): absolute and relative ones,
``from . import x`` included, resolved to the project's own modules. Two graphs:

* the imports a module runs when it is imported (at its top level, including inside
  ``if``/``try``/``with`` and class bodies): a cycle there is a circular import;
* every import, those inside functions too, except a package's functions importing its
  own submodules (``checks.load_all`` and ``diagnoses.diagnose`` import their plugins so
  that they register): a cycle there is modules that know each other, such as the commands
  and the helpers they share (``write_atomic`` and the exit statuses once lived in cli.py).
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "autograder"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(tree: ast.Module, *, in_functions: bool):
    """(import node, inside a function?) for the module's imports."""
    stack = [(node, False) for node in tree.body]
    while stack:
        node, nested = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, nested
        inner = nested or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if inner and not in_functions:
            continue
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))


def targets(name: str, is_package: bool, node, known) -> set[str]:
    """The project's modules an import statement names (``from a import b``: a, and a.b if
    that is a module)."""
    if isinstance(node, ast.Import):
        named = [alias.name for alias in node.names]
    else:
        if node.level:
            base = name.split(".") if is_package else name.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        named = [module] + [f"{module}.{alias.name}" for alias in node.names]
    return {t for t in named if t in known and t != name}


def graph(*, in_functions: bool) -> dict[str, set[str]]:
    known = modules()
    edges: dict[str, set[str]] = {}
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges[name] = set()
        for node, nested in imports(tree, in_functions=in_functions):
            for target in targets(name, is_package, node, known):
                if nested and is_package and target.startswith(name + "."):
                    continue             # a package loading its own plugins when asked to
                edges[name].add(target)
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}           # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_walk_sees_the_project():
    """Does the walk find the modules and resolve relative imports (a broken walk would find
    no cycle anywhere)?"""
    edges = graph(in_functions=True)
    assert {"autograder.cli", "autograder.commands", "autograder.errors",
            "autograder.files", "autograder.writers.text"} <= set(edges)
    assert "autograder.errors" in edges["autograder.cli"]               # from .errors import ...
    assert "autograder.writers.gradescope" in edges["autograder.writers"]  # from . import x
    assert "autograder.commands" in edges["autograder.cli"]             # inside main()
    assert "autograder.files" in edges["autograder.outfolder"]


def test_find_cycle_reports_one():
    """Does find_cycle name a cycle, and only where there is one?"""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_circular_import():
    """Does no module import, at its top level, a module that imports it back?"""
    cycle = find_cycle(graph(in_functions=False))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_cycle_through_function_level_imports():
    """Counting imports inside functions too, do the commands sit above what they use, with
    nothing below importing them back (the cycle of cli, commands, outfolder, classreport,
    batch, executors and roster)?"""
    cycle = find_cycle(graph(in_functions=True))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_shared_helpers_sit_below_the_commands():
    """Do errors.py and files.py import nothing of the project, so every layer may use them?"""
    edges = graph(in_functions=True)
    assert edges["autograder.errors"] == set() and edges["autograder.files"] == set()
    for name, uses in edges.items():
        assert "autograder.cli" not in uses or name == "autograder.__main__", name
