"""The code rules: what graded code may use, read before it runs and enforced while it runs.

The sandbox measures how a submission behaves with instruments that live in the process the
submission runs in (the operator trace, the kernel watch, the probes that list parameters).
Python has no wall inside one process, so the rules put one in the code itself: the grader
compiles the submission through this module, never as it is. The rules are few, public
(``docs/contract.md``, "Code rules") and each failure names its line and its rule:

1. **Imports.** The modules of ``MODULES`` are the real ones, each with a policy for its
   attributes (``torch``, ``numpy``, ``math`` ... ; ``sys`` and ``os`` only for what a script
   needs). Any other import gives a placeholder: importing it works, using it raises.
2. **No machinery.** No private attribute (``x._name``) of an object the submission did not
   define, no dunder attribute but the ordinary ones (``__init__``, ``__name__`` ...), no
   frame, code or traceback objects, no ``eval``/``exec``/``compile``/``globals``/``vars``,
   no class built by ``type(name, bases, ns)``, no ``match`` statement, no metaclass but
   ``abc.ABCMeta``/``enum.EnumMeta``, and classes may not define the hooks torch's dispatch or
   Python's class machinery call (``__torch_function__``, ``__getattribute__`` ...).
3. **No changes to what is not yours.** No assigning or deleting attributes of modules, or of
   classes and functions the submission did not define (no monkeypatching).
4. A top-level ``if __name__ == "__main__":`` block is the student's own self-test: it is
   left out (graded code is imported as ``mha``), so nothing in it is checked or run.

``analyse`` reads the rules that the syntax shows (the grader's report lists them at once);
``compile_guarded`` compiles the code with every attribute access, attribute assignment and
import routed through a ``guard.Guard``, which applies the same rules to what only running
shows (a name built at run time, an alias, an object handed in). A rule broken at run time raises
``RuleError`` at that line, which the student sees as that check's error; the rest of the
submission is graded. Reading torch's built-in attention is not refused but noted
(``Guard.forbidden``): the rubric voids the module's points for it.

This module (the tables, the reading and the compiling) needs no torch and is imported by the
grader (``autograder.sandbox.rules``) and, inside the sandbox, as ``rules``; the run-time
half is ``guard``, in the sandbox only. Neither imports anything from the grader.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

RULES_DOC = "docs/contract.md, 'Code rules'"
MAIN_GUARD = "__main__"

# --------------------------------------------------------------------------------------------
# The tables

#: Modules graded code may import, and what of each: None, every public attribute; a set
#: ("only", names): those alone; ("not", names): every public attribute but those.
MODULES: dict[str, object] = {
    "__future__": None, "math": None, "cmath": None, "numbers": None, "random": None,
    "statistics": None, "fractions": None, "decimal": None,
    "typing": ("not", {"get_type_hints", "ForwardRef", "get_overloads",
                       "evaluate_forward_ref", "get_annotations"}),
    "typing_extensions": ("not", {"get_type_hints", "ForwardRef", "get_overloads",
                                  "evaluate_forward_ref", "get_annotations", "eval_type"}),
    "dataclasses": ("not", {"make_dataclass"}), "enum": None, "abc": None,
    "functools": ("not", {"singledispatch", "singledispatchmethod"}),
    "itertools": None, "collections": None, "collections.abc": None, "copy": None,
    "operator": ("not", {"attrgetter", "methodcaller"}), "warnings": None, "re": None,
    "textwrap": None, "json": None, "pprint": None,
    "logging": ("not", {"currentframe", "StrFormatStyle", "FileHandler"}),
    "einops": None,
    "os": ("only", {"environ", "path", "getcwd", "getenv", "cpu_count", "sep", "linesep",
                    "name", "getpid", "curdir", "pardir", "write", "urandom",
                    "get_terminal_size"}),
    "os.path": ("only", {"join", "dirname", "basename", "exists", "isfile", "isdir",
                         "splitext", "abspath", "normpath", "split", "sep"}),
    "sys": ("only", {"argv", "version", "version_info", "platform", "maxsize", "float_info",
                     "int_info", "byteorder", "exit", "stdout", "stderr", "path",
                     "getrecursionlimit", "getsizeof", "executable", "hexversion"}),
    "traceback": ("only", {"print_exc", "format_exc", "print_exception", "format_exception"}),
    "numpy": ("not", {"load", "ctypeslib", "lib", "testing", "f2py", "distutils"}),
    "numpy.linalg": None, "numpy.random": None, "numpy.fft": None, "numpy.polynomial": None,
    "numpy.emath": None, "numpy.exceptions": None, "numpy.dtypes": None,
    "torch": ("not", {"load", "set_default_device", "from_file"}),
    "torch.nn": None, "torch.nn.functional": None, "torch.nn.init": None,
    "torch.nn.parameter": None, "torch.nn.common_types": None, "torch.nn.utils": None,
    "torch.nn.utils.rnn": None, "torch.linalg": None, "torch.fft": None, "torch.special": None,
    "torch.autograd": None, "torch.functional": None, "torch.types": None,
    "torch.random": None,          # manual_seed, fork_rng ...: what torch itself exports
    "torch.amp": ("only", {"autocast"}),
    "torch.cuda": ("only", {"is_available", "device_count", "current_device",
                            "is_bf16_supported", "get_device_name", "device"}),
    "torch.jit": ("only", {"is_scripting", "is_tracing", "ignore", "unused", "export",
                           "Final", "annotate", "Attribute", "script", "trace",
                           "script_if_tracing"}),
}
#: What graded code gets in the place of these: compilers that would run the code outside
#: the rules run it as it is (the function or module itself comes back).
IDENTITY = {("torch", "compile"), ("torch.jit", "script"), ("torch.jit", "trace"),
            ("torch.jit", "script_if_tracing")}
#: What reading these gives graded code: a copy (changing it changes nothing here).
COPIES = {("sys", "path"): list, ("os", "environ"): dict}
#: Dunder attributes graded code may read on anything (operators, names, documentation).
DUNDER_READ = frozenset({
    "__init__", "__name__", "__qualname__", "__doc__", "__module__", "__class__",
    "__version__", "__all__", "__annotations__", "__call__", "__len__", "__iter__", "__next__",
    "__getitem__", "__setitem__", "__delitem__", "__contains__", "__repr__", "__str__",
    "__format__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__",
    "__bool__", "__add__", "__sub__", "__mul__", "__matmul__", "__truediv__", "__floordiv__",
    "__mod__", "__pow__", "__neg__", "__pos__", "__abs__", "__radd__", "__rsub__", "__rmul__",
    "__rmatmul__", "__rtruediv__", "__rfloordiv__", "__rpow__", "__and__", "__or__", "__xor__",
    "__invert__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__enter__", "__exit__",
    "__float__", "__int__", "__index__", "__complex__", "__round__", "__reversed__",
    "__dataclass_fields__", "__members__",
})
#: Dunder names a class body may not define: the hooks torch's dispatch and Python's class
#: machinery call on their own (so they would run where the grader's instruments run).
DUNDER_DEFINE_NOT = frozenset({
    "__torch_function__", "__torch_dispatch__", "__getattribute__", "__init_subclass__",
    "__class_getitem__", "__set_name__", "__mro_entries__", "__prepare__", "__instancecheck__",
    "__subclasscheck__", "__subclasshook__", "__reduce__", "__reduce_ex__",
    "__match_args__", "__slots__", "__class__", "__dict__", "__module__",
    "__qualname__", "__build_class__", "__import__", "__builtins__",
    "__array_function__", "__array_ufunc__", "__array_priority__", "__array_wrap__",
    "__array_finalize__", "__array_prepare__",
})
#: Dunder names a module may bind at its top level or read as plain names.
DUNDER_NAMES = frozenset({"__name__", "__doc__", "__all__", "__version__", "__author__",
                          "__file__", "__annotations__"})
#: Attributes no graded code may read on any object: frames, code, tracebacks, raw memory.
NEVER = frozenset({
    "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace", "f_lasti",
    "tb_frame", "tb_next", "gi_frame", "gi_code", "gi_yieldfrom", "gi_running", "cr_frame",
    "cr_code", "cr_await", "cr_origin", "ag_frame", "ag_code", "ag_await", "co_code",
    "co_consts", "co_names", "ctypes", "from_address", "from_buffer", "from_buffer_copy",
    "in_dll",
})
#: Builtins graded code does not get: they run code, or reach namespaces by name.
NO_BUILTINS = frozenset({"eval", "exec", "compile", "breakpoint", "help", "open", "input",
                         "__import__", "__build_class__"})
#: Builtins graded code gets as views that keep the rules (``Namespace``).
VIEWS = frozenset({"globals", "locals", "vars"})
#: Dunder attributes that reach attribute machinery: readable on one's own classes and
#: instances, on super() of them and on nn.Module's classes (their own methods), nowhere else.
ATTRIBUTE_MACHINERY = frozenset({"__getattr__", "__setattr__", "__delattr__",
                                 "__getattribute__"})
#: The prefix of the names the compiled code calls the guard by (and of its temporaries):
#: graded code may bind no name that starts with it, in any scope.
GUARD_PREFIXES = ("__rules", "_rules_")
#: The most violations one reading lists (a generated file may break a rule on every line).
MAX_VIOLATIONS = 50


class RuleError(Exception):
    """Graded code broke one of the code rules; the message names the line and the rule."""


@dataclass(frozen=True)
class Violation:
    """A rule broken where the syntax shows it: at ``line``, ``what``, by rule ``rule``."""

    line: int
    rule: int
    what: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.what} (code rule {self.rule}, {RULES_DOC})"


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


# --------------------------------------------------------------------------------------------
# Reading: the rules the syntax shows, and the main block left out


def source_text(data: bytes) -> str:
    """The text graded code is compiled from: UTF-8 and nothing else (a declaration of another
    encoding is refused: ``ValueError`` with the reason), so what the grader reads is what runs."""
    head = data.split(b"\n", 2)[:2]
    for number, line in enumerate(head, 1):
        declared = _declared_coding(line)
        if declared and declared.replace("_", "-").lower() not in ("utf-8", "utf8"):
            raise ValueError(f"line {number} declares the encoding {declared!r}; graded code "
                             "must be UTF-8: remove that line and save the file as UTF-8")
    return data.decode("utf-8")       # UnicodeDecodeError (a ValueError) names the byte


def _declared_coding(line: bytes) -> str | None:
    import re
    match = re.match(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", line)
    return match.group(1).decode("ascii", "replace") if match else None


def without_main(tree: ast.Module) -> ast.Module:
    """The module without its top-level ``if __name__ == "__main__":`` blocks (the student's
    self-test: graded code is imported as ``mha``, so they never run)."""
    tree.body = [node for node in tree.body if not _is_main_block(node)] or [ast.Pass()]
    return tree


def _is_main_block(node) -> bool:
    if not isinstance(node, ast.If) or node.orelse:
        return False
    test = node.test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and \
        any(isinstance(s, ast.Constant) and s.value == MAIN_GUARD for s in sides)


class _Reader(ast.NodeVisitor):
    """The violations the syntax shows, each with the node that shows it (``nodes``: id of
    the node -> index in ``found``), so that compiling can replace exactly that node."""

    def __init__(self):
        self.found: list[Violation] = []
        self.nodes: dict[int, int] = {}
        self._scopes: list[str] = ["module"]     # module | class | function

    def note(self, node, rule: int, what: str) -> None:
        if id(node) not in self.nodes:
            self.nodes[id(node)] = len(self.found)
            self.found.append(Violation(getattr(node, "lineno", 0), rule, what))

    # -- scopes ------------------------------------------------------------------------------

    def _in(self, scope: str, node) -> None:
        self._scopes.append(scope)
        try:
            self.generic_visit(node)
        finally:
            self._scopes.pop()

    def visit_FunctionDef(self, node):
        if self._scopes[-1] == "module" and _dunder(node.name):
            self.note(node, 2, f"defining {node.name} at the top level")
        elif _bad_binding(node.name, self._scopes[-1]):
            self.note(node, 2, f"defining {node.name}")
        for decorator in node.decorator_list:
            self.visit(decorator)
        self.visit(node.args)
        if node.returns is not None:
            self.visit(node.returns)
        self._scopes.append("function")
        try:
            for statement in node.body:
                self.visit(statement)
        finally:
            self._scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        self._in("function", node)

    def visit_ClassDef(self, node):
        if self._scopes[-1] == "module" and _dunder(node.name):
            self.note(node, 2, f"defining {node.name} at the top level")
        elif _bad_binding(node.name, self._scopes[-1]):
            self.note(node, 2, f"defining {node.name}")
        for keyword in node.keywords:
            if keyword.arg == "metaclass" and not _plain_metaclass(keyword.value):
                self.note(node, 2, f"class {node.name} has a metaclass (only abc.ABCMeta and "
                                   "enum's are allowed)")
        for item in node.body:
            for name in _class_names(item):
                if name in DUNDER_DEFINE_NOT:
                    self.note(item, 2, f"class {node.name} defines {name}")
        self._in("class", node)

    # -- names and attributes ----------------------------------------------------------------

    def note_store(self, node, attr: str) -> None:
        """A dunder attribute assigned or deleted: refused while running (the guard), listed
        here at once (not mapped to the node: the statement still reaches the guard)."""
        self.found.append(Violation(getattr(node, "lineno", 0), 3,
                                    f"assigning the dunder attribute .{attr}"))

    def visit_Attribute(self, node):
        attr = node.attr
        if not isinstance(node.ctx, ast.Load) and _dunder(attr):
            self.note_store(node, attr)
        if isinstance(node.ctx, ast.Load):
            if attr in NEVER:
                self.note(node, 2, f".{attr} (frames, code and raw memory are not available)")
            elif _dunder(attr) and attr not in DUNDER_READ and attr != "__dict__" \
                    and attr not in ATTRIBUTE_MACHINERY:          # whose: seen when running
                self.note(node, 2, f".{attr} (of the dunder attributes, graded code may use "
                                   "only the ordinary ones: __init__, __name__, __class__, "
                                   "operators)")
        self.generic_visit(node)

    def visit_Name(self, node):
        name, scope = node.id, self._scopes[-1]
        if isinstance(node.ctx, ast.Load):
            if _dunder(name) and name not in DUNDER_NAMES:
                self.note(node, 2, f"the name {name}")
            elif name in NO_BUILTINS:
                self.note(node, 2, f"{name}() (not available to graded code)")

    def visit_arg(self, node):
        if _dunder(node.arg):
            self.note(node, 2, f"the parameter name {node.arg}")
        self.generic_visit(node)

    # -- statements ----------------------------------------------------------------------------

    def _binds_dunder(self, node, targets) -> None:
        """A statement that binds a dunder name: at the top level only the module's own
        (__all__, __version__ ...); in a class body any but the hooks (checked above); in a
        function none; the guard's own names (``GUARD_PREFIXES``) nowhere."""
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name) and _bad_binding(name.id, self._scopes[-1]):
                    self.note(node, 2, f"assigning {name.id}")
                    return

    def visit_NamedExpr(self, node):
        self._binds_dunder(node, [node.target])
        self.generic_visit(node)

    def visit_With(self, node):
        self._binds_dunder(node, [i.optional_vars for i in node.items
                                  if i.optional_vars is not None])
        self.generic_visit(node)

    visit_AsyncWith = visit_With

    def visit_Try(self, node):
        for handler in node.handlers:
            if handler.name and _bad_binding(handler.name, self._scopes[-1]):
                self.note(node, 2, f"assigning {handler.name}")
                break
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_Assign(self, node):
        self._binds_dunder(node, node.targets)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._binds_dunder(node, [node.target])
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self._binds_dunder(node, [node.target])
        self.generic_visit(node)

    def visit_Delete(self, node):
        self._binds_dunder(node, node.targets)
        self.generic_visit(node)

    def visit_For(self, node):
        self._binds_dunder(node, [node.target])
        self.generic_visit(node)

    visit_AsyncFor = visit_For

    def visit_ImportFrom(self, node):
        for alias in node.names:
            if _bad_binding(alias.asname or alias.name, "function"):
                self.note(node, 2, f"assigning {alias.asname or alias.name}")
                return
        if node.level:
            self.note(node, 1, "a relative import (graded code is one module, mha)")
        elif node.module != "__future__":
            for alias in node.names:
                if alias.name.startswith("_"):
                    self.note(node, 2, f"importing the private name {alias.name}")
                    break
                if _dunder(alias.asname or ""):
                    self.note(node, 2, f"assigning {alias.asname}")
                    break

    def visit_Import(self, node):
        for alias in node.names:
            bound = alias.asname or alias.name.split(".")[0]
            if _dunder(bound) or bound.startswith(GUARD_PREFIXES):
                self.note(node, 2, f"assigning {bound}")
                break

    def visit_Match(self, node):
        self.note(node, 2, "a match statement (its class patterns read attributes unchecked)")

    def visit_Global(self, node):
        for name in node.names:
            if _dunder(name):
                self.note(node, 2, f"the name {name}")
                break

    visit_Nonlocal = visit_Global

    def _comprehension(self, node):
        for generator in node.generators:
            if _has_attribute_target(generator.target):
                self.note(node, 3, "an attribute as a comprehension's loop variable")
                break
            bad = [n.id for n in ast.walk(generator.target)
                   if isinstance(n, ast.Name) and _bad_binding(n.id, "function")]
            if bad:
                self.note(node, 2, f"assigning {bad[0]}")
                break
        self._in("function", node)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension


