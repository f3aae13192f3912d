"""The code rules at run time: the guard behind code compiled by ``rules.compile_guarded``.

Every attribute read that can reach a module or a refused name, every attribute write, every
import and every ``getattr``/``setattr``/``globals()`` of graded code comes here. The guard
knows whose each object is (the submission's module, its classes, their instances, its
functions), which modules graded code may have and what of each (``rules.MODULES``), and
refuses the rest with ``RuleError`` at the line (noting it: the report lists every rule
broken). torch's built-in attention is not refused but noted (``Guard.forbidden``).

Runs inside the sandbox only, as ``guard`` (with torch loaded); imports nothing from the
grader.
"""
from __future__ import annotations

import _string
import builtins as _builtins
import operator as _operator
import sys as _sys
import types as _types

try:                                # in the grader (its tests), as autograder.sandbox.guard
    from . import rules
except ImportError:                 # in the sandbox, whose path is this folder
    import rules

ATTRIBUTE_MACHINERY, COPIES, DUNDER_DEFINE_NOT, DUNDER_READ = (
    rules.ATTRIBUTE_MACHINERY, rules.COPIES, rules.DUNDER_DEFINE_NOT, rules.DUNDER_READ)
ERROR, FROM, GET, GET_PRIVATE, IMPORT, INPLACE, REFUSE, DEL, SET, STAR = (
    rules.ERROR, rules.FROM, rules.GET, rules.GET_PRIVATE, rules.IMPORT, rules.INPLACE,
    rules.REFUSE, rules.DEL, rules.SET, rules.STAR)
IDENTITY, MODULES, NEVER, NO_BUILTINS, RULES_DOC = (rules.IDENTITY, rules.MODULES, rules.NEVER,
                                                    rules.NO_BUILTINS, rules.RULES_DOC)
RuleError, _dunder = rules.RuleError, rules._dunder

_getattr, _setattr, _delattr, _hasattr = (_builtins.getattr, _builtins.setattr,
                                          _builtins.delattr, _builtins.hasattr)
_isinstance, _type, _id, _len, _callable = (_builtins.isinstance, _builtins.type, _builtins.id,
                                            _builtins.len, _builtins.callable)
_ModuleType, _FunctionType = _types.ModuleType, _types.FunctionType
_build_class = _builtins.__build_class__
_object_setattr, _object_getattribute = object.__setattr__, object.__getattribute__
_issubclass, _str_str, _tuple = _builtins.issubclass, str.__str__, _builtins.tuple
_BuiltinMethod = _types.BuiltinMethodType
_STR_FORMATS = (str.format, str.format_map)
import io as _io                    # noqa: E402  (loaded with Python itself)
_IOBase = _io.IOBase
GUARD_PREFIXES = rules.GUARD_PREFIXES
#: Names whose reading gives an object the guard hands on changed: the attribute machinery
#: (bound to one's own object, its name argument checked), a class's metaclass (a view).
SPECIAL = ATTRIBUTE_MACHINERY | {"__class__", "__call__"}
FORMATS = frozenset({"format", "format_map"})
#: Hooks that typing's own machinery puts on a class it makes (NamedTuple's __match_args__,
#: Protocol's __subclasshook__): refused only where the submission's code defined them.
LIBRARY_SET = frozenset({"__match_args__", "__subclasshook__"})
#: A stream's layers below its text: a file object whose class opens any path.
RAW_STREAMS = frozenset({"buffer", "raw"})


def _exact(name):
    """A name as Python reads it: a str subclass's own text as an exact str (its __eq__ and
    __hash__ never consulted); anything else as it is (Python's TypeError follows)."""
    if _type(name) is str or not _isinstance(name, str):
        return name
    return _str_str(name)


def _metaclass(value) -> bool:
    return _isinstance(value, _type) and _issubclass(value, _type)


def unsafe_field(text, depth: int = 0):
    """The first replacement field of a format string that reads a private or dunder attribute
    (``"{0.__init__.__globals__}"``), or None: str.format reads attributes unseen."""
    if not _isinstance(text, str):
        return None
    for _, field, spec, _ in _string.formatter_parser(_str_str(text)):
        if field is None:
            continue
        _, rest = _string.formatter_field_name_split(field)
        for is_attr, key in rest:
            if is_attr and ((key.startswith("_") and key not in DUNDER_READ) or key in NEVER):
                return field
        if spec and depth < 4:
            inner = unsafe_field(spec, depth + 1)
            if inner is not None:
                return inner
    return None


def _refuse_field(field) -> None:
    message = (f"line {_caller_line()}: the format field {{{field}}} reads a private or dunder "
               f"attribute (code rule 2, {RULES_DOC})")
    if ACTIVE:
        ACTIVE[-1]._raise(message)
    raise RuleError(message)


