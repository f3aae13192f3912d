"""The data behind the structure checks and diagnoses, gathered once per submission.

Each helper runs its probes on both sides (once: results, and the student's errors, are kept
in ``p.observations["structure"]``) and returns plain findings. Judging them is left to the
checks in ``structure`` and to the diagnoses; a StudentError propagates to the caller.
"""
from __future__ import annotations

import re

import torch

from ..compare import CheckFailed
from ..sandbox.host import StudentError
from .cases import randn
from .module import Config, inputs

ROLES = ("W_q", "W_k", "W_v", "W_o")
HEADS_CONFIG = Config("distinct-heads", 12, 4, bias=True, batch=2, n_q=4, n_k=5)
P = HEADS_CONFIG.d_model // HEADS_CONFIG.num_heads
SAME, MOVED = 1e-12, 1e-9                      # float64: "identical" and "changed"
INIT_CONFIGS = (Config("init", 12, 4), Config("init-d-total", 8, 2, d_total=12))
HEAD_COUNTS = (1, 2, 4, 8)
TRACES = {"d_total = d_model": {"d_model": 16},
          "d_total != d_model, bias": {"d_model": 16, "d_total": 24, "bias": True}}
TRACE_SHAPES = {"batch": 2, "n_q": 3, "n_k": 5}
KERNELS = {"mm", "bmm", "addmm", "baddbmm", "addbmm", "dot", "mv", "_softmax", "_log_softmax",
           "_safe_softmax", "exp"}
FLOP_SLACK = 0.01
SMALL = {"init": {"d_model": 8, "num_heads": 2}, "shapes": {"batch": 3, "n_q": 3, "n_k": 5}}
MODES = ("cast-float32", "autocast-float16", "autocast-bfloat16", "cast-float16", "cast-bfloat16")
SYNC_ERRORS = re.compile(r"item\(\) cannot|copy out of meta|no data|without output_size|"
                         r"data-independent|to numpy|aten::(nonzero|masked_select|equal|allclose|"
                         r"_local_scalar_dense|is_nonzero)", re.I)
CUDA_CONFIG = Config("cuda", 12, 3, bias=True, batch=3, n_q=4, n_k=5)
MEMORY = {"init": {"d_model": 256, "num_heads": 8}, "shapes": {"batch": 2, "n_q": 256, "n_k": 256}}
MEMORY_FACTOR, MEMORY_SLACK = 3.0, 8 << 20
CUDA_AUTOCAST = ("autocast-float16", "autocast-bfloat16")


def _once(p, key, make):
    """make() once per submission; a StudentError is kept and raised again on every call."""
    store = p.observations.setdefault("structure", {})
    if key not in store:
        try:
            store[key] = ("ok", make())
        except StudentError as e:
            store[key] = ("error", e)
    kind, value = store[key]
    if kind == "error":
        raise value
    return value


# --------------------------------------------------------------------------------------
# Distinct heads

def aliased_roles(p) -> list[str]:
    """Names of contract parameters whose memory overlaps another's (first such group)."""
    def make():
        p.student.require("MultiHeadAttention")
        return p.student.mha({"init": HEADS_CONFIG.init}, group="heads")["params"]
    params = [q for q in _once(p, "params", make)
              if q["name"].split(".")[0] in ROLES and q["name"].count(".") == 1]
    for i, a in enumerate(params):
        group = [b["name"] for b in params[i + 1:]
                 if b["storage"] == a["storage"] and _overlap(_span(a), _span(b))]
        if group:
            return [a["name"]] + group
    return []


def _span(param: dict) -> tuple:
    """The bytes a parameter spans in its storage (all of it, if the answer does not say)."""
    span = param.get("span")
    ok = isinstance(span, (tuple, list)) and len(span) == 2 and all(type(x) is int for x in span)
    return tuple(span) if ok else (0, float("inf"))


def _overlap(a: tuple, b: tuple) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def heads(p) -> dict:
    """Distinct weights loaded: how far apart the heads are, what perturbing one head's block
    of W_q / W_k moves, and which head blocks get exactly zero gradient."""
    return _once(p, "heads", lambda: _heads(p))


