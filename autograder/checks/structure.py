"""Checks of what values alone cannot show: distinct heads, cost parity, device and
precision (SPEC, "What the autograder holds a submission to", items 3, 4 and 5).

The data come from probes (``trace``, ``mha_loads``, ``on_device``, ``low_precision``,
``on_cuda``); they are gathered once per submission by the helpers in ``evidence`` and
``evidence_device`` and shared with the diagnoses. Every verdict is made here, from those data.
"""
from __future__ import annotations

from ..compare import CheckFailed, expect_close
from . import Probe, check
from . import evidence as ev
from .functions import expect_float64
from . import evidence_device as evd

HEADS_CHECKS = ["MultiHeadAttention.params"]
WORKS = ["MultiHeadAttention.values", "MultiHeadAttention.masked"]
SAME_HEADS = ("so all {h} heads compute the same thing: {h} identical heads are one head "
              "repeated {h} times, and the model loses what several heads are for (attending "
              "to different positions and features at once)")


def _counts(values: dict) -> str:
    return ", ".join(str(v) for v in values.values())


# --------------------------------------------------------------------------------------
# Distinct heads (SPEC item 3)

@check("MultiHeadAttention.distinct", part="MultiHeadAttention", kind="structure", group="heads", requires=HEADS_CHECKS,
       instruments=["parameters"])
def mha_distinct(p: Probe) -> None:
    """Each head has its own weights: W_q/W_k/W_v/W_o share no storage; with distinct weights
    loaded the heads differ; block j of W_q (or W_k) moves head j's attention weights and only
    head j's; every head block of W_q/W_k/W_v/W_o gets a gradient."""
    shared = ev.aliased_roles(p)
    if shared:
        raise CheckFailed(f"{' and '.join(shared)} are one tensor (they share storage), so their "
                          "weights can never differ. A chained assignment such as self.W_q = "
                          "self.W_k = nn.Linear(...) registers ONE layer under several names; "
                          "create a separate nn.Linear for each of W_q, W_k, W_v and W_o.")
    data = ev.heads(p)
    if "problem" in data:
        raise CheckFailed(data["problem"])
    c, h = ev.HEADS_CONFIG, ev.HEADS_CONFIG.num_heads
    if data["spread"] <= ev.SAME:
        raise CheckFailed(f"{c.describe()} with distinct weights loaded: all {h} heads' "
                          f"attention weights are identical (largest difference between heads "
                          f"{data['spread']:.2g}). Every head uses the same block of the "
                          f"projections, {SAME_HEADS.format(h=h)}. Head j must use its own block "
                          "W.weight[j*p:(j+1)*p] (split the full-width projection into heads).")
    for role, j, changed in data["perturbed"]:
        if changed != [j]:
            moved = (f"moved heads {changed}" if changed else "moved no head at all")
            raise CheckFailed(f"{c.describe()}: changing only head {j}'s block of {role}.weight "
                              f"(rows {j * ev.P}:{(j + 1) * ev.P}) {moved}; it must change head "
                              f"{j}'s attention weights and only those. Head j owns columns "
                              "[j*p, (j+1)*p) of the projection: split with reshape to (batch, n, "
                              "heads, p), then transpose(1, 2).")
    if data["zero_grad"]:
        role, blocks = next(iter(data["zero_grad"].items()))
        if len(blocks) == h:
            raise CheckFailed(f"{c.describe()}, unmasked inputs: {role}.weight gets exactly zero "
                              f"gradient (every head block), so {role} never acts on the output "
                              "and never learns (e.g. it is left out, or another layer built "
                              f"inside forward is used in its place). Use self.{role} itself.")
        raise CheckFailed(f"{c.describe()}, unmasked inputs: the head block(s) {blocks} of "
                          f"{role}.weight get exactly zero gradient, so those heads' weights never "
                          "reach the output and never learn. Use every head: concat_heads(...) "
                          "of all heads, then W_o.")


@check("MultiHeadAttention.init", part="MultiHeadAttention", kind="structure", group="heads", requires=HEADS_CHECKS + WORKS,
       instruments=["parameters"])