class Placeholder(_ModuleType):
    """What importing a module outside the rules gives: importing works, using it raises (and
    the guard that made it notes the rule broken)."""

    def __init__(self, name: str, line: int, guard=None):
        super().__init__(name)
        _object_setattr(self, "_rules_line", line)
        _object_setattr(self, "_rules_guard", guard)

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Placeholder(f"{self.__name__}.{attr}", _object_getattribute(self, "_rules_line"),
                           _object_getattribute(self, "_rules_guard"))

    def __call__(self, *args, **kwargs):
        message = (f"line {_caller_line()}: {self.__name__} is not available to graded code "
                   f"(imported on line {_object_getattribute(self, '_rules_line')}; code rule 1: "
                   f"graded code may import only {', '.join(_top_modules())}; {RULES_DOC})")
        guard = _object_getattribute(self, "_rules_guard")
        if guard is not None:
            guard._raise(message)
        raise RuleError(message)


def _top_modules() -> list[str]:
    return sorted({name.split(".")[0] for name in MODULES if name != "__future__"})


def _caller_line() -> int:
    """The line of graded code being run (the first frame outside this file)."""
    frame = _sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    return frame.f_lineno if frame is not None else 0


def preload() -> list[str]:
    """Import every module of ``MODULES`` that this machine has, once (in the zygote, before any
    submission): graded code then only ever gets modules already loaded, never one found on a
    path it could change. Returns the names not available here."""
    missing = []
    for name in MODULES:
        try:
            __import__(name)
        except Exception:
            missing.append(name)
    for name in ATTENTION_MODULES:          # not graded code's: there to be watched
        try:
            __import__(name)
        except Exception:
            pass
    forbidden_attention()
    nn_private_names()
    risky_names()
    watch_tensor_subclasses()
    harden_logging()
    return missing


def harden_logging() -> None:
    """logging's "{" style formats a record with str.format (attribute fields read unseen):
    every such format string is checked when its style object is made, however it is made."""
    logging = _sys.modules.get("logging")
    style = _getattr(logging, "StrFormatStyle", None) if logging is not None else None
    if style is None or "_rules_checked" in vars(style):
        return
    real = style.__init__

    def __init__(self, fmt, *args, **kwargs):
        field = unsafe_field(fmt)
        if field is not None:
            _refuse_field(field)
        real(self, fmt, *args, **kwargs)
    style.__init__ = __init__
    style._rules_checked = True


#: Hooks torch's dispatch calls on a tensor of a class that defines them: not for graded code.
TENSOR_HOOKS = ("__torch_dispatch__", "__torch_function__")
SUBMISSION_FILE = "mha.py"


def watch_tensor_subclasses() -> None:
    """Refuse a subclass of torch.Tensor that defines torch's dispatch hooks when graded code
    makes it, however it makes it (a class statement, type(name, bases, ns), a metaclass):
    torch calls ``Tensor.__init_subclass__`` for every one. torch's own subclasses (made by
    torch's code, e.g. on a lazy import) are not graded code and pass."""
    torch = _sys.modules.get("torch")
    if torch is None or "__init_subclass__" in vars(torch.Tensor):
        return

    def check(cls, **kwargs):
        frame = _sys._getframe(1)
        while frame is not None and frame.f_code.co_filename == __file__:
            frame = frame.f_back
        ours = frame is not None and frame.f_code.co_filename == SUBMISSION_FILE \
            and frame.f_globals.get("__name__") == "mha"
        defined = [h for h in TENSOR_HOOKS if h in vars(cls)]
        if ours and defined:
            message = (f"line {frame.f_lineno}: the tensor class {cls.__name__} defines "
                       f"{defined[0]}, which torch's dispatch calls on its own (code rule 2, "
                       f"{RULES_DOC})")
            if ACTIVE:
                ACTIVE[-1]._raise(message)
            raise RuleError(message)
    torch.Tensor.__init_subclass__ = classmethod(check)


def risky_names() -> frozenset:
    """The public attribute names whose reading the guard must see: every name under which a
    loaded module holds a module (``torch.os``, ``F.np``), every entry of an allowed package's
    folder and torch's lazy modules (modules that may appear later), every name an allowed
    module's policy refuses or changes, and torch's attention. Any other public name gives no
    module and nothing refused, so compiled code reads it as it is (no cost)."""
    names = _CACHE.get("risky")
    if names is not None:
        return names
    import os
    import warnings
    found = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module in list(_sys.modules.values()):
            try:
                items = list(vars(module).items())
            except TypeError:
                continue
            found |= {k for k, v in items if _isinstance(v, _ModuleType) or _metaclass(v)}
    for name, rule in MODULES.items():
        module = _sys.modules.get(name)
        if module is None:
            continue
        for folder in _getattr(module, "__path__", None) or ():
            try:
                found |= {e[:-3] if e.endswith(".py") else e for e in os.listdir(folder)}
            except OSError:
                pass
        if rule is not None:
            kind, listed = rule
            found |= (set(dir(module)) - listed) if kind == "only" else set(listed)
    torch = _sys.modules.get("torch")
    found |= set(_getattr(torch, "_lazy_modules", ()) or ())
    found |= {attr for _, attr in IDENTITY} | {attr for _, attr in COPIES}
    found |= {attr for _, attr in SUBSTITUTES} | FORMATS | RAW_STREAMS
    found |= {name.rsplit(".", 1)[-1] for name in forbidden_attention().values()}
    names = frozenset(n for n in found if _type(n) is str and n.isidentifier()
                      and not n.startswith("_"))
    _CACHE["risky"] = names
    return names


