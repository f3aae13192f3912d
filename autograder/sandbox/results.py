"""The form of each probe's result, checked in the grader before any check reads it.

Student code runs in the same process as the probes, so it can replace them and answer
anything that decodes (``protocol`` already bounds sizes and allows only plain data). A
check that indexes a forged answer must not crash the grader (a grader failure) and must
not compare less than it asked for: a shorter ``runs`` list would make ``zip`` skip
comparisons. So every probe's answer is held to the form the probe promises, counted
against the request: one run per run asked for, one entry per head count asked for.

The values the submission's own code produced (what a function returned, forward's output,
attention_weights, gradients) are held to what the grader can judge: plain CPU tensors with
values (not meta, not sparse), and, where the API promises sizes (``head_weight_shape``),
no tensor where a number belongs. A value outside that form is the submission's answer, not
a tampered probe: ``Unjudgeable`` says what was returned and what was expected, for the
student. What passes here is data every comparison in ``compare`` handles without raising.

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


class Unjudgeable(Refused):
    """The submission's code returned a value no comparison can judge (a meta tensor, a
    tensor among the sizes of a shape); the message names it and what was expected."""


def _fail(path: str, what: str):
    raise ResultError(f"{path or 'the answer'}: {what}")


def describe(value, depth: int = 0) -> str:
    """What a value is, in a few words and bounded (never a tensor's values, never a huge
    repr): feedback names what was returned without printing it."""
    kind = type(value)
    if value is None or kind is bool:
        return repr(value)
    if kind is int:
        text = repr(value)
        return text if len(text) <= 24 else f"an int of {len(text.lstrip('-'))} digits"
    if kind is float:
        return repr(value)
    if kind is str:
        return repr(value) if len(value) <= 40 else f"a string of {len(value)} characters"
    if isinstance(value, torch.Tensor):
        name = "tensor" if kind is torch.Tensor else f"{kind.__name__} (a tensor subclass)"
        dtype = str(value.dtype).removeprefix("torch.")
        text = f"{'an' if dtype[0] in 'aeiou' else 'a'} {dtype} {name} of shape {tuple(value.shape)}"
        if value.layout is not torch.strided:
            text += f", {str(value.layout).removeprefix('torch.')}"
        return text + (f" on the {value.device.type} device" if value.device.type != "cpu" else "")
    if kind in (tuple, list):
        if depth >= 2:
            return f"a {kind.__name__} of {len(value)}"
        items = [describe(v, depth + 1) for v in value[:4]] + (["…"] if len(value) > 4 else [])
        text = ", ".join(items) + ("," if kind is tuple and len(value) == 1 else "")
        return f"({text})" if kind is tuple else f"[{text}]"
    if kind is dict:
        return f"a dict with {len(value)} keys"
    return f"a {kind.__name__}"


def _unjudgeable(path: str, value, why: str):
    raise Unjudgeable(f"{path} {describe(value)}: {why}")


def judgeable(value, path: str) -> None:
    """A plain CPU tensor with values: what every comparison of ``compare`` can read."""
    if type(value) is not torch.Tensor:
        _unjudgeable(path, value, "expected a plain torch.Tensor")
    if value.layout is not torch.strided:
        _unjudgeable(path, value, "expected a dense (strided) CPU tensor; call .to_dense()")
    if value.device.type != "cpu":
        _unjudgeable(path, value, "expected a tensor with values on the CPU (a meta tensor has "
                     "a shape but no values to compare)" if value.device.type == "meta" else
                     "expected a tensor on the CPU")


# -- forms --------------------------------------------------------------------------------

def tensor(value, path):
    if type(value) is not torch.Tensor:
        _fail(path, "not a plain tensor")
    if value.layout is not torch.strided or value.device.type != "cpu":
        _fail(path, f"{describe(value)}, not a CPU tensor")


def produced(label: str, *, none: bool = False):
    """A tensor the submission's code produced (``label`` says which, for the student):
    a form error here is the submission's answer, hence ``Unjudgeable``."""
    def check(value, path):
        if value is None and none:
            return
        judgeable(value, label)
    return check


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
        return                                   # a tensor's device: ``_returned_by``
    if type(item) is tuple and depth < 4:
        for i, v in enumerate(item):
            returned(v, f"{path}[{i}]", depth + 1)
        return
    _fail(path, f"a {type(item).__name__} is not a value an API function returns")