def _bad_binding(name: str, scope: str) -> bool:
    """Whether binding ``name`` in ``scope`` breaks rule 2: the guard's names anywhere; a
    dunder name at the top level (but the module's own) or in a function."""
    if name.startswith(GUARD_PREFIXES):
        return True
    if not _dunder(name):
        return False
    if scope == "module":
        return name not in DUNDER_NAMES - {"__name__", "__file__"}
    return scope == "function" or name in DUNDER_DEFINE_NOT


def _class_names(item):
    """The names a class body statement binds."""
    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield item.name
    elif isinstance(item, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = item.targets if isinstance(item, ast.Assign) else [item.target]
        for target in targets:
            for node in ast.walk(target):
                if isinstance(node, ast.Name):
                    yield node.id


def _plain_metaclass(node) -> bool:
    return isinstance(node, (ast.Name, ast.Attribute)) and \
        ast.unparse(node).split(".")[-1] in ("ABCMeta", "EnumMeta", "EnumType")


def analyse(tree: ast.Module) -> list[Violation]:
    """The rules broken where the syntax shows it (the tree without its main block), at most
    ``MAX_VIOLATIONS`` of them."""
    return sorted(_read(tree).found, key=lambda v: v.line)[:MAX_VIOLATIONS]


def _read(tree: ast.Module) -> _Reader:
    reader = _Reader()
    reader.visit(tree)
    return reader


def read(text: str) -> tuple[ast.Module, list[Violation]]:
    """The tree graded code is compiled from (main block left out), and its violations."""
    tree = without_main(ast.parse(text))
    return tree, analyse(tree)


# --------------------------------------------------------------------------------------------
# Compiling: every attribute access, assignment and import through the guard

GET, GET_PRIVATE, SET, DEL, IMPORT, FROM, STAR, INPLACE, REFUSE = (
    "__rules_get__", "__rules_get_private__", "__rules_set__", "__rules_del__",
    "__rules_import__", "__rules_from__", "__rules_star__", "__rules_inplace__",
    "__rules_refuse__")
INPLACE_OPS = {ast.Add: "iadd", ast.Sub: "isub", ast.Mult: "imul", ast.MatMult: "imatmul",
               ast.Div: "itruediv", ast.FloorDiv: "ifloordiv", ast.Mod: "imod", ast.Pow: "ipow",
               ast.LShift: "ilshift", ast.RShift: "irshift", ast.BitOr: "ior",
               ast.BitXor: "ixor", ast.BitAnd: "iand"}


def _call(name: str, *args) -> ast.Call:
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=list(args), keywords=[])


