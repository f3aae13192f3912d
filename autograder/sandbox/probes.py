"""How the grader exercises an implementation of the API: a closed set of probes.

A probe takes ``api`` (anything with the eight SPEC names as attributes) and plain
arguments, runs the implementation, and returns plain data: tensors, numbers, strings,
lists and dicts. The same probe runs the student's code inside the sandbox and the
reference in the grader, so both are exercised in exactly the same way. Probes decide
nothing: every verdict is made by the grader from the data they return.

Imported as ``autograder.sandbox.probes`` by the grader and as ``probes`` inside the
sandbox: it imports nothing from the grader.
"""
from __future__ import annotations

import builtins
import contextlib
import functools
import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Bound now, before any submission is imported: a submission that patches the builtins
# or torch afterwards does not change how the probes read its results.
_type, _isinstance, _issubclass, _str, _len, _id = builtins.type, builtins.isinstance, \
    builtins.issubclass, builtins.str, builtins.len, builtins.id
_Tensor = torch.Tensor
# A module is read through the dicts nn.Module keeps (``_parameters``, ``_modules``), never
# through a method a submission's class could override (parameters(), named_modules(),
# children(), to(), _apply() ...): see ``named_parameters``, ``convert``, ``roles``.
_Module = torch.nn.Module
_instance_dict = object.__getattribute__
_cpu_generator, _manual_seed, _cuda_available = (torch.default_generator, torch.manual_seed,
                                                   torch.cuda.is_available)
MESSAGE_LIMIT = 400
PARAM_ROLES = ("W_q", "W_k", "W_v", "W_o")


class DispatchMode(TorchDispatchMode):
    """A dispatch mode without torch's ``_disable_dynamo`` wrapper: that wrapper imports
    torch._dynamo on first use (seconds, ~800 modules, a bigger process to fork), and
    nothing here is ever compiled."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False


def warm_up() -> None:
    """Run once what the probes run, so that torch's lazy imports and one-time set-ups
    (sympy for a backward with a given gradient, autocast, dispatch modes) happen now: in
    the zygote before it forks, in the grader while the zygote starts."""
    x = torch.ones(2, 2, dtype=torch.float64, requires_grad=True)
    with OpTrace("cpu"):
        y = torch.softmax(x @ x, dim=-1)
    y.backward(torch.ones_like(y))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.nn.functional.linear(x.detach().float(), x.detach().float())
    layer = torch.nn.Linear(2, 2).double()
    torch.nn.functional.dropout(layer(x.detach()), 0.5).sum().backward()
    # The meta device's first use costs seconds of lazy set-up (measured: device.meta took
    # ~4 s of ~6 s per submission while every forked sandbox paid it again).
    model, q = torch.nn.Linear(4, 4).to("meta"), torch.ones(2, 3, 4, device="meta")
    keep = torch.arange(3, device="meta") < torch.tensor([1, 3], device="meta").reshape(-1, 1, 1)
    weights = torch.softmax((model(q) @ q.transpose(-2, -1) / 2.0).masked_fill(~keep, -1.0), -1)
    (weights @ q).transpose(1, 2).reshape(2, 3, 4)


class ProbeError(Exception):
    """The implementation cannot be probed this way; the message says why, for the student."""


def describe(exc: BaseException) -> dict:
    """An exception as data: its type, whether it is a ValueError, a short message."""
    kind = _type(exc)
    try:
        message = _str(exc)
    except BaseException:                     # a __str__ that raises, even SystemExit
        message = "<the exception's message could not be read>"
    if _type(message) is not str:
        message = "<not a string>"
    if _len(message) > MESSAGE_LIMIT:
        message = message[:MESSAGE_LIMIT] + f"… ({_len(message) - MESSAGE_LIMIT} more characters)"
    return {"type": getattr(kind, "__qualname__", "?")[:100],
            "module": _str(getattr(kind, "__module__", "?"))[:100],
            "value_error": _issubclass(kind, ValueError),
            "not_implemented": _issubclass(kind, NotImplementedError),
            "message": message}


def plain(value, what: str):
    """Check a returned value is made of plain tensors, ints, floats and tuples."""
    if value is None or _type(value) in (bool, int, float, str):
        return value
    if _type(value) is _Tensor:
        return value
    if _type(value) in (tuple, list, torch.Size):
        return tuple(plain(v, what) for v in value)
    if _isinstance(value, _Tensor):
        raise ProbeError(f"{what} returned a {_type(value).__name__}, a subclass of "
                         "torch.Tensor; return a plain torch.Tensor")
    raise ProbeError(f"{what} returned a {_type(value).__name__}, not a tensor or a tuple")


def _prepare(arg):
    """Inputs arrive contiguous; {"noncontig": T} asks for the same values in a transposed layout."""
    if _type(arg) is dict and "noncontig" in arg:
        t = arg["noncontig"]
        return t.transpose(-1, -2).contiguous().transpose(-1, -2) if t.dim() >= 2 else t[::1]
    return arg


def call(api, fn: str, args: list, kwargs: dict | None = None) -> dict:
    """Call one API function; report its result (or exception) and its tensor inputs as they
    are afterwards. Whether an input changed is judged by the grader, from the bytes it sent
    and the bytes it gets back (``checks.Side.attempt``), not here."""
    args = [_prepare(a) for a in args]
    try:
        value = plain(getattr(api, fn)(*args, **(kwargs or {})), fn)
    except ProbeError as e:
        return {"bad": str(e)}
    except BaseException as e:                # student code may raise anything, even SystemExit
        return {"raised": describe(e)}
    return {"value": value, "after": [a.detach() if _type(a) is _Tensor else None for a in args]}


CALLS_LIMIT = 64         #: calls one ``calls`` request may bundle


def calls(api, fn: str, batch: list) -> list:
    """``call`` for each argument list of ``batch`` in turn, in one request: what the grader
    would have asked one call at a time (``checks.Side.ahead``), each answer as ``call``'s."""
    if _type(batch) is not list or _len(batch) > CALLS_LIMIT:
        raise ProbeError(f"a batch of calls is a list of at most {CALLS_LIMIT}")
    return [call(api, fn, args) for args in batch]