def mha_init(p: Probe) -> None:
    """Right after construction (two seeds), and after the module's first forward of its own
    fresh weights, the head blocks of W_q, W_k and W_v differ from each other: heads that start
    identical get identical gradients and never diverge."""
    for c, seed, role, pairs, when in ev.identical_init(p):
        j, k = pairs[0]
        raise CheckFailed(
            f"{ev.constructor(c)}, built with torch.manual_seed({seed}): {when} "
            f"head blocks {j} and {k} of {role}.weight are identical ({len(pairs)} identical pair(s) "
            "in all). Heads that start from the same values get the same gradients and never "
            f"diverge, {SAME_HEADS.format(h=c.num_heads)}. Let nn.Linear initialise the whole "
            "(d_total, d_model) weight at once; do not re-seed or copy one block per head.")


# --------------------------------------------------------------------------------------
# Cost parity (SPEC item 4)

@check("cost.params", part="conventions", kind="instrument", group="cost", instruments=["parameters"])
def cost_params(p: Probe) -> None:
    """The parameter count is 4·d_model·d_total (+ 3·d_total + d_model with biases) for
    num_heads 1, 2, 4, 8, the reference's: one head of width d_total."""
    for name, student, ref, expected in ev.param_counts(p):
        if student == ref or student == {h: n - ev.key_bias(name) for h, n in ref.items()}:
            continue            # a key bias may be left out (checks.module.INERT)
        got = list(student.values())
        trend = ("it shrinks as num_heads grows: one head's narrow projection is shared by every "
                 "head, so the M heads compute the same thing: M identical heads are one head "
                 "repeated M times, and the model loses what several heads are for. Each of W_q, "
                 "W_k, W_v must be nn.Linear(d_model, d_total), head j using its own block"
                 if got[-1] < got[0] else
                 "it grows with num_heads: each head has a full-width projection; each head's "
                 "width must be d_total / num_heads, so all heads cost as much as one wide head"
                 if got[-1] > got[0] else
                 "some layers are shared (counted once) or there are parameters beyond W_q, W_k, "
                 "W_v and W_o")
        raise CheckFailed(f"{ev.describe_trace(p, name)}: parameter count {_counts(student)} for "
                          f"num_heads = {', '.join(student)}; expected {expected} for every "
                          f"num_heads ({ev.formula(name)}): {trend}.")


def _measured_graded(p: Probe) -> None:
    """The forwards measured for cost are graded like the others: where the module's graded
    forwards give the reference's answers, a measured forward that does not is no measure of
    the module the values graded. (Where they do not, the value checks charge the mistake.)
    Judged once per submission; each check that reads the measurements fails with it."""
    wrong = ev.once(p, "measured-graded", lambda: _measured_wrong(p))
    if wrong:
        raise CheckFailed(f"a forward measured for cost is graded like the others, and this "
                          f"one is wrong: {wrong}")


def _measured_wrong(p: Probe) -> str | None:
    """What the first wrong measured forward got wrong, or None."""
    if not ev.graded_forwards_right(p):
        return None
    for what, (out, weights), (ref_out, ref_weights) in ev.measured_answers(p):
        try:
            # the same computation is all that is asked here: the precision is the value
            # checks' to judge (the measured forwards' weights are drawn in float64)
            expect_float64(p, actual=out, expected=ref_out, what=f"{what}: output", note=False)
            if ref_weights is not None:
                expect_float64(p, actual=weights, expected=ref_weights, note=False,
                               what=f"{what}: attention_weights")
        except CheckFailed as e:
            return str(e)
    return None


@check("cost.flops", part="conventions", kind="instrument", group="cost", requires=WORKS, instruments=["trace"])
def cost_flops(p: Probe) -> None:
    """Forward's matrix-product FLOPs (as torch.utils.flop_counter counts them) do not exceed
    the reference's and do not grow with num_heads, and all its arithmetic (every operator,
    by elements) stays within 1.5x the reference's, its growth with num_heads within 2x the
    reference's (all heads together cost as much as
    one head of width d_total)."""
    _measured_graded(p)
    for name, student, ref in ev.flop_counts(p):
        over = [h for h in student if student[h] > ref[h] * (1 + ev.FLOP_SLACK)]
        spread = max(student.values()) > min(student.values()) * (1 + ev.FLOP_SLACK)
        if over or spread:
            raise CheckFailed(f"{ev.describe_trace(p, name)}: forward costs {_counts(student)} FLOPs "
                              f"for num_heads = {', '.join(student)}; the reference costs "
                              f"{_counts(ref)}. With p = d_total / num_heads, all heads together "
                              "must cost as much as one head of width d_total, whatever num_heads.")
    for name, student, ref in ev.work_counts(p):
        first = next(iter(student))
        over = [h for h in student if student[h] > ref[h] * (1 + ev.WORK_SLACK)
                or student[h] - student[first] > ev.GROWTH_SLACK * (ref[h] - ref[first])
                + ev.FLOP_SLACK * 5 * ref[first]]
        if over:
            raise CheckFailed(f"{ev.describe_trace(p, name)}: forward does {_counts(student)} "
                              f"elementary operations for num_heads = {', '.join(student)} "
                              f"(matrix products and all other arithmetic); the reference does "
                              f"{_counts(ref)}. Some of the work is done more than once (e.g. "
                              "every head computed over the full width, or a product written as "
                              "broadcast-and-sum over more elements than needed).")