def _heads(p) -> dict:
    c, h = HEADS_CONFIG, HEADS_CONFIG.num_heads
    gen = p.generator("heads.distinct")
    seed = int(torch.randint(0, 2**31, (1,), generator=gen))
    base = p.reference.mha({"init": c.init, "seed": seed, "want_state": True}, group="heads")["state"]
    run = inputs(gen, c, grad=True)
    loads, labels = [base], []
    for role in ("W_q", "W_k"):
        for j in range(h):
            weights = {k: v.clone() for k, v in base.items()}
            weights[f"{role}.weight"][j * P:(j + 1) * P] += randn(gen, P, c.d_model)
            loads.append(weights)
            labels.append((role, j))
    forward_only = {k: v for k, v in run.items() if k != "grad"}
    p.student.require("MultiHeadAttention")
    student = p.student.probe("mha_loads", "heads", spec={
        "init": c.init, "seed": seed, "loads": loads, "runs": [run] + [forward_only] * len(labels)})
    runs = student["runs"]
    shape = (c.batch, h, c.n_q, c.n_k)
    if any(not isinstance(r["weights"], torch.Tensor) or tuple(r["weights"].shape) != shape
           for r in runs):
        return {"problem": f"{c.describe()}: self.attention_weights after forward is not a "
                           f"tensor of shape {shape} (batch, num_heads, n_q, n_k)"}
    w0 = runs[0]["weights"]
    spread = max(float((w0[:, j] - w0[:, 0]).abs().max()) for j in range(h))
    perturbed = [(role, j, [k for k in range(h)
                            if float((r["weights"][:, k] - w0[:, k]).abs().max()) > MOVED])
                 for (role, j), r in zip(labels, runs[1:])]
    shapes = {f"{role}.weight": tuple(w.shape) for role, w in
              ((r, base[f"{r}.weight"]) for r in ROLES)}
    return {"spread": spread, "perturbed": perturbed,
            **_zero_blocks(runs[0]["grads"], h, shapes)}


def _zero_blocks(grads: dict, h: int, shapes: dict) -> dict:
    """Head blocks (rows of W_q/W_k/W_v, columns of W_o) whose gradient is exactly zero."""
    zero, partial = {}, {}
    for role in ROLES:
        g = grads.get(f"{role}.weight")
        if not isinstance(g, torch.Tensor) or tuple(g.shape) != shapes[f"{role}.weight"]:
            g = None
        blocks = ([torch.zeros(1)] * h if g is None else
                  g.reshape(h, -1, g.shape[-1]).unbind(0) if role != "W_o" else
                  g.reshape(g.shape[0], h, -1).unbind(1))
        dead = [j for j, b in enumerate(blocks) if not bool(b.abs().max() > 0)]
        if dead:
            zero[role] = dead
            if len(dead) < h:
                partial[role] = dead
    return {"zero_grad": zero, "partial_zero_grad": partial}