def _const(value) -> ast.Constant:
    return ast.Constant(value=value)


def _load(name: str) -> ast.Name:
    return ast.Name(id=name, ctx=ast.Load())


def _store(name: str) -> ast.Name:
    return ast.Name(id=name, ctx=ast.Store())


_PLACE = ("lineno", "col_offset", "end_lineno", "end_col_offset")


def _at(new, old):
    """``new``, a node the guard adds, and every node in it that has no place yet, placed
    where ``old`` is: ``ast.fix_missing_locations`` for the added nodes alone (every parsed
    node has its place, so the walk stops there; the whole tree's walk was a third of the
    compiling)."""
    place = [(a, getattr(old, a)) for a in _PLACE if hasattr(old, a)]
    stack = [new]
    while stack:
        node = stack.pop()
        if "lineno" in node._attributes:
            if hasattr(node, "lineno"):
                continue                 # parsed, or placed when it was added
            for a, value in place:
                setattr(node, a, value)
        stack.extend(ast.iter_child_nodes(node))
    return new


class _Guarded(ast.NodeTransformer):
    """Rewrites a tree so that the guard sees what the bytecode would otherwise do unseen:
    each node the reader blamed raises instead; attribute reads, writes and deletions and
    imports call the guard."""

    def __init__(self, refused: dict[int, int], risky: frozenset | None = None):
        self.refused = refused
        self.risky = risky
        self._temp = 0

    def temp(self) -> str:
        self._temp += 1
        return f"_rules_tmp{self._temp}"

    def visit(self, node):
        index = self.refused.get(id(node))
        if index is not None:
            raising = _call(REFUSE, _const(index))
            if isinstance(node, ast.stmt):
                return _at(ast.Expr(raising), node)
            if isinstance(node, ast.expr):
                return _at(raising, node)
        return super().visit(node)

    # -- expressions -------------------------------------------------------------------------

    def visit_Attribute(self, node):
        if isinstance(node.ctx, ast.Load):
            if node.attr.startswith("_"):
                guard = GET_PRIVATE
            elif self.risky is None or node.attr in self.risky:
                guard = GET
            else:                   # a name no module of this machine gives a module under
                return self.generic_visit(node)
            return _at(_call(guard, self.visit(node.value), _const(node.attr)),
                                     node)
        return self.generic_visit(node)          # stores and deletes: by their statements

    # -- imports ----------------------------------------------------------------------------

    def visit_Import(self, node):
        out = []
        for alias in node.names:
            whole = alias.asname is not None
            target = alias.asname or alias.name.split(".")[0]
            out.append(_at(ast.Assign(
                targets=[_store(target)],
                value=_call(IMPORT, _const(alias.name), _const(whole))), node))
        return out

    def visit_ImportFrom(self, node):
        module = node.module or ""
        if module == "__future__":
            return node
        if any(a.name == "*" for a in node.names):
            return _at(ast.Expr(_call(STAR, _const(module))), node)
        names = ast.Tuple(elts=[_const(a.name) for a in node.names], ctx=ast.Load())
        targets = ast.Tuple(elts=[_store(a.asname or a.name) for a in node.names],
                            ctx=ast.Store())
        return _at(ast.Assign(targets=[targets],
                                            value=_call(FROM, _const(module), names)), node)

    # -- stores --------------------------------------------------------------------------------

    def visit_Assign(self, node):
        node.value = self.visit(node.value)
        if not any(_has_attribute_target(t) for t in node.targets):
            node.targets = [self.visit(t) for t in node.targets]
            return node
        name = self.temp()
        out = [_at(ast.Assign(targets=[_store(name)], value=node.value), node)]
        for target in node.targets:
            out += self.store(target, _load(name), node)
        return out

    def visit_AnnAssign(self, node):
        node.annotation = self.visit(node.annotation)
        if node.value is not None:
            node.value = self.visit(node.value)
        if isinstance(node.target, ast.Attribute):
            if node.value is None:
                return _at(ast.Expr(self.visit(node.target.value)), node)
            return self.store(node.target, node.value, node)
        return node

    def visit_AugAssign(self, node):
        value = self.visit(node.value)
        if isinstance(node.target, ast.Attribute):
            name, attr = self.temp(), node.target.attr
            getter = GET_PRIVATE if attr.startswith("_") else GET
            new = _call(INPLACE, _const(INPLACE_OPS[type(node.op)]),
                        _call(getter, _load(name), _const(attr)), value)
            return [_at(ast.Assign(targets=[_store(name)],
                                                 value=self.visit(node.target.value)), node),
                    _at(ast.Expr(_call(SET, _load(name), _const(attr), new)),
                                      node)]
        if not isinstance(node.target, ast.Name):
            node.target = self.visit(node.target)
        node.value = value
        return node

    def visit_Delete(self, node):
        out = []
        for target in node.targets:
            if isinstance(target, ast.Attribute):
                out.append(_at(ast.Expr(_call(
                    DEL, self.visit(target.value), _const(target.attr))), node))
            else:
                out.append(_at(ast.Delete(targets=[self.visit(target)]), node))
        return out

    def visit_For(self, node):
        node.iter = self.visit(node.iter)
        node.body = self._statements(node.body)
        node.orelse = self._statements(node.orelse)
        if _has_attribute_target(node.target):
            name = self.temp()
            node.body = self.store(node.target, _load(name), node) + node.body
            node.target = _at(_store(name), node.target)
        else:
            node.target = self.visit(node.target)
        return node

    visit_AsyncFor = visit_For

    def visit_With(self, node):
        stores = []
        for item in node.items:
            item.context_expr = self.visit(item.context_expr)
            if item.optional_vars is not None and _has_attribute_target(item.optional_vars):
                name = self.temp()
                stores += self.store(item.optional_vars, _load(name), node)
                item.optional_vars = _at(_store(name), item.optional_vars)
            elif item.optional_vars is not None:
                item.optional_vars = self.visit(item.optional_vars)
        node.body = stores + self._statements(node.body)
        return node

    visit_AsyncWith = visit_With

    def _statements(self, body):
        out = []
        for statement in body:
            result = self.visit(statement)
            out += result if isinstance(result, list) else [result]
        return out

    def store(self, target, value, where) -> list:
        """Statements that store ``value`` (an expression evaluated once) into ``target``."""
        if isinstance(target, ast.Attribute):
            return [_at(ast.Expr(_call(SET, self.visit(target.value),
                                                     _const(target.attr), value)), where)]
        if isinstance(target, (ast.Tuple, ast.List)) and _has_attribute_target(target):
            names = [self.temp() for _ in target.elts]
            unpack = ast.Tuple(elts=[ast.Starred(value=_store(n), ctx=ast.Store())
                                     if isinstance(e, ast.Starred) else _store(n)
                                     for n, e in zip(names, target.elts)], ctx=ast.Store())
            out = [_at(ast.Assign(targets=[unpack], value=value), where)]
            for n, element in zip(names, target.elts):
                element = element.value if isinstance(element, ast.Starred) else element
                out += self.store(element, _load(n), where)
            return out
        return [_at(ast.Assign(targets=[self.visit(target)], value=value), where)]