# ----------------------------------------------------------------------------------------
# Error carried forward: a part answered by the grader

#: The parts a module (or another part) is built from, which the grader may answer instead.
CARRYABLE = ("project", "project_heads", "split_heads", "concat_heads", "masked_softmax",
             "attention_pool")
_SLOT = "<tensor>"
ASK_LIMIT = 512          #: questions one probe may ask the grader


def carried(fn: str, ask):
    """``fn`` answered by the grader: ``ask({"fn", "mode": "value"|"vjp", "args", "grads"})``
    sends the student's own arguments over the channel and returns the grader's answer (the
    reference's value, or its vector-Jacobian product in backward). No reference code is
    here: only its answers to the calls the student's code makes."""
    class Part(torch.autograd.Function):
        @staticmethod
        def forward(ctx, layout, *tensors):
            ctx.layout = layout
            ctx.save_for_backward(*tensors)
            return ask({"fn": fn, "mode": "value", "args": _rebuild(layout, tensors)})

        @staticmethod
        def backward(ctx, *grads):
            back = ask({"fn": fn, "mode": "vjp", "args": _rebuild(ctx.layout, ctx.saved_tensors),
                        "grads": list(grads)})
            return (None, *back)

    def part(*args, valid_lens=None):
        args = list(args) + ([valid_lens] if valid_lens is not None else [])
        layout = tuple(_SLOT if _type(a) is _Tensor else a for a in args)
        return Part.apply(layout, *(a for a in args if _type(a) is _Tensor))
    part.__name__ = fn
    return part


def _rebuild(layout, tensors) -> list:
    tensors = iter(tensors)
    return [next(tensors).detach() if a == _SLOT else a for a in layout]


# ----------------------------------------------------------------------------------------
# The module


def seed_all(seed: int) -> None:
    """torch.manual_seed, without its cost where no GPU can be used: there it would format a
    stack trace for each accelerator backend, to queue the seed for a later lazy start
    (0.4 ms a call, a fifth of what the reference's probes cost)."""
    if _cuda_available():
        _manual_seed(seed)
    else:
        _cpu_generator.manual_seed(seed)


def build(api, init: dict, seed: int = 0, dtype=torch.float64):
    seed_all(seed)
    kwargs = {k: init[k] for k in ("d_total", "bias", "dropout") if k in init}
    model = api.MultiHeadAttention(init["d_model"], init["num_heads"], **kwargs)
    if not _isinstance(model, torch.nn.Module):
        raise ProbeError("MultiHeadAttention(...) did not build a torch.nn.Module")
    return convert(model, dtype=dtype)


MODULE_DEPTH = 32        #: submodules deeper than this are not read (nothing sensible nests so)


def _slots(module) -> tuple[dict, dict, dict]:
    """(parameters, buffers, submodules) of one module, from its own dict."""
    try:
        own = _instance_dict(module, "__dict__")
    except (AttributeError, TypeError):
        return {}, {}, {}
    pick = lambda key: own.get(key) if _type(own.get(key)) is dict else {}  # noqa: E731
    return pick("_parameters"), pick("_buffers"), pick("_modules")


def named_modules(model) -> list:
    """(name, module) of the module and its submodules, depth first, as torch lists them (a
    shared submodule once per name), read from the dicts, never through a method."""
    out = []

    def walk(prefix, module, depth):
        out.append((prefix, module))
        if depth >= MODULE_DEPTH or _len(out) > 10_000:
            return
        for name, child in list(_slots(module)[2].items()):
            if _isinstance(child, _Module):
                walk(f"{prefix}.{name}" if prefix else name, child, depth + 1)
    walk("", model, 0)
    return out