class Guard:
    """The rules at run time, for one submission's module: the builtins its code sees, the
    classes it defined, the rules it broke and the forbidden built-ins it reached."""

    def __init__(self, module: _types.ModuleType, violations=()):
        self.module = module
        self.violations = list(violations)
        self.own: set = set()                 # classes the submission defined
        self.broken: list[str] = []           # rules broken while running (messages)
        self.forbidden: list[str] = []        # torch's attention reached (names)
        self.policies: dict[int, tuple] = {}
        self._allowed: dict[tuple, object] = {}     # (module id, name) -> value, once allowed
        for name, rule in MODULES.items():
            if name in _sys.modules:
                self.policies.setdefault(_id(_sys.modules[name]), (name, rule))
        self._views: dict[int, MetaclassView] = {}
        self.metaclasses = {_id(_type)}           # those a class statement may name
        for module, name in (("abc", "ABCMeta"), ("enum", "EnumType"), ("enum", "EnumMeta")):
            value = _getattr(_sys.modules.get(module), name, None)
            if value is not None:
                self.metaclasses.add(_id(value))

    # -- whose is it ---------------------------------------------------------------------------

    def owns(self, obj) -> bool:
        """Defined by the submission: its module, its classes, their instances, its functions."""
        if obj is self.module or _type(obj) in self.own or (_isinstance(obj, _type)
                                                             and obj in self.own):
            return True
        return _isinstance(obj, _FunctionType) and \
            _object_getattribute(obj, "__globals__") is self.module.__dict__

    def fail(self, rule: int, what: str):
        self._raise(f"line {_caller_line()}: {what} (code rule {rule}, {RULES_DOC})")

    def refuse(self, index: int):
        self._raise(str(self.violations[index]))

    def _raise(self, message: str):
        if message not in self.broken and _len(self.broken) < 20:
            self.broken.append(message)
        raise RuleError(message)

    # -- the builtins graded code sees ---------------------------------------------------------

    def builtins(self) -> dict:
        """The builtins of the compiled module: Python's, less those that run code or reach
        namespaces by name, with the guard's entry points."""
        table = {k: v for k, v in vars(_builtins).items() if k not in NO_BUILTINS}
        for name in NO_BUILTINS - {"__import__", "__build_class__"}:
            table[name] = self._unavailable(name)
        table.update(globals=self.globals_, locals=self.locals_, vars=self.vars_,
                     type=self.view(_type))
        get, get_private = self._getters()
        table.update({
            GET: get, GET_PRIVATE: get_private, SET: self.set, DEL: self.delete,
            IMPORT: self.import_, FROM: self.from_, STAR: self.star, INPLACE: _inplace,
            REFUSE: self.refuse, ERROR: RuleError, "__import__": self.dunder_import,
            "__build_class__": self.build_class,
            "getattr": self._getattr_builtin(get_private), "hasattr": self._hasattr_builtin(
                get_private), "setattr": self.setattr, "delattr": self.delattr})
        return table

    def _unavailable(self, name):
        fail = self.fail

        def unavailable(*args, **kwargs):
            fail(2, f"{name}() is not available to graded code")
        unavailable.__name__ = name
        return unavailable

    def _getters(self):
        """The two attribute readers the compiled code calls: for public names (the fast path:
        what a module gives, and a module or forbidden object reached from anything else) and
        for names that start with an underscore."""
        policies, forbidden = self.policies, forbidden_attention()
        torch = _sys.modules.get("torch")
        attention = torch.nn.MultiheadAttention if torch is not None else ()
        module_attribute, check_module, note = (self._module_attribute, self._check_module,
                                                self._note_forbidden)

        view, checked_format = self.view, self._checked_format

        def get(obj, name):
            if _isinstance(obj, _ModuleType):
                return module_attribute(obj, name)
            value = _getattr(obj, name)
            if _isinstance(value, _ModuleType) and _id(value) not in policies:
                check_module(value, f".{name}")
            if _id(value) in forbidden or _isinstance(value, _type) and _issubclass(value,
                                                                                attention):
                note(value)
            if _metaclass(value):
                return view(value)
            if name in FORMATS:
                return checked_format(value)
            if name in RAW_STREAMS and _isinstance(obj, _IOBase):
                self.fail(1, f".{name} of a stream is not available to graded code (write "
                             "text with print or .write)")
            return value

        check_private, special = self._check_private, self._special

        def get_private(obj, name):
            if name.startswith("_"):
                check_private(obj, name)
                if name in SPECIAL:
                    return special(obj, name)
            elif name in NEVER:
                self.fail(2, f".{name} is not available to graded code")
            return get(obj, name)
        return get, get_private

    def _checked_format(self, value):
        """str.format and format_map, bound or not: their format string checked first (a
        field that reads a private or dunder attribute is refused)."""
        if _type(value) is _BuiltinMethod and _isinstance(_object_getattribute(
                value, "__self__"), str) and value.__name__ in FORMATS:
            text = _object_getattribute(value, "__self__")

            def bound(*args, **kwargs):
                field = unsafe_field(text)
                if field is not None:
                    _refuse_field(field)
                return value(*args, **kwargs)
            return bound
        if any(value is f for f in _STR_FORMATS):
            def unbound(*args, **kwargs):
                field = unsafe_field(args[0]) if args else None
                if field is not None:
                    _refuse_field(field)
                return value(*args, **kwargs)
            return unbound
        return value

    def _special(self, obj, name: str):
        """The attribute machinery, ``__class__`` and ``__call__`` (already allowed by
        ``_check_private``): a metaclass comes as a view; machinery read off one's own class
        only where the class itself defines it; machinery bound to one's own object checks the
        name it is given as the same attribute written in code would be."""
        value = _getattr(obj, name)
        if name == "__class__":
            return self.view(value) if _metaclass(value) else value
        if name == "__call__":
            if _isinstance(obj, _type) and not self.owns(obj):
                self.fail(2, f".__call__ of the class {_show(obj)}, which your code did not "
                             "define")
            return value
        if _isinstance(obj, _type):
            if not self.owns(value):
                self.fail(2, f".{name} of the class {_show(obj)} is Python's own, which works "
                             "on any object: call it on your own object (self.{name}, super())")
            return value
        target = _object_getattribute(obj, "__self__") if _type(obj) is super else obj
        write = name in ("__setattr__", "__delattr__")
        guard = self

        def machinery(*args, **kwargs):
            if args:
                attr = _exact(args[0])
                if _type(attr) is str:
                    if write:
                        guard._check_write(target, attr, "assign" if name == "__setattr__"
                                           else "delete")
                    elif attr.startswith("_"):
                        guard._check_private(target, attr)
                        if attr in SPECIAL:
                            return guard._special(target, attr)
                    args = (attr,) + _tuple(args[1:])
            return value(*args, **kwargs)
        return machinery

    def _check_private(self, obj, name: str) -> None:
        if _dunder(name):
            if name in DUNDER_READ or (name == "__dict__" and self.owns(obj)
                                       and not _isinstance(obj, _ModuleType)):
                return
            if name in ATTRIBUTE_MACHINERY and self._machinery_of_its_own(obj):
                return
            self.fail(2, f".{name}: of the dunder attributes, graded code may use only the "
                         "ordinary ones (__init__, __name__, __class__, operators)")
        mine = self.owns(obj)
        if mine and name not in nn_private_names():
            return
        if name == "_assert" and obj is _sys.modules.get("torch"):
            return
        self.fail(2, f".{name}: a private attribute of " + (
            "torch's nn.Module machinery" if mine else "an object your code did not define"))

    def _machinery_of_its_own(self, obj) -> bool:
        """Whose attribute machinery graded code may call: its own classes and instances, and
        super() of its own instance (never of a class: that gives Python's own function)."""
        if self.owns(obj):
            return True
        if _type(obj) is super:
            this, bound = (_object_getattribute(obj, n) for n in ("__thisclass__", "__self__"))
            return this in self.own and not _isinstance(bound, _type) and self.owns(bound)
        return False

    # -- metaclasses ---------------------------------------------------------------------------

    def view(self, meta) -> "MetaclassView":
        found = self._views.get(_id(meta))
        if found is None:
            found = self._views[_id(meta)] = MetaclassView(meta, self)
        return found

    # -- the namespaces graded code may see ----------------------------------------------------

    def globals_(self):
        return Namespace(self, self.module.__dict__, own=True)

    def locals_(self):
        frame = _sys._getframe(1)
        if frame.f_locals is self.module.__dict__:
            return self.globals_()
        return dict(frame.f_locals)          # a function's locals: a copy, as in Python

    def vars_(self, *obj):
        if not obj:
            return self.locals_()
        target = obj[0]
        try:
            table = _object_getattribute(target, "__dict__")
        except AttributeError:
            raise TypeError("vars() argument must have __dict__ attribute") from None
        if target is self.module:
            return self.globals_()
        return Namespace(self, table, own=self.owns(target) and not _isinstance(target, _type),
                         of=target)

    def _module_attribute(self, module, name: str):
        key = (_id(module), name)
        cached = self._allowed.get(key, self._allowed)
        if cached is not self._allowed:
            return cached
        if _isinstance(module, Placeholder) or module is self.module:
            return _getattr(module, name)
        value = self._module_policy(module, name)
        if not (_isinstance(value, list) or _isinstance(value, dict)):
            self._allowed[key] = value
        return value

    def _module_policy(self, module, name: str):
        policy = self.policies.get(_id(module))
        if policy is None:
            self.fail(1, f"the module {_module_name(module)} is not available to graded code")
        owner, rule = policy
        if (owner, name) in IDENTITY:
            return _identity
        if rule is not None and (rule[0] == "only") != (name in rule[1]):
            self.fail(1, f"{owner}.{name} is not available to graded code")
        value = _getattr(module, name)
        copy = COPIES.get((owner, name))
        if copy is not None:
            return copy(value)
        substitute = SUBSTITUTES.get((owner, name))
        if substitute is not None:
            return substitute(self, value)
        if _metaclass(value):
            return self.view(value)
        if _isinstance(value, _ModuleType) and _id(value) not in self.policies:
            self._check_module(value, f"{owner}.{name}")
        if _id(value) in forbidden_attention() or is_attention_class(value):
            self._note_forbidden(value)
        return value

    def _check_module(self, module, how: str) -> None:
        if _isinstance(module, Placeholder) or module is self.module:
            return
        self.fail(1, f"{how} is the module {_module_name(module)}, which graded code may not use")

    def _note_forbidden(self, value) -> None:
        name = forbidden_name(value)
        if name and name not in self.forbidden:
            self.forbidden.append(name)

    # -- writes --------------------------------------------------------------------------------

    def set(self, obj, name: str, value) -> None:
        self._check_write(obj, name, "assign")
        _setattr(obj, name, value)

    def delete(self, obj, name: str) -> None:
        self._check_write(obj, name, "delete")
        _delattr(obj, name)

    def _check_write(self, obj, name: str, verb: str) -> None:
        if _dunder(name):
            self.fail(3, f"may not {verb} the dunder attribute .{name}")
        mine = self.owns(obj)
        if name.startswith("_") and (not mine or name in nn_private_names()):
            self.fail(3, f"may not {verb} .{name}, a private attribute of " + (
                "torch's nn.Module machinery" if mine else "an object your code did not define"))
        if mine:
            return
        if _isinstance(obj, (_ModuleType, _type)) or _callable(obj) and \
                not _isinstance(obj, _torch_module_class()):
            what = ("module" if _isinstance(obj, _ModuleType) else
                    "class" if _isinstance(obj, _type) else "function")
            self.fail(3, f"may not {verb} .{name} of the {what} {_show(obj)}, which your code "
                         "did not define (no monkeypatching)")

    # -- the builtins that reach attributes by name --------------------------------------------

    def _getattr_builtin(self, get_private):
        def getattr(obj, name, *default):
            name = _exact(name)
            if _type(name) is not str:
                return _getattr(obj, name, *default)          # Python's own TypeError
            try:
                return get_private(obj, name)
            except AttributeError:
                if default:
                    return default[0]
                raise
        return getattr

    def _hasattr_builtin(self, get_private):
        def hasattr(obj, name):
            name = _exact(name)
            if _type(name) is not str:
                return _hasattr(obj, name)
            try:
                get_private(obj, name)
            except AttributeError:
                return False
            return True
        return hasattr

    def setattr(self, obj, name, value) -> None:
        name = _exact(name)
        if _type(name) is not str:
            return _setattr(obj, name, value)
        self.set(obj, name, value)

    def delattr(self, obj, name) -> None:
        name = _exact(name)
        if _type(name) is not str:
            return _delattr(obj, name)
        self.delete(obj, name)

    def build_class(self, func, name, *bases, **kwargs):
        name = _exact(name)
        meta = kwargs.get("metaclass")
        if _type(meta) is MetaclassView:
            meta = kwargs["metaclass"] = _object_getattribute(meta, "_meta")
        if meta is not None and _id(meta) not in self.metaclasses:
            self.fail(2, f"class {name} has a metaclass (only abc.ABCMeta and enum's are allowed)")
        for base in bases:
            if _type(base) is MetaclassView or _metaclass(base):
                self.fail(2, f"class {name} is a metaclass (its base {_show(base)} is one)")
        cls = _build_class(func, name, *bases, **kwargs)
        bad = sorted(k for k, v in vars(cls).items() if k in DUNDER_DEFINE_NOT and k not in (
            "__module__", "__qualname__", "__dict__", "__doc__", "__slots__")
            and not (k in LIBRARY_SET and not self.owns(_getattr(v, "__func__", v))))
        if bad:
            self.fail(2, f"class {name} defines {bad[0]}")
        self.own.add(cls)
        return cls

    # -- imports ---------------------------------------------------------------------------------

    def dunder_import(self, name, globals=None, locals=None, fromlist=(), level=0):
        if level:
            self.fail(1, "a relative import (graded code is one module, mha)")
        return self._module(name) if fromlist else self.import_(name, False)

    def _module(self, name: str):
        """The module ``name`` as graded code gets it: the real one, loaded before any
        submission (``preload``), or a placeholder."""
        name = _exact(name)
        module = _sys.modules.get(name) if name in MODULES else None
        if module is None:
            return Placeholder(name, _caller_line(), self)
        self.policies.setdefault(_id(module), (name, MODULES[name]))
        return module

    def import_(self, name: str, whole: bool):
        """``import a.b.c`` binds a (whole=False); ``import a.b.c as x`` binds a.b.c."""
        target = self._module(name)
        top = name.split(".")[0]
        return target if whole or top == name else self._module(top)

    def from_(self, module: str, names: tuple):
        base = self._module(module)
        out = []
        for name in names:
            if name.startswith("_"):
                self.fail(2, f"importing the private name {name} from {module}")
            full = f"{module}.{name}"
            if full in MODULES:
                out.append(self._module(full))
                continue
            try:
                out.append(self._getters()[0](base, name))
            except AttributeError:
                raise ImportError(f"cannot import name {name!r} from {module!r}") from None
        return tuple(out)

    def star(self, module: str) -> None:
        base = self._module(module)
        if _isinstance(base, Placeholder):
            return
        names = _getattr(base, "__all__", None) or [n for n in dir(base) if not n.startswith("_")]
        get = self._getters()[0]
        for name in list(names):
            if _type(name) is str and not name.startswith("_"):
                try:
                    self.module.__dict__[name] = get(base, name)
                except (RuleError, AttributeError):
                    continue


