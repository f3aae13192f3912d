"""The data behind the device and precision checks and diagnoses (SPEC item 5), gathered
once per submission like those of ``evidence``: the meta device as the CPU stand-in for a
GPU, op traces for host syncs, low precision on the CPU, and the GPU run where there is one.
"""
from __future__ import annotations

import re

import torch

from ..compare import CheckFailed
from .evidence import graded_costs, once, traces
from .module import Config, inputs

SMALL = {"init": {"d_model": 8, "num_heads": 2}, "shapes": {"batch": 3, "n_q": 3, "n_k": 5}}
MODES = ("cast-float32", "autocast-float16", "autocast-bfloat16", "cast-float16", "cast-bfloat16")
SYNC_ERRORS = re.compile(r"item\(\) cannot|copy out of meta|no data|without output_size|"
                         r"data-independent|to numpy|aten::(nonzero|masked_select|equal|allclose|"
                         r"_local_scalar_dense|is_nonzero)", re.I)
CUDA_CONFIG = Config("cuda", 12, 3, bias=True, batch=3, n_q=4, n_k=5)
MEMORY = {"init": {"d_model": 256, "num_heads": 8}, "shapes": {"batch": 2, "n_q": 256, "n_k": 256}}
MEMORY_FACTOR, MEMORY_SLACK = 3.0, 8 << 20
CUDA_AUTOCAST = ("autocast-float16", "autocast-bfloat16")


def small(p) -> dict:
    """SMALL with sizes and seeds drawn from the run's seed (the same for both sides): the
    device and precision runs look like graded forwards, not like a fixed probe."""
    def make():
        gen = p.generator("device")
        pick = lambda n: int(torch.randint(n, (1,), generator=gen))  # noqa: E731
        shapes = {"batch": 2 + pick(2), "n_q": 3 + pick(2), "n_k": 4 + pick(3),
                  "seed": pick(2**31)}
        return dict(SMALL, shapes=shapes)
    return once(p, "device-sizes", make)


def meta_runs(p) -> dict:
    def make():
        p.student.require("MultiHeadAttention")
        return p.student.probe("on_device", "device", spec=dict(small(p), device="meta"))
    return once(p, "meta", make)


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
    for _, _, cost, _ in graded_costs(p):           # every graded forward is measured too
        found.setdefault("forward", []).extend(f"aten::{op}" for op in cost["sync"])
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
        return target.probe("low_precision", "device", spec=dict(small(p), modes=list(MODES)))
    return once(p, ("precision", side), make)


#: The exception of a constant that does not fit the dtype (torch converts a Python number
#: to the tensor's dtype and refuses to overflow).
OVERFLOW = re.compile(r"cannot be converted to type \S+ without overflow", re.I)
#: The exceptions of two dtypes meeting where one is needed (a float32 tensor meeting float16).
DTYPE_MISMATCH = re.compile(r"expected scalar type|same dtype|dtypes? must (be|match)|"
                            r"result type \w+ can't be cast|expected both|"
                            r"expected \w+ and \w+ to have the same dtype|dtypes? match", re.I)


def failure_kind(result: dict, base: dict) -> str:
    """What a failed low-precision run shows: "overflow" (the overflow exception, or an
    infinity made from finite operands, or a constant that arrived infinite where the
    float32 run ``base`` had none), "dtype" (a dtype mismatch), "non-finite" (inf or NaN
    with no overflow seen) or "error" (any other exception)."""
    if "raised" in result:
        message = result["raised"].get("message", "")
        return "overflow" if OVERFLOW.search(message) else \
            "dtype" if DTYPE_MISMATCH.search(message) else "error"
    if "bad" in result:
        return "error"
    return "overflow" if overflowed(result, base) else "non-finite"


def overflowed(result: dict, base: dict) -> list[str]:
    """The operators where a run made an infinity of finite values (a constant lifted
    infinite counts where the float32 run lifted none: there it is an infinite literal)."""
    made = list(result.get("value", {}).get("overflowed") or ())
    if any(op in LIFTS for op in base.get("value", {}).get("overflowed") or ()):
        made = [op for op in made if op not in LIFTS]
    return made


LIFTS = ("lift_fresh", "lift", "lift_fresh_copy")


def precision_failures(p) -> list[tuple[str, str, str, str]]:
    """(mode, part, what, kind) where the student is not finite (or raises) in low precision
    while its float32 run and the reference's run in that mode are finite; kind as
    ``failure_kind`` says."""
    student, ref = low_precision(p, "student"), low_precision(p, "reference")
    found = []
    for mode in MODES[1:]:
        for part, result in student[mode].items():
            base, wanted = student[MODES[0]][part], ref[mode][part]
            if not (base.get("value", {}).get("finite") and wanted.get("value", {}).get("finite")):
                continue
            if "raised" in result:
                at = result["raised"].get("at")
                found.append((mode, part, f"raised {result['raised']['type']}"
                              + (f" at aten::{at}" if at else "")
                              + f": {result['raised']['message'][:160]}",
                              failure_kind(result, base)))
            elif "bad" in result:
                found.append((mode, part, result["bad"][:160], "error"))
            elif not result["value"]["finite"]:
                made = overflowed(result, base)
                found.append((mode, part, "non-finite values (inf or NaN)" + (
                    f", a constant overflowed to infinity at aten::{made[0]}" if made else ""),
                    failure_kind(result, base)))
    return found


def dtype_failures(p) -> list[tuple[str, str, str, str]]:
    """(mode, part, dtype returned, dtype expected) where the student's result has another
    dtype than the reference's: with inputs cast to float16, bfloat16 or float32 every
    function keeps their dtype (under autocast, whatever autocast gives the reference)."""
    student, ref = low_precision(p, "student"), low_precision(p, "reference")
    found = []
    for mode in MODES:
        for part, result in student[mode].items():
            got, wanted = result.get("value", {}), ref[mode][part].get("value", {})
            if got and wanted and got.get("dtype") not in kept_dtypes(mode, wanted.get("dtype")):
                found.append((mode, part, str(got.get("dtype")), str(wanted.get("dtype"))))
    return found


def kept_dtypes(mode: str, reference: str) -> set:
    """The dtypes that keep the inputs' dtype in a mode: the reference's; under autocast
    also the inputs' own (float32 there), since code that computes in another dtype and
    casts back to its inputs' keeps theirs where autocast would have lowered it."""
    return {reference, "float32"} if mode.startswith("autocast-") else {reference}


def dtype_not_kept(got: str, wanted: str) -> str:
    return f"returns {got} where the inputs' dtype gives {wanted}"


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
    return once(p, "cuda", make)


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