def named_parameters(model) -> list:
    """(name, parameter) of every parameter, aliases included (torch's named_parameters with
    remove_duplicate=False), read from the dicts."""
    return [(f"{prefix}.{name}" if prefix else name, p) for prefix, module in named_modules(model)
            for name, p in list(_slots(module)[0].items()) if _isinstance(p, _Tensor)]


def convert(model, *, dtype=None, device=None):
    """Every floating parameter and buffer in ``dtype``, everything on ``device``: what
    Module.to does (a parameter keeps its identity and gets new data; a buffer is replaced),
    without calling a method of the module."""
    done: set[int] = set()
    with torch.no_grad():
        for _, module in named_modules(model):
            params, buffers, _ = _slots(module)
            for table, keep in ((params, True), (buffers, False)):
                for name, t in list(table.items()):
                    if not _isinstance(t, _Tensor) or _id(t) in done:
                        continue
                    moved = t.to(dtype=dtype if dtype is not None and t.is_floating_point()
                                 else t.dtype, device=device if device is not None else t.device)
                    if keep:
                        t.data = moved
                    else:
                        table[name] = moved
                    done.add(_id(t) if keep else _id(moved))
    return model


def set_mode(model, training: bool) -> None:
    """The module's own train()/eval() (a module may pass the mode on its own way), and its
    effect checked: the module's flag, and every registered submodule's, is the mode."""
    model.train(training)
    wrong = [name or "the module" for name, m in named_modules(model)
             if _instance_dict(m, "__dict__").get("training") is not training]
    if wrong:
        call = "train()" if training else "eval()"
        raise ProbeError(f"after the module's {call}, {wrong[0]} is still in "
                         f"{'eval' if training else 'training'} mode: train(mode) must set the "
                         "mode of the module and of every submodule (call super().train(mode))")


def zero_grad(model) -> None:
    for _, p in named_parameters(model):
        p.grad = None


def parameters(model) -> list[dict]:
    """Every parameter by name (aliases included), with the storage it lives in."""
    storages: dict[int, int] = {}
    out = []
    for name, p in named_parameters(model):
        ptr = p.untyped_storage().data_ptr() if p.device.type != "meta" else id(p)
        group = storages.setdefault(ptr, _len(storages))
        start = p.storage_offset() * p.element_size()     # the bytes it spans in its storage
        extent = sum((n - 1) * s for n, s in zip(p.shape, p.stride())) + 1 if p.numel() else 0
        out.append({"name": name, "shape": tuple(p.shape), "numel": p.numel(),
                    "storage": group, "is_param": _type(p) is torch.nn.Parameter,
                    "span": (start, start + extent * p.element_size())})
    return out


def roles(model) -> dict:
    """The contract's four projections as (weight, bias) parameter pairs, read from the
    module's dicts (no __getattr__ of the submission's runs)."""
    found = {}
    for role in PARAM_ROLES:
        layer = _slots(model)[2].get(role)
        params = _slots(layer)[0] if _isinstance(layer, _Module) else {}
        weight = params.get("weight")
        if not _isinstance(weight, _Tensor):
            raise ProbeError(f"the module has no {role} with a .weight (the contract asks for "
                             f"self.{role} = torch.nn.Linear(...))")
        found[role] = (weight, params.get("bias"))
    return found


def load(model, weights: dict) -> None:
    """Copy the reference's weights into the contract's parameters, by name. A bias the
    module does not have is left out (the grader judges what its forwards then give: a key
    bias changes no output, any other does)."""
    found = roles(model)
    with torch.no_grad():
        for key, value in weights.items():
            role, kind = key.split(".")
            weight, bias = found[role]
            target = weight if kind == "weight" else bias
            if target is None:
                continue
            if tuple(target.shape) != tuple(value.shape):
                raise ProbeError(f"{key} has shape {tuple(target.shape)}; the contract's is "
                                 f"{tuple(value.shape)} (nn.Linear stores (out_features, in_features))")
            target.copy_(value.to(target.dtype))


def state(model) -> dict:
    found = roles(model)
    out = {f"{role}.weight": w.detach().clone() for role, (w, _) in found.items()}
    out.update({f"{role}.bias": b.detach().clone() for role, (_, b) in found.items()
                if _isinstance(b, _Tensor)})
    return out


