"""The form of each probe's result, checked in the grader before any check reads it.

Student code runs in the same process as the probes, so it can replace them and answer
anything that decodes (``protocol`` already bounds sizes and allows only plain data). A
check that indexes a forged answer must not crash the grader (a grader failure) and must
not compare less than it asked for: a shorter ``runs`` list would make ``zip`` skip
comparisons. So every probe's answer is held to the form the probe promises, counted
against the request: one run per run asked for, one entry per head count asked for.

Host side only (``autograder.sandbox.results``); a new probe in ``probes.PROBES`` gets a
form here too (``tests/test_sandbox.py`` checks that none is missing).
"""
from __future__ import annotations

import torch

MESSAGE_LIMIT = 500


class ResultError(Exception):
    """The answer does not have the promised form; the message says where."""


class Refused(ResultError):
    """The probe itself reported that it could not run (a ``bad`` answer); the message is
    the probe's, for the student."""


def _fail(path: str, what: str):
    raise ResultError(f"{path or 'the answer'}: {what}")


# -- forms --------------------------------------------------------------------------------

def tensor(value, path):
    if type(value) is not torch.Tensor:
        _fail(path, "not a plain tensor")


def optional(form):
    def check(value, path):
        if value is not None:
            form(value, path)
    return check


def kind(*types):
    def check(value, path):
        if type(value) not in types:
            _fail(path, f"a {type(value).__name__}, not {' or '.join(t.__name__ for t in types)}")
    return check


def anything(value, path):
    """Any plain data: ``protocol`` has already bounded its size, depth and types."""


def ints(value, path):
    kind(tuple, list)(value, path)
    for i, v in enumerate(value):
        kind(int)(v, f"{path}[{i}]")


def returned(item, path, depth=0):
    """What an API function may return: tensors, scalars, strings and tuples of them."""
    if item is None or type(item) in (bool, int, float, str, torch.Tensor):
        return
    if type(item) is tuple and depth < 4:
        for i, v in enumerate(item):
            returned(v, f"{path}[{i}]", depth + 1)
        return
    _fail(path, f"a {type(item).__name__} is not a value an API function returns")


def record(required: dict, optional_keys: dict | None = None, *, extra=None):
    """A dict with these keys (and, if ``extra``, other string keys checked by it)."""
    optional_keys = optional_keys or {}

    def check(value, path):
        kind(dict)(value, path)
        for key, form in required.items():
            if key not in value:
                _fail(path, f"no {key!r}")
            form(value[key], f"{path}.{key}")
        for key, item in value.items():
            if key in required:
                continue
            form = optional_keys.get(key, extra)
            if form is None:
                _fail(path, f"unexpected key {str(key)[:40]!r}")
            form(item, f"{path}.{key}")
    return check


def mapping(form, keys=None):
    """A dict from strings to ``form``; with ``keys``, exactly those keys."""
    def check(value, path):
        kind(dict)(value, path)
        if keys is not None and set(value) != set(keys):
            _fail(path, f"keys {sorted(value)[:8]}, expected {sorted(keys)[:8]}")
        for key, item in value.items():
            form(item, f"{path}.{key}")
    return check


def sequence(form, length=None):
    def check(value, path):
        kind(list, tuple)(value, path)
        if length is not None and len(value) != length:
            _fail(path, f"{len(value)} items, expected {length}")
        for i, item in enumerate(value):
            form(item, f"{path}[{i}]")
    return check


def raised(value, path):
    record({"type": kind(str), "message": kind(str)}, extra=kind(str, bool))(value, path)


def attempt(form=anything):
    """What ``probes._attempt`` returns: exactly one of value, bad, raised."""
    def check(value, path):
        kind(dict)(value, path)
        if len(value) != 1 or next(iter(value)) not in ("value", "bad", "raised"):
            _fail(path, "not exactly one of 'value', 'bad', 'raised'")
        ((key, item),) = value.items()
        {"value": form, "bad": kind(str), "raised": raised}[key](item, f"{path}.{key}")
    return check


PARAM = record({"name": kind(str), "shape": ints, "numel": kind(int), "storage": kind(int),
                "is_param": kind(bool)}, extra=anything)