class Namespace:
    """A namespace as graded code sees it through globals(), locals() or vars(): its public
    names (a dunder or private name refused, torch's nn.Module machinery too), written only
    where the namespace is the submission's own (its module, its own objects)."""

    def __init__(self, guard: Guard, table: dict, own: bool, of=None):
        _object_setattr(self, "_guard", guard)
        _object_setattr(self, "_table", table)
        _object_setattr(self, "_own", own)
        _object_setattr(self, "_of", of)

    def _key(self, key, write: bool):
        guard, own, of = (_object_getattribute(self, n) for n in ("_guard", "_own", "_of"))
        key = _exact(key)
        if _type(key) is not str:        # no lookalike key (its __eq__/__hash__ would match)
            guard.fail(2, "a namespace's keys are names: exact strings, not "
                          f"{_type(key).__name__} objects")
        if _dunder(key) or key.startswith("_rules") or (key.startswith("_") and (
                not own or key in nn_private_names())):
            guard.fail(2, f"the name {key} of a namespace is not available to graded code")
        if write and not own:
            guard.fail(3, f"may not change the namespace of {_show(of)}, which your code did "
                          "not define (no monkeypatching)")
        if not write and of is not None:             # the same policy as of.key
            value = guard._getters()[0](of, key) if not _isinstance(of, _ModuleType) else \
                guard._module_attribute(of, key)
            return key, value
        return key, _NOTHING

    def __getitem__(self, key):
        key, value = self._key(key, False)
        raw = _object_getattribute(self, "_table")[key]
        if value is not _NOTHING and value is not raw and (
                _isinstance(_object_getattribute(self, "_of"), _ModuleType)
                or _type(value) is MetaclassView
                or _getattr(value, "__module__", None) == __name__):
            return value                             # what the policy gives in its place
        return raw

    def get(self, key, default=None):
        try:
            return self[key]
        except KeyError:
            return default

    def __setitem__(self, key, value):
        _object_getattribute(self, "_table")[self._key(key, True)[0]] = value

    def __delitem__(self, key):
        del _object_getattribute(self, "_table")[self._key(key, True)[0]]

    def __contains__(self, key):
        return key in self.keys()

    def keys(self):
        own = _object_getattribute(self, "_own")
        return [k for k in _object_getattribute(self, "_table")
                if _type(k) is str and not _dunder(k) and not k.startswith("_rules")
                and not (k.startswith("_") and (not own or k in nn_private_names()))]

    def __iter__(self):
        return iter(self.keys())

    def __len__(self):
        return _len(self.keys())

    def items(self):
        return [(k, self[k]) for k in self.keys()]

    def values(self):
        return [self[k] for k in self.keys()]

    def update(self, *others, **kwargs):
        for other in others:
            for k, v in (other.items() if _hasattr(other, "items") else other):
                self[k] = v
        for k, v in kwargs.items():
            self[k] = v

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def pop(self, key, *default):
        try:
            value = self[key]
        except KeyError:
            if default:
                return default[0]
            raise
        del self[key]
        return value

    def copy(self):
        return dict(self.items())