def forward(model, run: dict, dtype=torch.float64, device="cpu") -> dict:
    """One forward (and backward, if ``run["grad"]``): output, weights, gradients."""
    q, k, v = (run[x].to(device=device, dtype=dtype) for x in ("queries", "keys", "values"))
    lens = run.get("valid_lens")
    lens = None if lens is None else lens.to(device)
    set_mode(model, bool(run.get("train", False)))
    want_grad = run.get("grad") is not None
    for t in (q, k, v):
        t.requires_grad_(want_grad)
    zero_grad(model)
    if "seed" in run:
        seed_all(run["seed"])
    ops = OpTrace(device)       # every forward is measured: a measured one is a graded one
    with ops:
        out = model(q, k, v, lens)
    out = plain(out, "forward")
    if _type(out) is not _Tensor:
        raise ProbeError("forward returned a tuple; it should return one tensor "
                         "(batch, n_q, d_model) and keep the weights in self.attention_weights")
    weights = getattr(model, "attention_weights", None)
    result = {"out": out.detach(), "weights": weights.detach() if _type(weights) is _Tensor else None,
              "after": [t.detach() for t in (q, k, v)],    # the grader judges in-place writes
              "cost": ops.cost()}
    if want_grad:
        if not out.requires_grad:
            raise ProbeError("forward's output does not depend on the parameters (no grad_fn)")
        grad = run["grad"].to(device=device, dtype=out.dtype)
        if tuple(grad.shape) != tuple(out.shape):
            raise ProbeError(f"forward returned shape {tuple(out.shape)}, so no gradient could "
                             "be taken")
        out.backward(grad)
        grads = {name: (t.grad.detach() if t.grad is not None else None)
                 for name, t in (("queries", q), ("keys", k), ("values", v))}
        for role, (w, b) in roles(model).items():
            grads[f"{role}.weight"] = None if w.grad is None else w.grad.detach()
            if _isinstance(b, _Tensor):
                grads[f"{role}.bias"] = None if b.grad is None else b.grad.detach()
        result["grads"] = grads
    return result


def mha(api, spec: dict) -> dict:
    """Build a module, optionally load weights, and run forwards: the workhorse probe."""
    model = build(api, spec["init"], spec.get("seed", 0))
    result = {}
    if spec.get("want_state"):
        result["state"] = state(model)
    if spec.get("load") is not None:
        load(model, spec["load"])
    result["runs"] = [forward(model, run) for run in spec.get("runs", ())]
    if spec.get("want_state_after"):
        result["state_after"] = state(model)     # the weights as the forwards left them
    result["params"] = parameters(model)     # as the forwards left them (ties made there count)
    return result


MHAS_LIMIT = 16           #: modules one ``mhas`` request may bundle


def mhas(api, specs: list) -> list:
    """``mha`` for each spec in turn, in one request (as ``calls`` bundles ``call``): each
    one's answer, or what went wrong (``_attempt``'s form, ``ok`` for the answer); the first
    that goes wrong ends the request, as it would end the check that sent them one by one."""
    out = []
    for spec in specs[:MHAS_LIMIT]:
        result = _attempt(lambda spec=spec: mha(api, spec))
        out.append({"ok": result["value"]} if "value" in result else result)
        if "value" not in result:
            break
    return out


def mha_raises(api, init: dict) -> dict:
    try:
        build(api, init)
    except ProbeError as e:
        return {"bad": str(e)}
    except BaseException as e:
        return {"raised": describe(e)}
    return {"value": None}


# ----------------------------------------------------------------------------------------
# Structure: weight variants, operator traces, FLOPs, other devices and precisions

SYNC_OPS = {"_local_scalar_dense", "nonzero", "masked_select", "is_nonzero", "item",
            "equal", "allclose", "_assert_async", "tolist", "numpy", "_unique", "_unique2",
            "unique_dim", "unique_consecutive", "unique_dim_consecutive", "bincount", "histc"}
#: Tensor methods that read values back to the host without dispatching an operator (so a
#: dispatch mode never sees them): each call under an open trace is counted as one.
HOST_READS = ("tolist", "numpy")
FOREIGN_LIMIT = 5


def mha_loads(api, spec: dict) -> dict:
    """One module, several weight sets loaded in turn, one forward each (weight perturbations)."""
    model = build(api, spec["init"], spec.get("seed", 0))
    runs = []
    for weights, run in zip(spec["loads"], spec["runs"]):
        load(model, weights)
        runs.append(forward(model, run))
    return {"params": parameters(model), "runs": runs}


ACTIVE_TRACES: list = []      #: the operator traces open now (innermost last)


def _count_host_reads() -> None:
    """Wrap ``HOST_READS`` once, so that a call under an open trace is counted there (graded
    code may not change torch's classes, so the wrappers stay)."""
    for name in HOST_READS:
        real = getattr(_Tensor, name, None)
        if real is None or getattr(real, "_counted", False):
            continue

        def read(self, *args, _real=real, _name=name, **kwargs):
            if ACTIVE_TRACES:
                counts = ACTIVE_TRACES[-1].counts
                counts[_name] = counts.get(_name, 0) + 1
            return _real(self, *args, **kwargs)
        read.__name__, read.__doc__, read._counted = name, real.__doc__, True
        setattr(_Tensor, name, read)


_count_host_reads()


