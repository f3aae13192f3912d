"""Is everything the test suite imports installed by the README's test command?

The README's second command is ``pip install -e ".[dev]" && pytest -q`` in a fresh venv, and
CI runs exactly that: a package the tests import that comes neither from the core
dependencies nor from the ``dev`` extra (directly or through what those require) passes on a
machine that happens to have it and fails on a new one."""
from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
# the project's own top-level packages and the tests' helper modules
OWN = {"autograder", "solutions", "assignments", "mha", "probes", "protocol", "guard", "jail",
       "rules", "worker", "cgroups"} | {p.stem for p in (ROOT / "tests").glob("*.py")}


def _imported(folders) -> set[str]:
    names = set()
    for folder in folders:
        for path in (ROOT / folder).rglob("*.py"):
            try:
                tree = ast.parse(path.read_bytes())
            except SyntaxError:
                continue  # a deliberately broken example submission
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - OWN


def _name(requirement: str) -> str:
    return re.split(r"[\s;\[<>=!~(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _closure(roots) -> set[str]:
    """The distributions the roots require, recursively, as installed here (markers ignored:
    a wider set can only make this test more lenient about environment markers)."""
    seen, todo = set(), [_name(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            todo += [_name(r) for r in metadata.requires(name) or [] if "extra ==" not in r]
        except metadata.PackageNotFoundError:
            pass
    return seen


def test_the_dev_extra_installs_everything_the_tests_import():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    installed = _closure(project["dependencies"] + project["optional-dependencies"]["dev"])
    providers = metadata.packages_distributions()
    missing = {}
    for module in sorted(_imported(["tests", "autograder", "assignments", "solutions"])):
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        if dists and not dists & installed:
            missing[module] = sorted(dists)
    assert missing == {}, (
        f"imported by the tests or the package but installed by neither the core dependencies "
        f"nor the dev extra: {missing}; add them to pyproject.toml's dev extra")
