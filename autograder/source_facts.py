"""What the grader reads in a submission's source itself: facts no submission can forge.

The sandbox measures how the code behaves, with instruments that live in the sandbox's own
process (the kernel watch, the operator trace, the probes that snapshot inputs and list
parameters). Code that reaches those instruments can make them say anything; code that
needs them to say something false has to reach them first, and reaching them takes
constructs an attention module never needs. So the grader reads the source (its syntax
tree, here, before anything runs) for two kinds of finding:

- ``forbidden``: the built-in attention the assignment forbids, named in the code
  (``scaled_dot_product_attention``, ``nn.MultiheadAttention``, ...), however it is
  imported or aliased;
- ``tampering``: a reach for the grader's instruments or for the interpreter's machinery
  behind them: introspection (``sys.modules``, frames, ``gc``, ``ctypes``, ``inspect``),
  dynamic code (``exec``, ``eval``, ``__import__``, ``importlib``, attribute names computed at
  run time on modules), torch's internals (``torch._C``, ``torch.ops``, ``torch.library``,
  dispatch modes, global module hooks), changes to torch, builtins or any other module
  (monkeypatching), ``__torch_function__``/``__torch_dispatch__``, metaclasses, and
  overriding the ``nn.Module`` machinery the probes use (``parameters()``, ``to()``,
  ``__getattr__`` ...).

A finding is a fact the grader established itself (``established_by = "source"``); the
checks that rest on the sandbox's instruments are void for a tampering submission
(``scoring.score``), which the report flags for the instructor. Reading is cheap (one
parse of a file of a few hundred lines) and runs no student code.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

from . import submission

#: torch's built-in attention, forbidden by the assignment (by attribute name).
FORBIDDEN = ("scaled_dot_product_attention", "MultiheadAttention", "multi_head_attention_forward",
             "_native_multi_head_attention", "flash_attention", "efficient_attention")

#: Modules that serve introspection, raw memory or code built at run time: no attention module
#: needs them, and each can reach the sandbox's instruments. (Side effects the sandbox contains
#: by itself, such as processes, signals, threads, files and output, are not reaches: ``os``,
#: ``signal``, ``threading`` and the like are left to the sandbox.)
DENIED_MODULES = frozenset({
    "gc", "ctypes", "_ctypes", "inspect", "importlib", "builtins", "__builtin__", "marshal",
    "pickle", "_pickle", "copyreg", "dill", "cloudpickle", "types", "code", "codeop", "dis",
    "pdb", "bdb", "trace", "traceback", "runpy", "zipimport", "pkgutil", "_imp", "site",
    "sysconfig", "_testcapi", "_testinternalcapi", "_xxsubinterpreters", "_interpreters",
    # the sandbox's own modules and the grader's packages
    "worker", "probes", "protocol", "jail", "zygote", "autograder", "solutions", "assignments",
    "tests",
})
#: What of ``sys`` reaches the interpreter's state: modules, frames, tracing, import hooks.
SYS_DENIED = frozenset({"modules", "_getframe", "_current_frames", "_current_exceptions",
                        "settrace", "setprofile", "gettrace", "getprofile", "meta_path",
                        "path_hooks", "path_importer_cache", "path", "addaudithook", "audit",
                        "monitoring", "exc_info", "exception", "last_traceback", "last_value",
                        "last_exc", "excepthook", "displayhook", "_xoptions", "setswitchinterval"})
#: Attribute names that open the interpreter's internals, on any object.
INTERNALS = frozenset({
    "__subclasses__", "__globals__", "__builtins__", "__code__", "__closure__", "__mro__",
    "__bases__", "__base__", "__dict__", "__getattribute__", "__setattr__", "__delattr__",
    "__self__", "__func__", "__wrapped__", "__loader__", "__spec__", "__import__",
    "__traceback__", "__defaults__", "__kwdefaults__", "__reduce__", "__reduce_ex__",
    "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace", "tb_frame", "tb_next",
    "gi_frame", "gi_code", "cr_frame", "ag_frame", "co_consts", "co_code", "_getframe",
})
#: Methods a submission's class may not define: the probes (and torch's dispatch) use them to
#: build, move, inspect and run the module.
MACHINERY = frozenset({
    "parameters", "named_parameters", "_named_members", "modules", "named_modules", "children",
    "named_children", "buffers", "named_buffers", "to", "_apply", "apply", "cuda", "cpu",
    "double", "float", "half", "bfloat16", "type", "train", "eval", "zero_grad", "__getattr__",
    "__setattr__", "__delattr__", "__getattribute__", "__call__", "_call_impl",
    "_wrapped_call_impl", "__torch_function__", "__torch_dispatch__", "__instancecheck__",
    "__subclasscheck__", "mro", "register_parameter", "__class_getitem__", "__init_subclass__",
})
#: Builtins that run code or reach namespaces by name.
DYNAMIC = frozenset({"exec", "eval", "compile", "__import__", "breakpoint"})
#: What tells which seed the grader set (a probe seeds torch before it builds a module).
RANDOM_STATE = frozenset({"initial_seed", "get_rng_state", "default_generator", "getstate",
                          "get_state", "seed"})
#: Modules a submission commonly binds by `from x import y` (so the name is a module).
KNOWN_MODULES = frozenset({"torch.nn", "torch.nn.functional", "torch.linalg", "torch.fft",
                           "torch.nn.init", "torch.autograd", "torch.cuda", "torch.backends",
                           "torch.utils", "numpy.linalg", "torch.torch"})
#: Parts of torch that are its machinery, not its tensor API.
TORCH_INTERNAL = ("torch.ops", "torch.library", "torch.overrides", "torch.utils.hooks",
                  "torch.fx", "torch.export", "torch.compile", "torch.jit")


@dataclass(frozen=True)
class Finding:
    """One thing the grader saw in the source, with the line it is on."""

    kind: str        #: "forbidden" | "tampering"
    line: int
    what: str        #: for the feedback: "sys.modules", "assigns torch.equal", ...

    def __str__(self) -> str:
        return f"line {self.line}: {self.what}"


@dataclass(frozen=True)
class SourceFacts:
    """The grader's own reading of a submission's source."""

    forbidden: tuple[Finding, ...] = ()
    tampering: tuple[Finding, ...] = ()
    established_by: str = "source"


def read(source: bytes | str, trusted: dict[str, str] | None = None) -> SourceFacts:
    """The findings in a submission's source. A notebook's source is its cells, each after a
    ``# --- label ---`` line (``submission``); a cell whose text is exactly that of the
    released notebook's cell of the same label (``trusted``: the helpers we ship) is ours
    and not read. Code that does not parse has no findings: it never runs."""
    text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
    reader = _Reader()
    for start, label, block in _blocks(text):
        if trusted and label is not None and trusted.get(label) == block:
            continue
        reader.offset = start
        try:
            reader.visit(submission.parse(block))      # one thread at a time (batch)
        except (SyntaxError, ValueError):
            continue                # does not compile: it never runs
        except Exception:           # nested past Python's limit, or any other refusal: code
            reader.note("tampering", 1,                # the grader cannot read is not trusted
                        "code the grader could not read (nested too deeply?)")
    reader.finish()
    return SourceFacts(forbidden=tuple(reader.found["forbidden"]),
                       tampering=tuple(reader.found["tampering"]))


CELL = re.compile(r"^# --- (.*) ---$", re.M)


def _blocks(text: str):
    """(line offset, cell label or None, text) of each cell of a notebook's source; a .py
    file is one block."""
    marks = list(CELL.finditer(text))
    if not marks:
        yield 0, None, text
        return
    if marks[0].start():
        yield 0, None, text[:marks[0].start()]
    for mark, after in zip(marks, marks[1:] + [None]):
        body = text[mark.end() + 1:after.start() if after else len(text)]
        yield text.count("\n", 0, mark.end()) + 1, mark.group(1), body


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
    return {label: body for _, label, body in _blocks(sub.source.decode())
            if label and label not in submission.API}


class _Reader(ast.NodeVisitor):
    """Walks the tree once, resolving names bound by imports (and their aliases) to dotted
    module paths, and notes each finding once per (kind, what)."""

    def __init__(self):
        self.modules: dict[str, str] = {}   # local name -> dotted path it stands for
        self.imported: set[str] = set()     # paths bound by plain `import x` (modules)
        self.found: dict[str, list[Finding]] = {"forbidden": [], "tampering": []}
        self._seen: set[tuple[str, str]] = set()
        self._parents: list[ast.AST] = []   # the nodes being visited, outermost first
        self.values: set[str] = set()       # names loaded other than as the called function
        self.pending: list[tuple[str, int, str]] = []   # plain classes' (class, line, what)
        self.offset = 0                     # the block's first line in the whole source

    def note(self, kind: str, line: int, what: str) -> None:
        """``line`` within the block being read."""
        if (kind, what) not in self._seen:
            self._seen.add((kind, what))
            self.found[kind].append(Finding(kind, line + self.offset, what))

    def generic_visit(self, node):
        self._parents.append(node)
        try:
            super().generic_visit(node)
        finally:
            self._parents.pop()

    # -- names -----------------------------------------------------------------------------

    def dotted(self, node) -> str | None:
        """The module path an expression stands for (``F.softmax`` -> ``torch.nn.functional.softmax``),
        or None when it is not rooted in an imported name."""
        if isinstance(node, ast.Name):
            return self.modules.get(node.id)
        if isinstance(node, ast.Attribute):
            if _rooted_in_self(node) and _show(node) in self.modules:   # self.F = torch.nn.functional
                return self.modules[_show(node)]
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Subscript):
            return self.dotted(node.value)
        if isinstance(node, ast.Call) and _is_name(node.func, "getattr") and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            base = self.dotted(node.args[0])
            return f"{base}.{node.args[1].value}" if base else None
        return None

    def _bind(self, name: str, path: str, line: int) -> None:
        self.modules[name] = path
        self._judge_path(path, line)

    def _judge_path(self, path: str, line: int) -> None:
        parts = path.split(".")
        inner = [p for p in parts[1:] if p in DENIED_MODULES or p in ("sys", "ctypeslib")]
        if inner:                                # torch.cuda.sys.modules, os.sys, np.ctypeslib
            self.note("tampering", line, f"reaches {inner[0]} through {parts[0]} ({path})")
        if parts[0] in ("torch", "numpy", "random") and parts[-1] in RANDOM_STATE:
            self.note("tampering", line, f"reads the random state the grader seeds ({path})")
        if parts[0] in DENIED_MODULES:
            self.note("tampering", line, f"uses {'.'.join(parts[:2])}")
        elif parts[0] == "sys" and len(parts) > 1 and parts[1] in SYS_DENIED:
            self.note("tampering", line, f"uses sys.{parts[1]}")
        elif parts[0] in ("torch", "numpy"):
            private = [p for p in parts[1:] if p.startswith("_") and not _dunder(p)]
            if private or any(path == t or path.startswith(t + ".") for t in TORCH_INTERNAL) \
                    or any("register_module_" in p for p in parts):
                self.note("tampering", line, f"uses torch internals ({path})")
        if any(p in FORBIDDEN or p.startswith("_scaled_dot_product") for p in parts[1:]):
            self.note("forbidden", line, path)

    # -- imports ---------------------------------------------------------------------------

    def visit_Import(self, node):
        for alias in node.names:
            self.imported.add(alias.name if alias.asname else alias.name.split(".")[0])
            if alias.asname:
                self._bind(alias.asname, alias.name, node.lineno)
            else:
                top = alias.name.split(".")[0]
                self._bind(top, top, node.lineno)
                self._judge_path(alias.name, node.lineno)

    def visit_ImportFrom(self, node):
        module = "." * node.level + (node.module or "")
        if node.level:
            self.note("tampering", node.lineno, f"relative import from {module}")
        for alias in node.names:
            if alias.name == "*":
                self._judge_path(module, node.lineno)
                continue
            self._bind(alias.asname or alias.name, f"{module}.{alias.name}", node.lineno)

    # -- uses ------------------------------------------------------------------------------

    def visit_Attribute(self, node):
        if node.attr in INTERNALS:
            self.note("tampering", node.lineno, f"reads .{node.attr}")
        if node.attr == "is_meta":        # behaving otherwise on the grader's stand-in device
            self.note("tampering", node.lineno, "asks whether it runs on the meta device")
        path = self.dotted(node)
        if path:
            self._judge_path(path, node.lineno)
        if node.attr in FORBIDDEN and not path:
            self.note("forbidden", node.lineno, node.attr)
        self.generic_visit(node)

    def visit_Constant(self, node):       # globals()["__builtins__"], getattr(x, name) tables
        if isinstance(node.value, str) and (node.value in INTERNALS or node.value in (
                "__builtins__", "__import__")):
            self.note("tampering", node.lineno, f"names {node.value}")
        if isinstance(node.value, str) and node.value in FORBIDDEN:    # vars(F)["scaled_..."]
            self.note("forbidden", node.lineno, node.value)
        if node.value == "meta":          # the device the grader runs a GPU's checks on
            self.note("tampering", node.lineno, "names the meta device")

    def _module_as_value(self, node) -> None:
        """A module object used as a value (handed to a function, put in a container,
        returned) can then be changed where no name shows it: a reach."""
        path = self.modules.get(node.id)
        if path is None or not (path in self.imported or path in KNOWN_MODULES):
            return
        parent = self._parents[-1] if self._parents else None
        if isinstance(parent, ast.Attribute) or (
                isinstance(parent, ast.Assign) and parent.value is node) or (
                isinstance(parent, ast.Call) and parent.func is node):
            return
        if isinstance(parent, ast.Call) and self.dotted(parent.func):
            return                    # handed to torch itself, e.g. torch.compile(model) aside
        self.note("tampering", node.lineno, f"uses the module {path} as a value")

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load):
            self._module_as_value(node)
            parent = self._parents[-1] if self._parents else None
            if not (isinstance(parent, ast.Call) and parent.func is node):
                self.values.add(node.id)      # a name used other than called
        if node.id in ("__builtins__", "__loader__", "__spec__", "__import__"):
            self.note("tampering", node.lineno, f"uses {node.id}")
        self.generic_visit(node)

    def visit_Call(self, node):
        func = node.func
        if isinstance(func, ast.Name) and func.id in DYNAMIC and func.id not in self.modules:
            self.note("tampering", node.lineno, f"calls {func.id}()")
        if isinstance(func, ast.Name) and func.id in ("getattr", "setattr", "delattr", "hasattr") \
                and node.args:
            self._attribute_call(func.id, node)
        if isinstance(func, ast.Name) and func.id == "type" and len(node.args) == 3:
            self.note("tampering", node.lineno, "builds a class with type(name, bases, dict)")
        if isinstance(func, ast.Name) and func.id in ("locals", "vars") and not node.args \
                and self._in_class_body():       # the class's namespace, written unseen
            self.note("tampering", node.lineno, f"calls {func.id}() in a class body")
        self.generic_visit(node)

    def _in_class_body(self) -> bool:
        scopes = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
        scope = next((n for n in reversed(self._parents) if isinstance(n, scopes)), None)
        return isinstance(scope, ast.ClassDef)

    def _attribute_call(self, name: str, node: ast.Call) -> None:
        target = node.args[0]
        literal = len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
            and isinstance(node.args[1].value, str)
        on_self = _rooted_in_self(target)
        if name in ("setattr", "delattr") and not on_self:
            self.note("tampering", node.lineno, f"{name}() on {_show(target)}")
        elif not literal and not on_self:
            self.note("tampering", node.lineno, f"{name}() with a computed name on {_show(target)}")
        elif literal:
            attr = node.args[1].value
            if attr in INTERNALS or (name in ("setattr", "delattr") and attr in MACHINERY):
                self.note("tampering", node.lineno, f"{name}() of .{attr}")
            if attr in FORBIDDEN:
                self.note("forbidden", node.lineno, attr)

    # -- changes ---------------------------------------------------------------------------

    def _changes(self, targets, line: int) -> None:
        for target in targets:
            root = target
            while isinstance(root, (ast.Attribute, ast.Subscript, ast.Starred)):
                root = root.value
            if isinstance(target, ast.Attribute) and not isinstance(root, ast.Name):
                self.note("tampering", line, f"changes an attribute of a computed object "
                                             f"({_show(target)})")
            for node in ast.walk(target):
                if isinstance(node, (ast.Attribute, ast.Subscript)):
                    base = self.dotted(node.value)
                    if base:
                        what = f"{base}.{node.attr}" if isinstance(node, ast.Attribute) else base
                        self.note("tampering", line, f"changes {what}")
                    if isinstance(node, ast.Attribute) and (node.attr in MACHINERY or node.attr in (
                            "__class__", "__dict__")):
                        self.note("tampering", line, f"assigns .{node.attr}")

    def visit_Assign(self, node):
        self._changes(node.targets, node.lineno)
        path = self.dotted(node.value)
        for target in node.targets:          # T = torch.Tensor: T now stands for torch.Tensor
            if isinstance(target, ast.Name) or _rooted_in_self(target):
                key = target.id if isinstance(target, ast.Name) else _show(target)
                if path:
                    self.modules[key] = path
                else:
                    self.modules.pop(key, None)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._changes([node.target], node.lineno)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self._changes([node.target], node.lineno)
        self.generic_visit(node)

    def visit_Delete(self, node):
        self._changes(node.targets, node.lineno)
        self.generic_visit(node)

    # -- definitions -----------------------------------------------------------------------

    def visit_ClassDef(self, node):
        if any(k.arg == "metaclass" for k in node.keywords) or \
                any(_is_name(b, "type") or (self.dotted(b) or "").endswith("Meta") for b in node.bases):
            self.note("tampering", node.lineno, f"class {node.name} has a metaclass")
        # A class of its own (no base but object) overrides nothing of torch's while it is
        # only ever called (instantiated); used any other way (a base, an alias, its methods
        # taken) it may reach a module: its findings wait for the end of the source.
        plain = all(_is_name(b, "object") for b in node.bases) and not node.keywords
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in MACHINERY:
                self._machinery(plain, node.name, item.lineno,
                                f"class {node.name} overrides {item.name}() of torch's machinery")
            if isinstance(item, ast.Assign):
                for t in item.targets:
                    if isinstance(t, ast.Name) and t.id in MACHINERY:
                        self._machinery(plain, node.name, item.lineno,
                                        f"class {node.name} replaces {t.id} of torch's machinery")
        self.generic_visit(node)

    def _machinery(self, plain: bool, name: str, line: int, what: str) -> None:
        if plain:
            self.pending.append((name, line + self.offset, what))
        else:
            self.note("tampering", line, what)

    def finish(self) -> None:
        """The findings of plain classes whose name turned out to be used other than called."""
        self.offset = 0                 # the pending lines are already the whole source's
        for name, line, what in self.pending:
            if name in self.values:
                self.note("tampering", line, what)

    def visit_FunctionDef(self, node):
        if node.name in ("__torch_function__", "__torch_dispatch__"):
            self.note("tampering", node.lineno, f"defines {node.name}")
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef


def _is_name(node, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _rooted_in_self(node) -> bool:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _show(node) -> str:
    try:
        return ast.unparse(node)[:60]
    except Exception:
        return type(node).__name__