class OpTrace(DispatchMode):
    """Counts the aten operators dispatched, the FLOPs of their matrix products and the work
    of all of them, and notes host syncs and CPU tensors."""

    def __init__(self, device: str):
        super().__init__()
        self.counts: dict[str, int] = {}
        self.flops = 0
        self.work = 0
        self.device = device
        self.foreign: list[str] = []

    def __enter__(self):
        ACTIVE_TRACES.append(self)
        return super().__enter__()

    def __exit__(self, *exc):
        if ACTIVE_TRACES and ACTIVE_TRACES[-1] is self:
            ACTIVE_TRACES.pop()
        return super().__exit__(*exc)

    def add(self, cost: dict) -> None:
        """Work the grader did in the student's place (a part answered by the reference, for
        error carried forward), counted at the reference's cost."""
        for name, n in (cost.get("ops") or {}).items():
            if _type(name) is str and _type(n) is int:
                self.counts[name] = self.counts.get(name, 0) + n
        for key in ("flops", "work"):
            if _type(cost.get(key)) is int:
                setattr(self, key, getattr(self, key) + cost[key])

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name, matmul, view, sized = _OPS.get(func) or _op(func)
        counts, kwargs = self.counts, kwargs or {}
        counts[name] = counts.get(name, 0) + 1
        if matmul:
            flops = matmul_flops(name, args)
            self.flops += flops
            self.work += flops
        if sized and _data_dependent(name, args, kwargs):
            counts[name + "(data-dependent size)"] = 1
        out = func(*args, **kwargs)
        if not (matmul or view):
            self.work += _elements(args, out)
        if self.device != "cpu":
            for t in (out if _isinstance(out, (tuple, list)) else (out,)):
                if _isinstance(t, _Tensor) and t.device.type == "cpu" and t.dim() > 0:
                    self.foreign.append(name)
        return out

    def cost(self) -> dict:
        """What the traced code cost, as data: operator counts, FLOPs, work, host syncs."""
        return {"ops": dict(self.counts), "flops": self.flops, "work": self.work,
                "sync": self.syncs()}

    def syncs(self) -> list[str]:
        return sorted(n for n in self.counts if n in SYNC_OPS or n.endswith("(data-dependent size)"))


#: The matrix products torch.utils.flop_counter counts (2 FLOPs per multiply-add, a bias
#: free), by where their two factors are among the operator's arguments.
MATMUL_OPERANDS = {"mm": (0, 1), "bmm": (0, 1), "addmm": (1, 2), "baddbmm": (1, 2)}


#: Operators that only re-describe memory (no arithmetic, no copy): they cost no work.
VIEWS = frozenset({"view", "_unsafe_view", "reshape", "transpose", "permute", "t", "expand",
                   "unsqueeze", "squeeze", "select", "slice", "as_strided", "alias", "detach",
                   "split", "split_with_sizes", "chunk", "unbind", "narrow", "view_as", "lift_fresh",
                   "_reshape_alias", "unfold", "diagonal", "movedim", "expand_as", "sym_size",
                   "sym_stride", "sym_numel", "sym_storage_offset", "dim", "size", "stride",
                   "is_contiguous", "empty", "empty_like", "empty_strided", "new_empty"})


#: operator -> (its name, a matrix product, a view, its output's size may depend on data):
#: every forward is traced, so what an operator is is worked out once
_OPS: dict = {}


def _op(func) -> tuple:
    name = func.__name__.split(".")[0]
    _OPS[func] = known = (name, name in MATMUL_OPERANDS, name in VIEWS,
                          name in ("index", "repeat_interleave"))
    return known


def _elements(args, out) -> int:
    """The work of one operator other than a matrix product: the elements of its largest
    operand or result (a pointwise op touches each once, a reduction reads each once). So M
    times the work done as broadcast-and-sum shows, whatever operators carry it."""
    largest = 0
    for t in (*args, *(out if _isinstance(out, (tuple, list)) else (out,))):
        if _type(t) is _Tensor or _isinstance(t, _Tensor):
            largest = max(largest, t.numel())
        elif _type(t) in (list, tuple):
            largest = max([largest] + [x.numel() for x in t if _isinstance(x, _Tensor)])
    return largest


def matmul_flops(name: str, args) -> int:
    """FLOPs of one matrix product, (..., m, k) @ (..., k, n): 2 * batch * m * k * n; counted
    here, in the one traced forward, rather than by a second forward under FlopCounterMode."""
    i, j = MATMUL_OPERANDS[name]
    try:
        a, b = args[i].shape, args[j].shape
        batch = a[0] if _len(a) == 3 else 1
        return int(2 * batch * a[-2] * a[-1] * b[-1])
    except (AttributeError, IndexError, TypeError):
        return 0


