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
import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

# Bound now, before any submission is imported: a submission that patches the builtins
# or torch afterwards does not change how the probes read its results.
_type, _isinstance, _issubclass, _str, _len = builtins.type, builtins.isinstance, \
    builtins.issubclass, builtins.str, builtins.len
_Tensor = torch.Tensor
MESSAGE_LIMIT = 400
PARAM_ROLES = ("W_q", "W_k", "W_v", "W_o")


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
    """Call one API function; report its result (or exception) and its inputs afterwards."""
    args = [_prepare(a) for a in args]
    before = [a.clone() if _type(a) is _Tensor else None for a in args]
    try:
        value = plain(getattr(api, fn)(*args, **(kwargs or {})), fn)
    except ProbeError as e:
        return {"bad": str(e)}
    except BaseException as e:                # student code may raise anything, even SystemExit
        return {"raised": describe(e)}
    changed = [i for i, (a, b) in enumerate(zip(args, before))
               if b is not None and not (a.shape == b.shape and torch.equal(a, b))]
    return {"value": value, "mutated": changed}


# ----------------------------------------------------------------------------------------
# The module


def build(api, init: dict, seed: int = 0, dtype=torch.float64):
    torch.manual_seed(seed)
    kwargs = {k: init[k] for k in ("d_total", "bias", "dropout") if k in init}
    model = api.MultiHeadAttention(init["d_model"], init["num_heads"], **kwargs)
    if not _isinstance(model, torch.nn.Module):
        raise ProbeError("MultiHeadAttention(...) did not build a torch.nn.Module")
    return model.to(dtype)


def parameters(model) -> list[dict]:
    """Every parameter by name (aliases included), with the storage it lives in."""
    storages: dict[int, int] = {}
    out = []
    for name, p in model.named_parameters(remove_duplicate=False):
        ptr = p.untyped_storage().data_ptr() if p.device.type != "meta" else id(p)
        group = storages.setdefault(ptr, _len(storages))
        out.append({"name": name, "shape": tuple(p.shape), "numel": p.numel(),
                    "storage": group, "is_param": _type(p) is torch.nn.Parameter})
    return out


def roles(model) -> dict:
    """The contract's four projections as (weight, bias) parameter pairs."""
    found = {}
    for role in PARAM_ROLES:
        layer = getattr(model, role, None)
        weight = getattr(layer, "weight", None)
        if not _isinstance(weight, _Tensor):
            raise ProbeError(f"the module has no {role} with a .weight (the contract asks for "
                             f"self.{role} = torch.nn.Linear(...))")
        found[role] = (weight, getattr(layer, "bias", None))
    return found


def load(model, weights: dict) -> None:
    """Copy the reference's weights into the contract's parameters, by name."""
    found = roles(model)
    with torch.no_grad():
        for key, value in weights.items():
            role, kind = key.split(".")
            weight, bias = found[role]
            target = weight if kind == "weight" else bias
            if target is None:
                raise ProbeError(f"{role} has no bias, but the module was built with bias=True")
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
    model.train(bool(run.get("train", False)))
    want_grad = run.get("grad") is not None
    for t in (q, k, v):
        t.requires_grad_(want_grad)
    model.zero_grad(set_to_none=True)
    if "seed" in run:
        torch.manual_seed(run["seed"])
    out = plain(model(q, k, v, lens), "forward")
    if _type(out) is not _Tensor:
        raise ProbeError("forward returned a tuple; it should return one tensor "
                         "(batch, n_q, d_model) and keep the weights in self.attention_weights")
    weights = getattr(model, "attention_weights", None)
    result = {"out": out.detach(), "weights": weights.detach() if _type(weights) is _Tensor else None}
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
    result = {"params": parameters(model)}
    if spec.get("want_state"):
        result["state"] = state(model)
    if spec.get("load") is not None:
        load(model, spec["load"])
    result["runs"] = [forward(model, run) for run in spec.get("runs", ())]
    return result


def mha_raises(api, init: dict) -> dict:
    try:
        build(api, init)
    except ProbeError as e:
        return {"bad": str(e)}
    except BaseException as e:
        return {"raised": describe(e)}
    return {"value": None}


# ----------------------------------------------------------------------------------------
# Structure: operator traces, FLOPs, other devices and precisions

SYNC_OPS = {"_local_scalar_dense", "nonzero", "masked_select", "is_nonzero", "item",
            "equal", "allclose", "_assert_async"}
FORBIDDEN_OPS = ("scaled_dot_product", "_native_multi_head_attention", "multi_head_attention")