def tensors(item):
    """The tensors anywhere in a returned value (it has passed ``returned``)."""
    if type(item) in (tuple, list):
        return [t for v in item for t in tensors(v)]
    return [item] if isinstance(item, torch.Tensor) else []


#: What the SPEC promises where the grader compares with ``==``: sizes, never tensors.
SIZES = {"head_weight_shape": "a tuple of two ints (d, d_total // num_heads)"}


def _returned_by(fn: str, value) -> None:
    """A returned value the grader can judge: CPU tensors with values; no tensor among sizes."""
    what = f"{fn if isinstance(fn, str) else 'the function'} returned"
    if fn in SIZES and tensors(value):
        _unjudgeable(what, value, f"expected {SIZES[fn]}, and a tensor is not a size (use "
                     "int(...) or plain Python arithmetic)")
    for t in tensors(value):
        judgeable(t, what if t is value else f"{what} {describe(value)}, holding")


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


#: What one forward cost, as its operator trace counted it (``probes.OpTrace.cost``).
COST = record({"ops": mapping(kind(int)), "flops": kind(int), "work": kind(int),
               "sync": sequence(kind(str))})
PARAM = record({"name": kind(str), "shape": ints, "numel": kind(int), "storage": kind(int),
                "is_param": kind(bool)}, extra=anything)


def _run(run: dict):
    """One forward's answer: tensors the submission's forward produced, so a meta or sparse
    one is its answer (``Unjudgeable``), while a missing key or a foreign type is a forgery."""
    grads = {"grads": mapping(kind(torch.Tensor, type(None)))} \
        if run.get("grad") is not None else {}
    form = record({"out": kind(torch.Tensor), "weights": kind(torch.Tensor, type(None)),
                   "after": sequence(kind(torch.Tensor), 3), "cost": COST, **grads})

    def check(value, path):
        form(value, path)
        produced("forward returned")(value["out"], path)
        produced("self.attention_weights is", none=True)(value["weights"], path)
        for name, grad in value.get("grads", {}).items():
            produced(f"the gradient of {str(name)[:40]} is", none=True)(grad, path)
    return check


def _runs(runs, path, answer):
    sequence(anything, len(runs))(answer, path)
    for i, (run, item) in enumerate(zip(runs, answer)):
        _run(run)(item, f"{path}[{i}]")


# -- one form per probe, given the request ---------------------------------------------

def _call(answer, kw):
    answer = _one_call(answer, kw.get("fn"), kw.get("args", ()), "")
    if "bad" in answer:
        raise Refused(answer["bad"])
    return answer


def _one_call(answer, fn, args, path):
    """One call's answer: its value and inputs afterwards, what it raised, or why the probe
    could not take its value (``bad``: a reason, returned as it is, for the caller to raise)."""
    if type(answer) is dict and set(answer) == {"bad"}:
        kind(str)(answer["bad"], f"{path}.bad")
        return answer
    if type(answer) is dict and set(answer) == {"raised"}:
        raised(answer["raised"], f"{path}.raised")
        return {"raised": raised_info(answer["raised"])}
    record({"value": returned, "after": sequence(optional(tensor), len(args))})(answer, path)
    _returned_by(fn, answer["value"])
    return answer


def _calls(answer, kw):
    """One answer of ``_call``'s form for each call of the batch, in order."""
    batch = kw["batch"]
    sequence(anything, len(batch))(answer, "")
    out = []
    for i, (item, args) in enumerate(zip(answer, batch)):
        try:
            out.append(_one_call(item, kw.get("fn"), args, f"[{i}]"))
        except Unjudgeable as e:           # that call's answer, not the batch's
            out.append({"bad": str(e)})
    return out