@check("cost.parallel", part="conventions", kind="instrument", group="cost", requires=WORKS, instruments=["trace"])
def cost_parallel(p: Probe) -> None:
    """The heads run in parallel: the number of matmul/softmax kernels per forward does not grow
    with num_heads (no Python loop over heads), at the measured sizes and at every graded
    forward's (run again with num_heads 2 on the same inputs and weights)."""
    _measured_graded(p)
    for name, student, ref in ev.kernel_counts(p):
        heads = list(student)
        if student[heads[-1]] > student[heads[1]]:
            raise CheckFailed(f"{ev.describe_trace(p, name)}: forward dispatches {_counts(student)} "
                              f"matmul/softmax kernels for num_heads = {', '.join(heads)} (the "
                              f"reference: {_counts(ref)}). The count grows with num_heads, so the "
                              "heads are computed one at a time in a Python loop. Compute all "
                              "heads at once on the (batch, num_heads, n, p) layout: batched "
                              "matmuls such as Q @ K.transpose(-2, -1) and one softmax.")
    for what, heads, graded, rerun, _, _ in ev.two_head_reruns(p):
        if ev.kernels(graded) > ev.kernels(rerun):
            raise CheckFailed(f"{what}: forward dispatches {ev.kernels(graded)} matmul/softmax "
                              f"kernels with num_heads={heads} and {ev.kernels(rerun)} with "
                              f"num_heads={ev.RERUN_HEADS} on the same inputs and weights. The "
                              "count grows with num_heads, so the heads are computed one at a "
                              "time in a Python loop. Compute all heads at once on the (batch, "
                              "num_heads, n, p) layout: batched matmuls and one softmax.")


# --------------------------------------------------------------------------------------
# Device and precision (SPEC item 5)

@check("device.meta", part="conventions", kind="instrument", group="device", requires=WORKS, instruments=["device"])
def device_meta(p: Probe) -> None:
    """The module and the masked functions run wherever their inputs are: on the meta device
    (the CPU stand-in for a GPU) they create no CPU tensor and raise no device error."""
    for part, problem in evd.device_problems(p):
        raise CheckFailed(f"{part} works on the CPU but not with its inputs on another device "
                          f"(the meta device stands in for a GPU here): {problem}. A tensor is "
                          "created on a fixed (CPU) device: create helper tensors on the inputs' "
                          "device, e.g. torch.arange(n_k, device=scores.device).")


@check("device.sync", part="conventions", kind="instrument", group="device", requires=WORKS, instruments=["trace"])
def device_sync(p: Probe) -> None:
    """Forward and the masked functions force no host synchronisation (.item(), bool(tensor),
    boolean-mask indexing, ...): on a GPU each one stalls until the device is done. Every
    graded forward is measured."""
    _measured_graded(p)
    for part, ops in evd.host_syncs(p):
        raise CheckFailed(f"{part} reads tensor data on the host ({', '.join(ops)}), e.g. a "
                          "Python if/bool/int/float/.item() on a tensor's value; on a GPU every "
                          "such read waits for the device to finish. Keep the decision on the "
                          "device: apply masked_fill / torch.where to every row instead of "
                          "branching in Python.")