def _data_dependent(name: str, args, kwargs) -> bool:
    """Ops whose output size depends on tensor data, so the host must wait for the device:
    boolean-mask indexing (x[mask]) and repeat_interleave with tensor repeats and no output_size."""
    if name == "index" and _len(args) > 1 and _isinstance(args[1], (list, tuple)):
        return any(_isinstance(i, _Tensor) and i.dtype is torch.bool for i in args[1])
    if name == "repeat_interleave":
        return kwargs.get("output_size") is None
    return False


def _inputs(shapes: dict, dtype, device, masked: bool):
    """Deterministic module inputs; the lengths cycle 0, 1, 2, ... so length 0 is included."""
    b, n_q, n_k, d = shapes["batch"], shapes["n_q"], shapes["n_k"], shapes["d_model"]
    gen = torch.Generator().manual_seed(shapes.get("seed", 0))
    q, k, v = (torch.randn(b, n, d, generator=gen, dtype=torch.float64).to(device=device,
                                                                          dtype=dtype)
               for n in (n_q, n_k, n_k))       # three tensors, as in the graded forwards
    lens = (torch.arange(b) % (n_k + 1)).to(device) if masked else None
    return q, k, v, lens


def _run_module(model, shapes: dict, dtype, device, masked: bool):
    return plain(model(*_inputs(shapes, dtype, device, masked)), "forward")


def _attempt(fn) -> dict:
    """{"value": fn()} (fn builds plain data itself), or what went wrong, as data."""
    try:
        return {"value": fn()}
    except ProbeError as e:
        return {"bad": str(e)}
    except BaseException as e:
        return {"raised": describe(e)}


def trace(api, spec: dict) -> dict:
    """Parameter count and cost of one forward per head count: graded forwards like the
    others (``forward``: eval mode, autograd on, the grader's inputs and weights), whose
    answers the grader judges too; the cost is what every forward reports."""
    out = {}
    for h in spec["heads"]:
        model = build(api, dict(spec["init"], num_heads=h), spec.get("seed", 0))
        entry = {"params": int(sum(p.numel() for p in
                                   {_id(p): p for _, p in named_parameters(model)}.values()))}

        def run(model=model, h=h):
            load(model, spec["loads"][str(h)])
            result = forward(model, spec["runs"][str(h)])
            return dict(result["cost"], out=result["out"], weights=result["weights"])
        result = _attempt(run)
        entry.update(result.get("value", result))
        out[str(h)] = entry
    return out


def _function_calls(device: str, dtype) -> dict:
    """The masked functions' inputs (length 0 included) on device: {name: (fn name, args)}."""
    gen = torch.Generator().manual_seed(7)
    scores = torch.randn(2, 3, 4, 5, generator=gen, dtype=torch.float64) * 4
    Q = torch.randn(2, 3, 4, 6, generator=gen, dtype=torch.float64)
    K = torch.randn(2, 3, 5, 6, generator=gen, dtype=torch.float64)
    V = torch.randn(2, 3, 5, 6, generator=gen, dtype=torch.float64)
    lens = torch.tensor([0, 3]).to(device)

    def put(*ts):
        return [t.to(device=device, dtype=dtype) for t in ts] + [lens]
    return {"masked_softmax": put(scores), "attention_pool": put(Q, K, V)}


def _on(api, part: str, device: str, dtype, init: dict, shapes: dict):
    """Run one part (the module or a masked function) on device; report what it dispatched."""
    ops = OpTrace(device)
    if part == "module":
        model = build(api, init, shapes.get("seed", 0), dtype=dtype)
        set_mode(model, False)
        convert(model, device=device)
        q, k, v, lens = _inputs(shapes, dtype, device, True)
        with ops:                 # autograd on, as in the graded forwards
            y = plain(model(q, k, v, lens), "forward")
    else:
        args = _function_calls(device, dtype)[part]
        fn = getattr(api, part)
        with ops:
            y = plain(fn(*args), part)
    first = y[0] if _type(y) is tuple and _len(y) else y
    if _type(first) is not _Tensor:
        raise ProbeError(f"{part} did not return a tensor")
    return {"device": first.device.type, "sync": ops.syncs(),
            "foreign": ops.foreign[:FOREIGN_LIMIT]}


def on_device(api, spec: dict) -> dict:
    """Each part runs on the CPU first; only parts that work there are retried on ``device``."""
    device, init = spec["device"], spec["init"]
    shapes = dict(spec["shapes"], d_model=init["d_model"])
    result = {}
    for part in ("module", "masked_softmax", "attention_pool"):
        cpu = _attempt(lambda: _on(api, part, "cpu", torch.float32, init, shapes))
        entry = {"cpu": cpu}
        if "value" in cpu:
            entry["device"] = _attempt(lambda: _on(api, part, device, torch.float32, init, shapes))
        result[part] = entry
    return result