_NOTHING = object()


class MetaclassView:
    """A metaclass as graded code gets it (``type``, ``abc.ABCMeta``, ``enum.EnumMeta``,
    ``type(cls)``, ``cls.__class__``): a class statement may name it as ``metaclass=`` (the
    allowed ones) and ``isinstance``/``issubclass`` take it; calling it to make a class
    outside a class statement, or deriving a metaclass from it, is refused. ``type(x)`` works."""

    __slots__ = ("_meta", "_guard")

    def __init__(self, meta, guard):
        _object_setattr(self, "_meta", meta)
        _object_setattr(self, "_guard", guard)

    def __call__(self, *args, **kwargs):
        meta, guard = _object_getattribute(self, "_meta"), _object_getattribute(self, "_guard")
        if meta is _type and _len(args) == 1 and not kwargs:
            found = _type(args[0])
            if found is MetaclassView:               # a view is a metaclass to graded code
                found = _type
            return guard.view(found) if _metaclass(found) else found
        guard.fail(2, f"calling {_show(meta)} with a name, bases and namespace makes a class "
                      "outside a class statement (write a class statement)")

    def __instancecheck__(self, obj):
        if _type(obj) is MetaclassView:
            obj = _object_getattribute(obj, "_meta")
        return _isinstance(obj, _object_getattribute(self, "_meta"))

    def __subclasscheck__(self, cls):
        if _type(cls) is MetaclassView:
            cls = _object_getattribute(cls, "_meta")
        return _issubclass(cls, _object_getattribute(self, "_meta"))

    def __mro_entries__(self, bases):
        guard = _object_getattribute(self, "_guard")
        guard.fail(2, f"a class derived from {_show(_object_getattribute(self, '_meta'))} is "
                      "a metaclass")

    def __getattr__(self, attr):
        if attr in ("__name__", "__qualname__", "__module__", "__doc__"):
            return _getattr(_object_getattribute(self, "_meta"), attr)
        raise AttributeError(attr)

    def __eq__(self, other):
        return other is self or other is _object_getattribute(self, "_meta")

    def __hash__(self):
        return hash(_object_getattribute(self, "_meta"))

    def __repr__(self):
        return repr(_object_getattribute(self, "_meta"))