def _run(run: dict):
    grads = {"grads": mapping(optional(tensor))} if run.get("grad") is not None else {}
    return record({"out": tensor, "weights": optional(tensor), **grads})


def _runs(runs, path, answer):
    sequence(anything, len(runs))(answer, path)
    for i, (run, item) in enumerate(zip(runs, answer)):
        _run(run)(item, f"{path}[{i}]")


# -- one form per probe, given the request ---------------------------------------------

def _call(answer, kw):
    if type(answer) is dict and set(answer) == {"bad"}:
        kind(str)(answer["bad"], "bad")
        raise Refused(answer["bad"])
    if type(answer) is dict and set(answer) == {"raised"}:
        raised(answer["raised"], "raised")
        return {"raised": raised_info(answer["raised"])}
    record({"value": returned, "after": sequence(optional(tensor), len(kw.get("args", ())))}
           )(answer, "")


def _mha(answer, kw):
    spec = kw["spec"]
    state = {"state": mapping(tensor)} if spec.get("want_state") else {}
    record({"params": sequence(PARAM), "runs": anything, **state})(answer, "")
    _runs(spec.get("runs", ()), "runs", answer["runs"])


def _mha_loads(answer, kw):
    spec = kw["spec"]
    record({"params": sequence(PARAM), "runs": anything})(answer, "")
    _runs(list(spec["runs"])[:len(spec["loads"])], "runs", answer["runs"])


def _mha_raises(answer, kw):
    attempt(optional(anything))(answer, "")


PARTS = ("module", "masked_softmax", "attention_pool")
TRACED = record({"params": kind(int), "ops": mapping(kind(int)), "flops": kind(int),
                 "work": kind(int), "sync": sequence(kind(str))})
UNTRACED = record({"params": kind(int)}, {"bad": kind(str), "raised": raised})
DISPATCHED = attempt(record({"device": kind(str), "sync": sequence(kind(str)),
                             "foreign": sequence(kind(str))}))
FINITE = attempt(record({"finite": kind(bool), "dtype": kind(str)}))


def _trace(answer, kw):
    mapping(anything, keys=[str(h) for h in kw["spec"]["heads"]])(answer, "")
    for heads, entry in answer.items():
        kind(dict)(entry, heads)
        (TRACED if "ops" in entry else UNTRACED)(entry, heads)
        if "ops" not in entry and len(entry) != 2:
            _fail(heads, "neither traced nor a reason why not")


def _on_device(answer, kw):
    mapping(record({"cpu": DISPATCHED}, {"device": DISPATCHED}), keys=PARTS)(answer, "")


def _low_precision(answer, kw):
    mapping(mapping(FINITE, keys=PARTS), keys=kw["spec"]["modes"])(answer, "")


def _on_cuda(answer, kw):
    record({}, {"unavailable": kind(bool), "values": attempt(mapping(anything)),
                "sync": attempt(mapping(anything)), "memory": attempt(record({"peak": kind(int)})),
                "autocast": mapping(FINITE)})(answer, "")


FORMS = {"call": _call, "mha": _mha, "mha_raises": _mha_raises, "mha_loads": _mha_loads,
         "trace": _trace, "on_device": _on_device, "low_precision": _low_precision,
         "on_cuda": _on_cuda}


def check(name: str, kwargs: dict, answer):
    """``answer`` if it has the form probe ``name`` promises for ``kwargs``, else ResultError."""
    form = FORMS.get(name)
    if form is None:
        _fail("", f"no form is known for probe {name!r}")
    try:
        return form(answer, kwargs) or answer
    except (KeyError, TypeError, AttributeError) as e:       # the request itself was odd
        raise ResultError(f"cannot check against the request ({type(e).__name__})") from None


def raised_info(info) -> dict:
    """A ``raised`` description reduced to known keys of known types."""
    info = info if type(info) is dict else {}

    def text(key, limit):
        v = info.get(key)
        return v[:limit] if type(v) is str else ""
    kind, message = text("type", 100) or "an exception", text("message", MESSAGE_LIMIT)
    if kind == "MemoryError":
        message = "out of memory: the sandbox's memory limit was reached" + \
            (f" ({message})" if message else "")
    return {"type": kind, "module": text("module", 100),
            "value_error": info.get("value_error") is True,
            "not_implemented": info.get("not_implemented") is True, "message": message}