@check("precision.autocast", part="conventions", kind="instrument", group="device", requires=WORKS, instruments=["precision"])
def precision_autocast(p: Probe) -> None:
    """Under float16/bfloat16 autocast and casts, with masks that include length 0, forward and
    the masked functions stay finite wherever they are finite in float32, keep the inputs'
    dtype, and float64 inputs are computed in float64 (a float32 detour is charged here)."""
    failures = evd.precision_failures(p)
    if failures:
        lines = "; ".join(f"{part} under {mode}: {what}" for mode, part, what, _ in failures[:4])
        raise CheckFailed(f"finite in float32, but not in low precision: {lines}."
                          + _precision_hint({kind for *_, kind in failures}))
    dtypes = evd.dtype_failures(p)
    if dtypes:
        lines = "; ".join(f"{part} under {mode}: {evd.dtype_not_kept(got, wanted)}"
                          for mode, part, got, wanted in dtypes[:4])
        raise CheckFailed(f"the inputs' dtype is not kept: {lines}. Compute in the inputs' "
                          "dtype (no .float(), no dtype=torch.float32).")
    detours = p.evidence.float32_detour
    if detours:
        raise CheckFailed(f"float64 inputs give values right only to float32's precision "
                          f"({len(detours)} results, e.g. {detours[0]}): part of the computation "
                          "runs in float32. Compute in the inputs' dtype (no .float(), no "
                          "dtype=torch.float32). The value checks count these values as right; "
                          "this check charges the precision once.")


def _precision_hint(kinds: set) -> str:
    """What to change, for what the failures showed (the diagnoses read the same kinds)."""
    hints = []
    if "overflow" in kinds:
        hints.append(" A constant does not fit in the low-precision dtype (float16's largest is "
                     "65504, so -1e9 overflows; float32's minimum overflows bfloat16 as well): "
                     "fill with torch.finfo(scores.dtype).min instead.")
    if "dtype" in kinds:
        hints.append(" A tensor in float32 (torch.zeros or torch.tensor without dtype=, a "
                     "float32 constant) meets tensors in the inputs' dtype: create helper "
                     "tensors with dtype=scores.dtype.")
    return "".join(hints)


@check("device.cuda", part="conventions", kind="instrument", group="device", needs={"cuda"}, requires=WORKS,
       instruments=["device"])
def device_cuda(p: Probe) -> None:
    """On the GPU: values match the float64 reference, no sync under CUDA's sync debug mode,
    peak memory within a small factor of the reference's, finite under autocast."""
    student, ref, expected = evd.cuda_runs(p)
    if student.get("unavailable"):
        raise CheckFailed("the submission's process could not use the GPU (it reported "
                          "torch.cuda.is_available() == False); this check needs it")
    values = evd.expect_ran(student, "values", "forward on the GPU")
    if values.get("out_device") != p.device:
        raise CheckFailed(f"forward on the GPU returned a tensor on {values.get('out_device')}: "
                          "keep the output on the inputs' device")
    for key, label in (("out", "output"), ("weights", "attention_weights"),
                       ("masked_softmax", "masked_softmax"), ("attention_pool", "attention_pool")):
        expect_close(actual=evd.first(values.get(key)), expected=evd.first(expected[key]),
                     what=f"{label} on the GPU (float64)", rtol=1e-7, atol=1e-9)
    evd.expect_ran(student, "sync", "forward under torch.cuda.set_sync_debug_mode('error')")
    peak = evd.expect_ran(student, "memory", "the peak-memory run")["peak"]
    allowed = evd.MEMORY_FACTOR * ref["memory"]["value"]["peak"] + evd.MEMORY_SLACK
    if peak > allowed:
        raise CheckFailed(f"{evd.describe_memory()}: peak GPU memory {peak / 2**20:.1f} MiB, the "
                          f"reference's {ref['memory']['value']['peak'] / 2**20:.1f} MiB (allowed "
                          f"{allowed / 2**20:.1f} MiB). Something much larger than the (batch, "
                          "heads, n_q, n_k) scores is materialised, e.g. a (batch, heads, n_q, "
                          "n_k, p) broadcast product: use matmul (Q @ K.transpose(-2, -1)).")
    for mode in evd.CUDA_AUTOCAST:
        run = evd.expect_ran(student.get("autocast") or {}, mode, f"forward under {mode} on the GPU")
        if not run["finite"]:
            hint = ("; a constant overflowed to infinity (at aten::" + run["overflowed"][0]
                    + "): fill masks with torch.finfo(dtype).min") if run.get("overflowed") else ""
            raise CheckFailed(f"forward under {mode} on the GPU gives non-finite values (masks "
                              f"with length 0 included){hint}")