def _os_write(guard, real):
    def write(fd, data, /):
        if _type(fd) is not int or fd not in (1, 2):
            guard.fail(1, "os.write writes only to standard output and error (fd 1 and 2)")
        return real(fd, data)
    return write


def _update_wrapper(guard, real):
    import functools

    def update_wrapper(wrapper, wrapped, assigned=functools.WRAPPER_ASSIGNMENTS,
                       updated=functools.WRAPPER_UPDATES):
        if assigned is not functools.WRAPPER_ASSIGNMENTS or \
                updated is not functools.WRAPPER_UPDATES:
            guard.fail(2, "functools.update_wrapper/wraps copy only their default attributes "
                          "(no assigned= or updated=)")
        if not guard.owns(wrapper):
            guard.fail(3, f"functools.update_wrapper changes {_show(wrapper)}, which your code "
                          "did not define")
        return functools.update_wrapper(wrapper, wrapped)
    update_wrapper.__name__ = "update_wrapper"
    return update_wrapper


def _wraps(guard, real):
    import functools
    update_wrapper = _update_wrapper(guard, None)

    def wraps(wrapped, assigned=functools.WRAPPER_ASSIGNMENTS, updated=functools.WRAPPER_UPDATES):
        if assigned is not functools.WRAPPER_ASSIGNMENTS or \
                updated is not functools.WRAPPER_UPDATES:
            guard.fail(2, "functools.update_wrapper/wraps copy only their default attributes "
                          "(no assigned= or updated=)")
        return lambda wrapper: update_wrapper(wrapper, wrapped)
    return wraps