def _mha(answer, kw):
    spec = kw["spec"]
    state = {"state": mapping(tensor)} if spec.get("want_state") else {}
    if spec.get("want_state_after"):
        state["state_after"] = mapping(tensor)
    record({"params": sequence(PARAM), "runs": anything, **state})(answer, "")
    _runs(spec.get("runs", ()), "runs", answer["runs"])


def _mhas(answer, kw):
    """For each spec in order, an answer of ``_mha``'s form (``ok``) or what went wrong; the
    first that went wrong is the last."""
    specs = kw["specs"]
    kind(list)(answer, "")
    if not 0 < len(answer) <= len(specs):
        _fail("", f"{len(answer)} answers for {len(specs)} modules")
    for i, (spec, item) in enumerate(zip(specs, answer)):
        if type(item) is dict and set(item) == {"ok"}:
            try:
                _mha(item["ok"], {"spec": spec})
            except Unjudgeable as e:          # that module's answer, not the request's
                answer[i] = {"bad": str(e)}
                del answer[i + 1:]
                return answer
        else:
            if type(item) is not dict or set(item) not in ({"bad"}, {"raised"}):
                _fail(f"[{i}]", "neither an answer nor what went wrong")
            attempt(anything)(item, f"[{i}]")
            if i != len(answer) - 1:
                _fail(f"[{i}]", "an answer after the first that went wrong")


def _mha_loads(answer, kw):
    spec = kw["spec"]
    record({"params": sequence(PARAM), "runs": anything})(answer, "")
    _runs(list(spec["runs"])[:len(spec["loads"])], "runs", answer["runs"])


def _mha_raises(answer, kw):
    attempt(optional(anything))(answer, "")


PARTS = ("module", "masked_softmax", "attention_pool")
TRACED = record({"params": kind(int), "ops": mapping(kind(int)), "flops": kind(int),
                 "work": kind(int), "sync": sequence(kind(str)),
                 "out": produced("forward returned"),
                 "weights": produced("self.attention_weights is", none=True)})
UNTRACED = record({"params": kind(int)}, {"bad": kind(str), "raised": raised})
DISPATCHED = attempt(record({"device": kind(str), "sync": sequence(kind(str)),
                             "foreign": sequence(kind(str))}))
FINITE = attempt(record({"finite": kind(bool), "dtype": kind(str)},
                        {"overflowed": sequence(kind(str))}))


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


def _pair(value, path):
    """A function's (output, weights), or one tensor (``evidence_device.first``); a tuple of
    another length is the submission's answer, judged (and failed) by the check."""
    if type(value) is tuple:
        sequence(produced("it returned"))(value, path)
    else:
        produced("it returned")(value, path)


CUDA_VALUES = record({"out_device": kind(str), "out": produced("forward on the GPU returned"),
                      "weights": produced("self.attention_weights on the GPU is", none=True)},
                     {"masked_softmax": _pair, "attention_pool": _pair})


def _on_cuda(answer, kw):
    record({}, {"unavailable": kind(bool), "values": attempt(CUDA_VALUES),
                "sync": attempt(record({"ok": kind(bool)})),
                "memory": attempt(record({"peak": kind(int)})),
                "autocast": mapping(FINITE)})(answer, "")


def _answer(answer, kw):
    """The reference's answer to a carried question (its own sandbox): a value and its cost,
    or a gradient (or None) per tensor argument; plain CPU tensors only, as a student's
    sandbox is sent nothing else."""
    if kw["question"]["mode"] == "value":
        record({"answer": returned, "cost": COST})(answer, "")
    else:
        asked = sum(type(a) is torch.Tensor for a in kw["question"]["args"])
        record({"answer": sequence(optional(tensor), asked)})(answer, "")
    for t in tensors(answer["answer"]):
        tensor(t, "answer")


FORMS = {"call": _call, "calls": _calls, "mha": _mha, "mhas": _mhas, "mha_raises": _mha_raises,
         "mha_loads": _mha_loads,
         "trace": _trace, "on_device": _on_device, "low_precision": _low_precision,
         "on_cuda": _on_cuda, "answer": _answer}


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
