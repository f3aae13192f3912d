"""Diagnoses of the mistakes values alone cannot show: shared or unused heads, cost,
device, precision and the forbidden built-ins (TAXONOMY: heads, cost, device, dtype, api).

Each reads the findings of ``checks.evidence`` (gathered by the checks, or here when a check
did not run) and decides from the symptom, never from the source text.
"""
from __future__ import annotations

import torch

from ..checks import evidence as ev
from ..checks import evidence_device as evd
from ..checks.module import forbidden_seen
from . import diagnosis

H = ev.HEADS_CONFIG.num_heads
ONE_HEAD = ("{h} heads that compute the same thing are one head repeated {h} times; they "
            "cannot attend to different positions or features")


def _heads(p) -> dict:
    data = ev.heads(p)
    return {"spread": 0.0, "zero_grad": {}, "partial_zero_grad": {}, "unknown": True} \
        if "problem" in data else data


def _counts(values: dict) -> str:
    return ", ".join(f"{v} (h={h})" for h, v in values.items())


@diagnosis("heads.shared-weights")
def shared_weights(p, results):
    """One set of per-head matrices serves every head: the parameter count falls as num_heads
    grows (each head's width shrinks and nothing is per head), whether the heads then see the
    same input (identical heads) or each its own slice of it (a (p x p) layer per slice)."""
    spread = ev.fresh_spread(p)
    for name, counts, _, expected in ev.param_counts(p):
        if set(counts.values()) == {expected} or not _falls_with_heads(counts):
            continue
        if spread is not None and spread <= ev.SAME:
            how = f"all {H} heads' attention weights are identical. " + ONE_HEAD.format(h=H)
        else:
            how = ("the heads differ only because each sees another slice of the input: the "
                   "projection itself is shared")
        return (f"every head uses the same projection: the parameter count is "
                f"{_counts(counts)} instead of {expected} whatever num_heads "
                f"({ev.describe_trace(p, name)}), so one set of per-head matrices serves all "
                f"heads; {how}. Make W_q, W_k and W_v nn.Linear(d_model, d_total) and give "
                "head j its own block of columns.")
    return None


def _falls_with_heads(counts: dict) -> bool:
    values = list(counts.values())
    return all(a > b for a, b in zip(values, values[1:]))


@diagnosis("heads.tiled-block")
def tiled_block(p, results):
    # the contract's projections (a count that falls with num_heads is shared-weights; an
    # extra parameter beside them is cost.extra-params, and the heads can still be tiled)
    if any(_falls_with_heads(s) or min(s.values()) < e for _, s, _, e in ev.param_counts(p)):
        return None
    data = _heads(p)
    if data["spread"] > ev.SAME or data.get("unknown"):
        return None
    dead = "; ".join(f"{role} blocks {blocks}" for role, blocks in data["zero_grad"].items())
    return (f"the parameters have the contract's shapes, but with distinct weights loaded all "
            f"{H} heads are identical: forward gives every head the same block"
            + (f" (zero gradient: {dead})" if dead else "") + ". " + ONE_HEAD.format(h=H)
            + ". Use W.weight[j*p:(j+1)*p] for head j, i.e. split the full projection.")


@diagnosis("heads.unused-block")
def unused_block(p, results):
    data = _heads(p)
    if data["spread"] <= ev.SAME or not data["partial_zero_grad"]:
        return None
    role, blocks = next(iter(data["partial_zero_grad"].items()))
    return (f"head block(s) {blocks} of {role}.weight get exactly zero gradient on unmasked "
            "inputs: those heads never reach the output. concat(h_1..h_M) W_o sums h_j W_o^(j) "
            "with each head's own block of W_o; concatenate all heads, then apply W_o.")