class OpTrace(TorchDispatchMode):
    """Counts the aten operators dispatched, and notes host syncs and CPU tensors."""

    def __init__(self, device: str):
        super().__init__()
        self.counts: dict[str, int] = {}
        self.device = device
        self.foreign: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        self.counts[name] = self.counts.get(name, 0) + 1
        out = func(*args, **(kwargs or {}))
        if self.device != "cpu":
            for t in (out if _isinstance(out, (tuple, list)) else (out,)):
                if _isinstance(t, _Tensor) and t.device.type == "cpu" and t.dim() > 0:
                    self.foreign.append(name)
        return out


def _run_module(model, shapes: dict, dtype, device, masked: bool):
    b, n_q, n_k, d = shapes["batch"], shapes["n_q"], shapes["n_k"], shapes["d_model"]
    gen = torch.Generator().manual_seed(shapes.get("seed", 0))
    q = torch.randn(b, n_q, d, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)
    kv = torch.randn(b, n_k, d, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)
    lens = torch.arange(b, device=device) % (n_k + 1) if masked else None
    return model(q, kv, kv, lens)


def trace(api, spec: dict) -> dict:
    """Op counts and FLOPs of one eval-mode forward, for several head counts."""
    out = {}
    for h in spec["heads"]:
        init = dict(spec["init"], num_heads=h)
        model = build(api, init).eval()
        shapes = dict(spec["shapes"], d_model=init["d_model"])
        with torch.no_grad():
            ops = OpTrace("cpu")
            with ops:
                _run_module(model, shapes, torch.float64, "cpu", spec.get("masked", True))
            flops = FlopCounterMode(display=False)
            with flops:
                _run_module(model, shapes, torch.float64, "cpu", spec.get("masked", True))
        out[str(h)] = {"ops": ops.counts, "flops": int(flops.get_total_flops()),
                       "params": sum(p.numel() for p in model.parameters())}
    return out


def _attempt(fn):
    try:
        return {"value": plain(fn(), "the call")}
    except ProbeError as e:
        return {"bad": str(e)}
    except BaseException as e:
        return {"raised": describe(e)}


def on_device(api, spec: dict) -> dict:
    """Run the module and the masked functions on another device (meta, or cuda)."""
    device = spec["device"]
    init = spec["init"]
    shapes = dict(spec["shapes"], d_model=init["d_model"])
    result = {}
    model = None

    def module():
        nonlocal model
        model = build(api, init).eval().to(device)
        ops = OpTrace(device)
        with torch.no_grad(), ops:
            y = _run_module(model, shapes, torch.float32, device, True)
        return {"shape": tuple(y.shape), "device": y.device.type, "foreign": ops.foreign[:5],
                "sync": sorted(set(ops.counts) & SYNC_OPS)}

    def masked():
        scores = torch.randn(2, 3, 4, 5, device=device)
        lens = torch.tensor([0, 5], device=device)
        ops = OpTrace(device)
        with ops:
            w = api.masked_softmax(scores, lens)
            y, _ = api.attention_pool(scores, scores, scores, lens)
        return {"shape": tuple(w.shape), "device": w.device.type, "foreign": ops.foreign[:5],
                "sync": sorted(set(ops.counts) & SYNC_OPS)}

    result["module"] = _attempt(module)
    result["masked"] = _attempt(masked)
    return result


def low_precision(api, spec: dict) -> dict:
    """Forward under float16/bfloat16 (autocast and casts), masks with length 0 included."""
    init, shapes = spec["init"], dict(spec["shapes"], d_model=spec["init"]["d_model"])
    device = spec.get("device", "cpu")
    results = {}
    for mode in spec["modes"]:
        def run(mode=mode):
            model = build(api, init, dtype=torch.float32).eval().to(device)
            with torch.no_grad():
                if mode.startswith("autocast-"):
                    dtype = getattr(torch, mode.removeprefix("autocast-"))
                    with torch.autocast(device, dtype=dtype):
                        y = _run_module(model, shapes, torch.float32, device, True)
                else:
                    dtype = getattr(torch, mode.removeprefix("cast-"))
                    y = _run_module(model.to(dtype), shapes, dtype, device, True)
            weights = getattr(model, "attention_weights", None)
            return {"finite": bool(torch.isfinite(y).all()),
                    "weights_finite": bool(torch.isfinite(weights).all())
                    if _type(weights) is _Tensor else None,
                    "dtype": str(y.dtype).removeprefix("torch.")}
        results[mode] = _attempt(run)
    return results


PROBES = {"call": call, "mha": mha, "mha_raises": mha_raises, "trace": trace,
          "on_device": on_device, "low_precision": low_precision}