class OverflowWatch(DispatchMode):
    """Notes where a low-precision run makes an infinity out of finite operands (a constant
    beyond the dtype's range: a -1e9 fill in float16, float32's minimum in bfloat16) and at
    which operator an exception came out, so the grader can tell an overflow from any other
    failure (a dtype mismatch, a shape error)."""

    LIMIT = 8

    def __init__(self):
        super().__init__()
        self.born: list[str] = []
        self.raised_at = ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        watch = _len(self.born) < self.LIMIT and name not in VIEWS
        # the operands are read before the call: an in-place operator writes into its own
        finite_in = watch and not any(_infinite(x) for x in _flat([*args, *(kwargs or {}).values()]))
        try:
            out = func(*args, **(kwargs or {}))
        except BaseException:
            self.raised_at = self.raised_at or name
            raise
        if (finite_in and any(_infinite(t) for t in _flat([out]))) or \
                (name in LIFTS and _len(self.born) < self.LIMIT
                 and any(_infinite(t) for t in _flat(args))):
            self.born.append(name)
        return out


#: The operators that bring a constant written in Python into the graph (``X[m] = -1e6``):
#: torch has already converted it to the tensor's dtype, so an overflowed constant arrives
#: infinite. The grader tells it from an infinite literal by the float32 run.
LIFTS = frozenset({"lift_fresh", "lift", "lift_fresh_copy"})


def _flat(items) -> list:
    return [x for a in items for x in (a if _type(a) in (tuple, list) else (a,))]


def _infinite(t) -> bool:
    """A NaN or an infinity in t. A tensor's sum in float64 is finite where all of it is
    (one operator, where the element-wise test takes three); where it is not, the test
    decides (a float64 sum can overflow)."""
    if _type(t) is float:
        return t != t or t in (float("inf"), float("-inf"))
    return _isinstance(t, _Tensor) and t.is_floating_point() and t.device.type != "meta" \
        and not math.isfinite(float(t.sum(dtype=torch.float64))) \
        and bool((~torch.isfinite(t)).any())


def _watched(run) -> dict:
    """``_attempt(run)`` under an OverflowWatch: a value notes the operators that made an
    infinity from finite operands, an exception the operator it came out of."""
    watch = OverflowWatch()
    result = _attempt(lambda: _run_watched(run, watch))
    if "value" in result and watch.born:
        result["value"]["overflowed"] = list(watch.born)
    if "raised" in result:
        result["raised"]["at"] = watch.raised_at
    return result


def _watched_if_failed(runs: dict) -> dict:
    """``{key: _attempt(run)}``, and where any of them failed (raised, or gave a non-finite
    value), all of them once more under an OverflowWatch for its evidence (the runs of a
    group are compared with one another: a float32 run tells an infinite literal from an
    overflow). The watch sees every operator from Python, which costs five times the runs
    themselves, and its evidence is read only about a failure. The first runs' outcomes
    stand; the second ones add only the watch's notes, where their outcome is the same."""
    results = {key: _attempt(run) for key, run in runs.items()}
    if all("value" in r and r["value"].get("finite", True) for r in results.values()):
        return results
    for key, run in runs.items():
        again, first = _watched(run), results[key]
        if "value" in first and "value" in again and "overflowed" in again["value"]:
            first["value"]["overflowed"] = again["value"]["overflowed"]
        elif "raised" in first and "raised" in again:
            first["raised"]["at"] = again["raised"]["at"]
    return results


def _run_watched(run, watch):
    with watch:
        return run()


def _finite(y) -> dict:
    y = plain(y, "the call")
    tensors = [t for t in (y if _type(y) is tuple else (y,)) if _type(t) is _Tensor]
    if not tensors:
        raise ProbeError("the call returned no tensor")
    return {"finite": all(bool(torch.isfinite(t).all()) for t in tensors),
            "dtype": _str(tensors[0].dtype).removeprefix("torch.")}


def _precision_part(api, part: str, mode: str, init: dict, shapes: dict, device: str) -> dict:
    kind, _, name = mode.partition("-")
    dtype = getattr(torch, name)
    autocast = torch.autocast(device, dtype=dtype) if kind == "autocast" else contextlib.nullcontext()
    cast = torch.float32 if kind == "autocast" else dtype
    with autocast:                # autograd on, as in the graded forwards
        if part != "module":
            return _finite(getattr(api, part)(*_function_calls(device, cast)[part]))
        model = build(api, init, shapes.get("seed", 0), dtype=cast)
        set_mode(model, False)
        convert(model, device=device)
        out = _finite(_run_module(model, shapes, cast, device, True))
    weights = getattr(model, "attention_weights", None)
    if _type(weights) is _Tensor:
        out["finite"] = out["finite"] and bool(torch.isfinite(weights).all())
    return out