@diagnosis("heads.identical-init")
def identical_init(p, results):
    found = [(c, seed, role, when) for c, seed, role, pairs, when in ev.identical_init(p)
             if len(pairs) == c.num_heads * (c.num_heads - 1) // 2]
    if not found or _heads(p)["spread"] <= ev.SAME:
        return None
    c, seed, role, when = found[0]
    return (f"{when} every head block of {role}.weight is the same "
            f"({ev.constructor(c)}, seed {seed}); identical heads get identical gradients and never "
            "diverge. Let nn.Linear initialise the whole weight; do not re-seed per head.")


@diagnosis("cost.python-loop-over-heads")
def python_loop(p, results):
    for name, counts, ref in ev.kernel_counts(p):
        heads = list(counts)
        if counts[heads[-1]] > counts[heads[1]]:
            return (f"matmul/softmax kernels per forward: {_counts(counts)}, growing with "
                    f"num_heads (the reference: {_counts(ref)}): the heads are pooled one at a "
                    "time in a Python loop. Batch them on the (batch, heads, n, p) layout.")
    return None


@diagnosis("cost.extra-params")
def extra_params(p, results):
    for name, counts, _, expected in ev.param_counts(p):
        if max(counts.values()) > expected:
            return (f"parameter count {_counts(counts)}; one head of width d_total has "
                    f"{ev.formula(name)} whatever num_heads ({ev.describe_trace(p, name)}). Each "
                    "head's width must be d_total / num_heads, not d_total.")
    return None


@diagnosis("device.hardcoded-cpu")
def hardcoded_cpu(p, results):
    found = evd.device_problems(p)
    if not found:
        return None
    part, what = found[0]
    return (f"{part} creates a tensor on a fixed (CPU) device: with its inputs on another device "
            f"(meta here, CUDA on a GPU) {what}. Pass device=<input>.device when creating "
            "helper tensors (torch.arange, torch.tensor, torch.zeros, ...).")


@diagnosis("device.host-sync")
def host_sync(p, results):
    found = evd.host_syncs(p)
    if not found:
        return None
    part, ops = found[0]
    return (f"{part} reads tensor data on the host ({', '.join(ops)}); on a GPU each read "
            "waits for the device. Replace the Python branch on tensor data with tensor ops.")


@diagnosis("api.forbidden-sdpa")
def forbidden_sdpa(p, results):
    hits = forbidden_seen(p.evidence)
    if not hits:
        return None
    return ("the submission calls built-in attention the assignment forbids ("
            + ", ".join(hits) + "); build it from your own projection, split, pooling and concat.")


@diagnosis("proj.qkv-aliased")
def qkv_aliased(p, results):
    names = [n for n in ev.aliased_roles(p) if n.split(".")[0] in ev.ROLES[:3]]
    if len(names) < 2:
        return None
    return (f"{' and '.join(names)} are one tensor: one nn.Linear serves several of W_q, W_k, "
            "W_v (e.g. self.W_q = self.W_k = self.W_v = nn.Linear(...)). Create one layer each.")


@diagnosis("mask.fp16-overflow")
def fp16_overflow(p, results):
    """Only from an overflow itself: the exception of a constant that does not fit the dtype,
    or an infinity made from finite operands, in a run that is finite in float32 (a dtype
    mismatch or any other failure in low precision is no evidence of it)."""
    overflows = [(mode, part, what) for mode, part, what, kind in evd.precision_failures(p)
                 if kind == "overflow"]
    if not overflows:
        return None
    mode, part, what = overflows[0]
    dtypes = {"bfloat16" if "bfloat16" in m else "float16" for m, _, _ in overflows}
    where = ("in float16 and in bfloat16 (a constant beyond bfloat16's range as well, such as "
             "float32's minimum)" if len(dtypes) == 2 else
             "in bfloat16 only (a constant beyond bfloat16's range, such as float32's minimum; "
             "float16 is fine)" if dtypes == {"bfloat16"} else
             "in float16 (bfloat16 is fine)")
    return (f"{part} under {mode} (masks with length 0): {what}, while float32 is fine; the "
            f"mask constant overflows {where}. Fill with torch.finfo(scores.dtype).min, which "
            "fits every dtype.")


def _softmax_pairs(p):
    """(what, actual, expected) for every softmax-like float64 result the checks observed."""
    calls = p.evidence.calls
    for case, result, expected in calls.get("masked_softmax", []):
        yield f"masked_softmax on {case.describe}", result.get("value"), expected
    for case, result, expected in calls.get("attention_pool", []):
        value = result.get("value")
        yield (f"attention_pool's weights on {case.describe}",
               value[1] if isinstance(value, tuple) and len(value) == 2 else None, expected[1])
    for c, runs, student, ref in p.evidence.mha:
        for s, r in zip(student.get("runs", ()), ref["runs"]):
            yield f"attention_weights of {c.describe()}", s.get("weights"), r["weights"]


def _float32_detour(actual, expected) -> bool:
    if type(actual) is not torch.Tensor or actual.is_complex() or expected.dtype != torch.float64 \
            or actual.shape != expected.shape or not torch.isfinite(expected).all():
        return False
    diff = float((actual.double() - expected).abs().max())
    if actual.dtype == torch.float32:
        return diff < 1e-5
    inside = (expected > 0) & (expected < 1)
    return (actual.dtype == torch.float64 and 1e-13 < diff < 1e-5 and bool(inside.any())
            and torch.equal(actual.float().double(), actual))


@diagnosis("dtype.forces-float32")
def forces_float32(p, results):
    cast = [(mode, part, got, wanted) for mode, part, got, wanted in evd.dtype_failures(p)
            if mode.startswith("cast-") and "float32" in got]
    if cast:
        mode, part, got, wanted = cast[0]
        return (f"{part} with inputs cast to {mode.removeprefix('cast-')} "
                f"{evd.dtype_not_kept(got, wanted)}: part of the "
                "computation is forced to float32. Compute in the inputs' dtype (no .float(), "
                "no dtype=torch.float32).")
    mismatch = [(mode, part, what) for mode, part, what, kind in evd.precision_failures(p)
                if kind == "dtype"]
    if mismatch:
        mode, part, what = mismatch[0]
        return (f"{part} under {mode} {what}: a tensor in float32 (made without dtype=, or a "
                "float32 constant) meets tensors in the inputs' dtype, so part of the "
                "computation is forced to float32. Create helper tensors with "
                "dtype=scores.dtype.")
    for what, actual, expected in _softmax_pairs(p):
        if _float32_detour(actual, expected):
            return (f"{what}: float64 inputs give results rounded to float32 (they differ from "
                    "the reference by about 1e-8, not 1e-15): part of the computation is forced "
                    "to float32. Compute in the inputs' dtype (no .float(), no dtype=torch.float32).")
    detours = p.evidence.float32_detour
    if detours:
        return (f"float64 inputs give values right only to float32's precision ({len(detours)} "
                f"results, e.g. {detours[0]}): part of the computation, or a constant in it "
                "(a scale or a mask made as a float32 tensor), is in float32. Compute in the "
                "inputs' dtype, and make constants with dtype=scores.dtype.")
    return None


@diagnosis("api.breaks-code-rules")
def breaks_code_rules(p, results):
    """A fact, not a guess: the grader read the broken rule in the source, or the sandbox's
    guard refused a line while it ran. It costs nothing by itself (the checks whose code was
    refused lost their points)."""
    broken = code_rules_broken(p.evidence)
    if not broken:
        return None
    more = f" (and {len(broken) - 3} more)" if len(broken) > 3 else ""
    return ("the code breaks the assignment's code rules (docs/contract.md, 'Code rules'), so "
            "those lines raise instead of running: " + "; ".join(broken[:3]) + more)


def code_rules_broken(evidence) -> list[str]:
    """The code rules broken: read in the source (before anything ran) and refused while it ran."""
    source = evidence.source
    found = [str(v) for v in (source.rules if source else ())][:50]
    return found + [m for m in evidence.rules if m not in found][:20]