def _has_attribute_target(target) -> bool:
    if isinstance(target, ast.Attribute):
        return True
    if isinstance(target, ast.Starred):
        return _has_attribute_target(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_has_attribute_target(e) for e in target.elts)
    return False


def compile_guarded(text: str, filename: str, risky: frozenset | None = None):
    """(code object, violations): the submission compiled with the guard in every access that
    can reach what the rules refuse (``risky``: the attribute names that can; None: all).
    Raises SyntaxError (and ValueError, RecursionError) as ``compile`` does."""
    tree = without_main(ast.parse(text))
    reader = _read(tree)
    guarded = _Guarded(reader.nodes, risky).visit(tree)
    guarded.body = [s if i == 0 and _docstring(s) else _skipped_when_refused(s)
                    for i, s in enumerate(guarded.body)]
    try:
        code = compile(guarded, filename, "exec", dont_inherit=True)
    except (TypeError, ValueError):     # a node added with no place (a parsed tree with none)
        code = compile(ast.fix_missing_locations(guarded), filename, "exec", dont_inherit=True)
    return code, reader.found


ERROR = "__rules_error__"


def _docstring(statement) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) \
        and isinstance(statement.value.value, str)


def _skipped_when_refused(statement):
    """A top-level statement that breaks a rule is left out, and the module goes on (as a
    notebook goes on after a failing cell): the rest of the submission is graded."""
    if isinstance(statement, ast.ImportFrom) and statement.module == "__future__":
        return statement
    handler = ast.ExceptHandler(type=_load(ERROR), name=None, body=[ast.Pass()])
    return _at(ast.Try(body=[statement], handlers=[handler], orelse=[],
                                     finalbody=[]), statement)