def identical_init(p) -> list[tuple]:
    """(config, seed, role, identical block pairs) for each fresh module whose W_q, W_k or
    W_v has two equal head blocks."""
    def make():
        found = []
        gen = p.generator("heads.init")
        for c in INIT_CONFIGS:
            d_total, h = c.d_total or c.d_model, c.num_heads
            for seed in torch.randint(0, 2**31, (2,), generator=gen).tolist():
                p.student.require("MultiHeadAttention")
                state = p.student.mha({"init": c.init, "seed": seed, "want_state": True},
                                      group="heads")["state"]
                for role in ROLES[:3]:
                    W = state.get(f"{role}.weight")
                    if W is None or tuple(W.shape) != (d_total, c.d_model):
                        continue
                    blocks = W.reshape(h, d_total // h, c.d_model)
                    pairs = [(j, k) for j in range(h) for k in range(j + 1, h)
                             if torch.equal(blocks[j], blocks[k])]
                    if pairs:
                        found.append((c, seed, role, pairs))
        return found
    return _once(p, "init", make)


# --------------------------------------------------------------------------------------
# Cost parity

def traces(p, side: str) -> dict:
    """{config name: {num_heads: {"params", "ops", "flops", "sync"} or {"params", "raised"}}}."""
    def make():
        target = p.student if side == "student" else p.reference
        target.require("MultiHeadAttention")
        return {name: target.probe("trace", "cost", spec={"heads": list(HEAD_COUNTS),
                                                          "init": init, "shapes": TRACE_SHAPES})
                for name, init in TRACES.items()}
    return _once(p, ("trace", side), make)


def describe_trace(name: str) -> str:
    init = TRACES[name]
    extra = f", d_total={init['d_total']}" if "d_total" in init else ""
    return (f"MultiHeadAttention({init['d_model']}, num_heads{extra}, bias={init.get('bias', False)})"
            f", batch {TRACE_SHAPES['batch']}, n_q={TRACE_SHAPES['n_q']}, n_k={TRACE_SHAPES['n_k']}")


def expected_params(name: str) -> int:
    init = TRACES[name]
    d, dt = init["d_model"], init.get("d_total", init["d_model"])
    return 4 * d * dt + ((3 * dt + d) if init.get("bias") else 0)


def formula(name: str) -> str:
    init = TRACES[name]
    d, dt = init["d_model"], init.get("d_total", init["d_model"])
    bias = f" + 3·{dt} + {d}" if init.get("bias") else ""
    return f"4·{d}·{dt}{bias} = {expected_params(name)}"


def param_counts(p) -> list[tuple]:
    student, ref = traces(p, "student"), traces(p, "reference")
    return [(name, {h: e["params"] for h, e in student[name].items()},
             {h: e["params"] for h, e in ref[name].items()}, expected_params(name))
            for name in TRACES]


def _per_head(p, pick) -> list[tuple]:
    student, ref = traces(p, "student"), traces(p, "reference")
    out = []
    for name in TRACES:
        for h, e in student[name].items():
            if "raised" in e or "bad" in e:
                info = e.get("raised", {})
                raise StudentError(f"{describe_trace(name)}, num_heads={h}: forward failed: "
                                   f"{info.get('type', '')} {info.get('message', e.get('bad'))}",
                                   raised=e.get("raised"))
        out.append((name, {h: pick(e) for h, e in student[name].items()},
                    {h: pick(e) for h, e in ref[name].items()}))
    return out


def flop_counts(p) -> list[tuple]:
    return _per_head(p, lambda e: e["flops"])


def kernel_counts(p) -> list[tuple]:
    return _per_head(p, lambda e: sum(n for op, n in e["ops"].items() if op in KERNELS))


# --------------------------------------------------------------------------------------
# Device and precision

def meta_runs(p) -> dict:
    def make():
        p.student.require("MultiHeadAttention")
        return p.student.probe("on_device", "device", spec=dict(SMALL, device="meta"))
    return _once(p, "meta", make)


def device_problems(p) -> list[tuple[str, str]]:
    """(part, what): parts that work on the CPU but not on the meta device, for device reasons."""
    found = []
    for part, entry in meta_runs(p).items():
        result = entry.get("device")
        if result is None:
            continue
        if "raised" in result:
            message = f"{result['raised']['type']}: {result['raised']['message']}"
            if "device" in message.lower() and not SYNC_ERRORS.search(message):
                found.append((part, message))
        elif "value" in result:
            value = result["value"]
            if value["foreign"]:
                found.append((part, "it creates non-scalar CPU tensors (with "
                              + ", ".join(sorted(set(value["foreign"]))) + ")"))
            elif value["device"] != "meta":
                found.append((part, f"it returns a tensor on {value['device']}"))
    return found


def host_syncs(p) -> list[tuple[str, list[str]]]:
    """(part, evidence): the CPU op traces' host syncs and sync errors on the meta device."""
    found: dict[str, list[str]] = {}
    for name, per_head in traces(p, "student").items():
        for e in per_head.values():
            for op in e.get("sync", ()):
                found.setdefault("forward", []).append(f"aten::{op}")
    for part, entry in meta_runs(p).items():
        label = "forward" if part == "module" else part
        if "value" in entry["cpu"]:
            found.setdefault(label, []).extend(f"aten::{op}" for op in entry["cpu"]["value"]["sync"])
        result = entry.get("device", {})
        if "raised" in result and SYNC_ERRORS.search(result["raised"]["message"]):
            found.setdefault(label, []).append("on the meta device: " + result["raised"]["message"][:120])
    return [(part, sorted(set(ops))) for part, ops in found.items() if ops]


def low_precision(p, side: str) -> dict:
    def make():
        target = p.student if side == "student" else p.reference
        target.require("MultiHeadAttention")
        return target.probe("low_precision", "device", spec=dict(SMALL, modes=list(MODES)))
    return _once(p, ("precision", side), make)


def precision_failures(p) -> list[tuple[str, str, str]]:
    """(mode, part, what) where the student is not finite (or raises) in low precision while
    its float32 run and the reference's run in that mode are finite."""
    student, ref = low_precision(p, "student"), low_precision(p, "reference")
    found = []
    for mode in MODES[1:]:
        for part, result in student[mode].items():
            base, wanted = student[MODES[0]][part], ref[mode][part]
            if not (base.get("value", {}).get("finite") and wanted.get("value", {}).get("finite")):
                continue
            if "raised" in result:
                found.append((mode, part, f"raised {result['raised']['type']}: "
                                          f"{result['raised']['message'][:160]}"))
            elif "bad" in result:
                found.append((mode, part, result["bad"][:160]))
            elif not result["value"]["finite"]:
                found.append((mode, part, "non-finite values (inf or NaN)"))
    return found


def cuda_runs(p) -> tuple[dict, dict, dict]:
    """(student's on_cuda data, reference's, the float64 values expected)."""
    def make():
        c = CUDA_CONFIG
        gen = p.generator("device.cuda")
        seed = int(torch.randint(0, 2**31, (1,), generator=gen))
        run = inputs(gen, c, masked="1-d")
        ref_cpu = p.reference.mha({"init": c.init, "seed": seed, "want_state": True,
                                   "runs": [run]}, group="device")
        spec = {"init": c.init, "load": ref_cpu["state"], "run": run, "memory": MEMORY,
                "autocast": list(CUDA_AUTOCAST), "device": p.device,
                "shapes": {"batch": c.batch, "n_q": c.n_q, "n_k": c.n_k}}
        ref = p.reference.probe("on_cuda", "device", spec=spec)
        if ref.get("unavailable") or "value" not in ref["values"]:
            raise RuntimeError(f"the reference did not run on the GPU: {ref}")
        expected = dict(ref["values"]["value"], out=ref_cpu["runs"][0]["out"],
                        weights=ref_cpu["runs"][0]["weights"])
        p.student.require("MultiHeadAttention")
        return p.student.probe("on_cuda", "device", spec=spec), ref, expected
    return _once(p, "cuda", make)


def describe_memory() -> str:
    init, shapes = MEMORY["init"], MEMORY["shapes"]
    return (f"MultiHeadAttention({init['d_model']}, {init['num_heads']}) in float32, batch "
            f"{shapes['batch']}, n_q={shapes['n_q']}, n_k={shapes['n_k']}, masked")


def first(value):
    """The output of a (output, weights) pair, or the value itself."""
    return value[0] if isinstance(value, tuple) and value else value


def expect_ran(result: dict, key: str, what: str) -> dict:
    entry = result.get(key)
    if not isinstance(entry, dict):
        raise CheckFailed(f"{what} did not run (its result is missing)")
    if "raised" in entry:
        info = entry["raised"]
        hint = (" (a host synchronisation in forward: keep data-dependent decisions on the "
                "device)" if "synchroniz" in info["message"] else "")
        raise CheckFailed(f"{what} raised {info['type']}: {info['message'][:300]}{hint}")
    if "bad" in entry:
        raise CheckFailed(f"{what}: {entry['bad']}")
    return entry["value"]


def fresh_spread(p) -> float:
    """How far apart the heads' attention weights are with the student's own fresh weights."""
    def make():
        c = HEADS_CONFIG
        gen = p.generator("heads.fresh")
        p.student.require("MultiHeadAttention")
        run = p.student.mha({"init": c.init, "seed": 1, "runs": [inputs(gen, c)]},
                            group="heads")["runs"][0]
        w = run["weights"]
        if not isinstance(w, torch.Tensor) or w.dim() != 4 or w.shape[1] != c.num_heads:
            return None
        return max(float((w[:, j] - w[:, 0]).abs().max()) for j in range(c.num_heads))
    return _once(p, "fresh", make)