def _dataclass(guard, real):
    def dataclass(cls=None, /, **kwargs):
        def wrap(c):
            out = real(c, **kwargs)
            for name in _object_getattribute(out, "__dict__").get("__dataclass_fields__", {}):
                if _type(name) is not str or _dunder(name) or name.startswith(GUARD_PREFIXES) \
                        or name in nn_private_names():
                    guard.fail(2, f"the dataclass field {name!s:.40} (a dunder name or one of "
                                  "torch's nn.Module machinery)")
            return out
        return wrap if cls is None else wrap(cls)
    return dataclass


#: (module, name) -> what graded code gets in its place, made by f(guard, the real one): the
#: same function, with the arguments that would reach what the rules refuse refused.
def _basic_config(guard, real):
    def basicConfig(**kwargs):
        if "filename" in kwargs:
            guard.fail(1, "logging.basicConfig(filename=...) opens a file; graded code logs to "
                          "the console")
        return real(**kwargs)
    return basicConfig


SUBSTITUTES = {("logging", "basicConfig"): _basic_config, ("os", "write"): _os_write, ("functools", "update_wrapper"): _update_wrapper,
               ("functools", "wraps"): _wraps, ("dataclasses", "dataclass"): _dataclass}


def _identity(obj=None, *args, **kwargs):
    """torch.compile and torch.jit.script in graded code: the function or module itself (and,
    called with options only, a decorator that gives it back)."""
    if obj is None:
        return lambda f: f
    return obj


def _inplace(op: str, current, value):
    return _getattr(_operator, op)(current, value)


def _module_name(module) -> str:
    try:
        return str(_object_getattribute(module, "__name__"))
    except Exception:
        return "?"