def low_precision(api, spec: dict) -> dict:
    """The module and the masked functions under autocast and casts, lengths 0 included."""
    init, shapes = spec["init"], dict(spec["shapes"], d_model=spec["init"]["d_model"])
    device = spec.get("device", "cpu")
    by_part = {part: _watched_if_failed(
        {mode: functools.partial(_precision_part, api, part, mode, init, shapes, device)
         for mode in spec["modes"]}) for part in ("module", "masked_softmax", "attention_pool")}
    return {mode: {part: by_part[part][mode] for part in by_part} for mode in spec["modes"]}


def _cuda_values(api, spec: dict, device: str) -> dict:
    """Forward with the given weights and the masked functions, in float64 on device."""
    model = convert(build(api, spec["init"]), device=device)
    load(model, spec["load"])
    run = forward(model, spec["run"], device=device)
    out = {"out_device": run["out"].device.type, "out": run["out"].cpu(),
           "weights": None if run["weights"] is None else run["weights"].cpu()}
    for part, args in _function_calls(device, torch.float64).items():
        y = plain(getattr(api, part)(*args), part)
        out[part] = tuple(t.cpu() for t in y) if _type(y) is tuple else y.cpu()
    return out


def _cuda_forward(api, sizes: dict, device: str, debug: bool = False) -> int:
    """One float32 masked forward; on CUDA its peak memory in bytes, optionally under the
    sync debug mode (a host sync then raises)."""
    model = build(api, sizes["init"], dtype=torch.float32)
    set_mode(model, False)
    convert(model, device=device)
    q, k, v, lens = _inputs(dict(sizes["shapes"], d_model=sizes["init"]["d_model"]),
                            torch.float32, device, True)
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        if debug:
            torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.no_grad():
            model(q, k, v, lens)
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode(0)
    if not cuda:
        return 0
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated() - base)


def on_cuda(api, spec: dict) -> dict:
    """The GPU run (asked for only where the grader has CUDA): float64 values with the given
    weights, a forward under CUDA's sync debug mode, its peak memory, and autocast. With
    spec["device"] = "cpu" the same steps run on the CPU, without the CUDA-only measurements."""
    device = spec.get("device", "cuda")
    if device == "cuda" and not torch.cuda.is_available():
        return {"unavailable": True}
    small = {"init": spec["init"], "shapes": spec["shapes"]}
    shapes = dict(spec["shapes"], d_model=spec["init"]["d_model"])
    return {"values": _attempt(lambda: _cuda_values(api, spec, device)),
            "sync": _attempt(lambda: {"ok": _cuda_forward(api, small, device, debug=True) >= 0}),
            "memory": _attempt(lambda: {"peak": _cuda_forward(api, spec["memory"], device)}),
            "autocast": _watched_if_failed(
                {mode: functools.partial(_precision_part, api, "module", mode, spec["init"],
                                         shapes, device) for mode in spec.get("autocast", ())})}


# ----------------------------------------------------------------------------------------
# Error carried forward, the other end: the reference's answers, from a sandbox of its own

def answer(api, question: dict) -> dict:
    """``api``'s answer to one call of a carried part: ``question`` is what ``carried`` sent,
    already held by the grader to the calls the contract allows. Mode "value": the value,
    and what it cost (counted in the student's trace as if the student had done it); mode
    "vjp": the gradient of each tensor argument (None where it has none). Runs on the
    reference, in a sandbox of its own (``carry.Answers``), never in the grader."""
    function, args = getattr(api, question["fn"]), list(question["args"])
    if question["mode"] == "value":
        trace = OpTrace("cpu")
        with torch.no_grad(), trace:
            value = plain(function(*args), question["fn"])
        return {"answer": value, "cost": trace.cost()}
    return {"answer": _vjp(function, args, question.get("grads"))}


def _vjp(function, args, grads) -> list:
    """Gradients for each tensor argument (None where it has none) of function(*args)
    against the output gradients ``grads``."""
    inputs = [a.detach().clone().requires_grad_() if _type(a) is _Tensor
              and a.is_floating_point() else a for a in args]
    out = function(*inputs)
    outs = out if _isinstance(out, tuple) else (out,)
    if _type(grads) not in (list, tuple) or _len(grads) != _len(outs):
        raise ValueError("output gradients that do not match the outputs")
    pairs = [(o, g.to(o.dtype)) for o, g in zip(outs, grads)
             if _type(g) is _Tensor and g.shape == o.shape and o.requires_grad]
    wanted = [a for a in inputs if _type(a) is _Tensor and a.requires_grad]
    got = iter(torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs],
                                   allow_unused=True)
               if pairs and wanted else [None] * _len(wanted))
    return [next(got) if a.requires_grad else None
            for a in inputs if _type(a) is _Tensor]


PROBES = {"call": call, "calls": calls, "mha": mha, "mhas": mhas, "mha_raises": mha_raises,
          "mha_loads": mha_loads,
          "trace": trace, "on_device": on_device, "low_precision": low_precision,
          "on_cuda": on_cuda, "answer": answer}