def _show(obj) -> str:
    try:
        return str(_getattr(obj, "__qualname__", None) or _getattr(obj, "__name__", None)
                   or _type(obj).__name__)[:60]
    except Exception:
        return "?"


_CACHE: dict = {}
ACTIVE: list = []           #: the guard of the submission this process runs (one per sandbox)


def _torch_module_class():
    torch = _sys.modules.get("torch")
    return torch.nn.Module if torch is not None else ()


#: Where torch keeps attention that is not a class of torch.nn: loaded before any submission
#: (``preload``) so that its functions can be watched whatever way they are reached.
ATTENTION_MODULES = ("torch.nn.attention.flex_attention",)


def attention_classes() -> list:
    """torch's attention modules by kind: nn.MultiheadAttention and every subclass of it loaded
    now (the quantizable and quantized variants ...), however they are reached."""
    torch = _sys.modules.get("torch")
    if torch is None:
        return []
    found, todo = [], [torch.nn.MultiheadAttention]
    while todo:
        cls = todo.pop()
        if cls not in found:
            found.append(cls)
            todo.extend(_type.__subclasses__(cls))
    return found


def attention_class_name(cls) -> str:
    """A class of torch's attention by its public path (``torch.ao.nn.quantizable.
    MultiheadAttention``); a class of anyone else's built on one, by the torch class it builds
    on (a submission's subclass is its own; what it inherits is torch's)."""
    torch = _sys.modules.get("torch")
    base = torch.nn.MultiheadAttention if torch is not None else None
    for c in _getattr(cls, "__mro__", ()):
        module = str(_getattr(c, "__module__", "") or "")
        if base is not None and _issubclass(c, base) and module.startswith("torch."):
            parts = module.split(".")
            if "modules" in parts:                   # torch.nn.modules.activation -> torch.nn
                parts = parts[:parts.index("modules")]
            return ".".join(parts) + "." + c.__name__
    return _show(cls)


def is_attention_class(value) -> bool:
    torch = _sys.modules.get("torch")
    return torch is not None and _isinstance(value, _type) and \
        _issubclass(value, torch.nn.MultiheadAttention)


def forbidden_attention() -> dict:
    """id -> name of torch's built-in attention (the assignment forbids it, by kind): the
    functions (scaled_dot_product_attention, multi_head_attention_forward, flex_attention and
    the operator behind it), nn.MultiheadAttention with every subclass of it, and the
    Transformer layers built on it. A subclass loaded later is known by kind
    (``is_attention_class``)."""
    found = _CACHE.get("forbidden")
    if found is None:
        found = {}
        torch = _sys.modules.get("torch")
        if torch is not None:
            F = torch.nn.functional
            for owner, name in ((F, "scaled_dot_product_attention"),
                                (F, "multi_head_attention_forward"),
                                (torch.nn, "Transformer"),
                                (torch.nn, "TransformerEncoderLayer"),
                                (torch.nn, "TransformerDecoderLayer"),
                                (torch.nn, "TransformerEncoder"), (torch.nn, "TransformerDecoder"),
                                (_sys.modules.get(ATTENTION_MODULES[0]), "flex_attention"),
                                (_sys.modules.get("torch._higher_order_ops.flex_attention"),
                                 "flex_attention")):
                value = _getattr(owner, name, None) if owner is not None else None
                if value is not None:
                    found.setdefault(_id(value), f"{_module_name(owner)}.{name}")
            for cls in attention_classes():
                found[_id(cls)] = attention_class_name(cls)
            _CACHE["forbidden"] = found
    return found


def forbidden_name(value):
    """The name of torch's attention ``value`` is (by identity or by kind), or None."""
    name = forbidden_attention().get(_id(value))
    if name is None and is_attention_class(value):
        name = attention_class_name(value)
    return name


def nn_private_names() -> frozenset:
    """The private names torch's nn.Module keeps on every module: never the submission's."""
    names = _CACHE.get("private")
    if names is None:
        torch = _sys.modules.get("torch")
        names = frozenset()
        if torch is not None:
            names = frozenset({n for n in dir(torch.nn.Module) if n.startswith("_")
                               and not _dunder(n)}
                              | {n for n in vars(torch.nn.Module()) if n.startswith("_")})
            _CACHE["private"] = names
    return names


def forget_forbidden() -> None:
    """Read torch's attention objects again (after the sandbox's spies replaced some)."""
    _CACHE.pop("forbidden", None)
    forbidden_attention()


def load(source: bytes, filename: str, module: _types.ModuleType,
         guard: Guard | None = None) -> Guard:
    """Compile ``source`` under the rules and run it as ``module``; returns its guard (``guard``,
    if given, keeps what breaking the rules while importing noted). Raises what compiling or
    running raises (the caller reports it as the submission's)."""
    code, violations = rules.compile_guarded(rules.source_text(source), filename, risky_names())
    guard = guard or Guard(module)
    guard.violations = list(violations)
    ACTIVE[:] = [guard]
    module.__dict__["__builtins__"] = guard.builtins()
    exec(code, module.__dict__)
    return guard
