"""Checks of the API's functions: shape rules and values (SPEC, "What the autograder
holds a submission to", items 1 and 2)."""
from __future__ import annotations

import torch

from ..compare import Blocked, CheckFailed, expect_close, expect_equal_values, expect_masked_zero
from ..sandbox.host import StudentError
from . import Probe, cases, check

F64 = dict(rtol=1e-9, atol=1e-11)     # float64: a float32 detour (about 1e-8) fails
F32 = dict(rtol=1e-4, atol=1e-6)      # float32's precision: right, but computed in float32


def expect_float64(p: Probe, *, actual, expected, what: str, note: bool = True,
                   **tol) -> None:
    """Close to the reference in float64. Values right only to float32's precision (part of
    the computation done in float32) count as right here and are noted (``note``: a value
    check's answer): the precision check charges that once, instead of every value check."""
    try:
        expect_close(actual=actual, expected=expected, what=what, **(tol or F64))
    except CheckFailed:
        if not _float32_close(actual, expected):
            raise
        if note:
            p.evidence.float32_detour.append(what)


def _float32_close(actual, expected) -> bool:
    if type(actual) is not torch.Tensor or type(expected) is not torch.Tensor \
            or expected.dtype != torch.float64 or actual.dtype != torch.float64:
        return False               # a float32 result is a dtype not kept: a visible mistake
    try:
        expect_close(actual=actual, expected=expected, what="", dtype=False, **F32)
    except CheckFailed:
        return False
    return True


def compare_cases(p: Probe, fn: str, group: str, case_list, *, pick=None, **tol) -> None:
    """Call fn on every case on both sides; the first difference fails the check.

    Every case runs even after a failure, so that diagnoses see the whole pattern.
    """
    first = None
    case_list = list(case_list)
    p.student.ahead(fn, [case.args for case in case_list], group=group)   # all of them run
    for case in case_list:
        try:
            _compare_case(p, fn, group, case, pick, tol)
        except (CheckFailed, StudentError) as e:
            if isinstance(e, StudentError) and "timed out" in str(e):
                raise
            first = first or e
    if first is not None:
        raise first


def _compare_case(p: Probe, fn, group, case, pick, tol) -> None:
    what = f"{fn} on {case.describe}"
    expected = p.reference.call(fn, *case.args, group=group)
    try:
        result = p.student.attempt(fn, *case.args, group=group)
    except StudentError as e:
        raise StudentError(f"{what}: {e}", raised=e.raised) from None
    p.evidence.calls.setdefault(fn, []).append((case, result, expected))
    if "raised" in result:
        info = result["raised"]
        raise StudentError(f"{what} raised {info.get('type')}: {info.get('message')}", raised=info)
    actual = result["value"]
    if pick is not None:
        actual, expected = pick(actual, what), pick(expected, what)
    for a, e, label in _pairs(actual, expected, what):
        expect_float64(p, actual=a, expected=e, what=label, **(tol or F64))
    if fn in MASKED_WEIGHTS and len(case.args) == MASKED_WEIGHTS[fn][0]:
        weights = actual if MASKED_WEIGHTS[fn][1] is None else actual[MASKED_WEIGHTS[fn][1]]
        expect_masked_zero(weights, case.args[-1], what=what)


#: function -> (its argument count with valid_lens, which of its answers holds the weights)
MASKED_WEIGHTS = {"masked_softmax": (2, None), "attention_pool": (4, 1)}


def _pairs(actual, expected, what):
    if isinstance(expected, tuple):
        if not isinstance(actual, tuple) or len(actual) != len(expected):
            raise CheckFailed(f"{what} returned {type(actual).__name__}, expected a tuple of "
                              f"{len(expected)} tensors (output, weights)")
        names = ("output", "weights")
        return [(a, e, f"{what}, {names[i] if i < 2 else i}")
                for i, (a, e) in enumerate(zip(actual, expected))]
    return [(actual, expected, what)]


def expect_it_works(p: Probe, fn: str, group: str, args: tuple, describe: str) -> None:
    """The gate of a raises check: the function returns on a valid input (right or not), so
    its ValueError on an invalid one means something; a stub that always raises earns nothing."""
    result = p.student.attempt(fn, *args, group=group)
    if "raised" in result:
        info = result["raised"]
        raise Blocked(f"not graded: {fn}({describe}) raised {info.get('type')} too, on an "
                      "input that is fine, so raising proves nothing yet", by=[f"{fn}.values"])


def expect_value_error(p: Probe, fn: str, group: str, args: tuple, describe: str) -> None:
    result = p.student.attempt(fn, *args, group=group)
    if "raised" not in result:
        p.evidence.no_valueerror.append((fn, None))
        raise CheckFailed(f"{fn}({describe}) returned normally; it must raise ValueError "
                          "(the head count does not divide the width)")
    info = result["raised"]
    if not info.get("value_error"):
        p.evidence.no_valueerror.append((fn, info.get("type")))
        hint = (" An assert is no validation: it raises AssertionError, and nothing at all "
                "under python -O." if info.get("type") == "AssertionError" else "")
        raise CheckFailed(f"{fn}({describe}) raised {info.get('type')}, expected ValueError.{hint}")


# --------------------------------------------------------------------------------------
# Shape rules

HEAD_WEIGHT_CASES = [(8, 8, 2), (8, 8, 1), (8, 8, 8), (6, 12, 4), (10, 6, 3), (5, 20, 5), (1, 1, 1)]


@check("head_weight_shape.values", part="head_weight_shape", kind="values", group="shape", hidden=False)
def head_weight_shape_values(p: Probe) -> None:
    """head_weight_shape(d, d_total, M) is (d, d_total / M): the shape rule."""
    for d, d_total, h in HEAD_WEIGHT_CASES:
        actual = p.student.call("head_weight_shape", d, d_total, h, group="shape")
        expected = p.reference.call("head_weight_shape", d, d_total, h, group="shape")
        p.evidence.head_weight_shape.append(((d, d_total, h), actual))
        if isinstance(actual, list):
            actual = tuple(actual)
        expect_equal_values(actual=actual, expected=expected,
                            what=f"head_weight_shape(d={d}, d_total={d_total}, num_heads={h})")


@check("head_weight_shape.raises", part="head_weight_shape", kind="raises", group="shape", hidden=False, instruments=["exception"])
def head_weight_shape_raises(p: Probe) -> None:
    """Impossible head counts raise ValueError, not an assert (graded once the function returns
    for a possible one, right or not)."""
    expect_it_works(p, "head_weight_shape", "shape", (8, 8, 2), "d=8, d_total=8, num_heads=2")
    for args in [(8, 10, 3), (8, 8, 0), (0, 8, 2), (8, 6, 4)]:
        expect_value_error(p, "head_weight_shape", "shape", args,
                           "d={}, d_total={}, num_heads={}".format(*args))


# --------------------------------------------------------------------------------------
# Projections, split and concat

@check("project.values", part="project", kind="values", group="project", hidden=False)
def project_values(p: Probe) -> None:
    """project(H, W) = H @ W for any leading axes (the row-vector convention)."""
    compare_cases(p, "project", "project", cases.project_cases(p.generator("project")))


@check("project_heads.values", part="project_heads", kind="values", group="project", hidden=False)
def project_heads_values(p: Probe) -> None:
    """project_heads gives (batch, heads, n, p), head j from W_heads[j] only."""
    compare_cases(p, "project_heads", "project",
                  cases.project_heads_cases(p.generator("project_heads")))


@check("split_heads.values", part="split_heads", kind="values", group="split", hidden=False)
def split_heads_values(p: Probe) -> None:
    """split_heads gives (batch, heads, n, p), head j owning columns [j*p, (j+1)*p)."""
    compare_cases(p, "split_heads", "split", cases.split_cases(p.generator("split")))


@check("split_heads.raises", part="split_heads", kind="raises", group="split", hidden=False, instruments=["exception"])
def split_heads_raises(p: Probe) -> None:
    """split_heads raises ValueError when the width is not divisible by num_heads (graded once
    it returns for a divisible width, right or not)."""
    works = cases.randn(p.generator("split.works"), 2, 3, 12)
    expect_it_works(p, "split_heads", "split", (works, 3), "X (2, 3, 12), num_heads=3")
    X = cases.randn(p.generator("split.raises"), 2, 3, 10)
    expect_value_error(p, "split_heads", "split", (X, 3), "X (2, 3, 10), num_heads=3")


@check("concat_heads.values", part="concat_heads", kind="values", group="concat", hidden=False)
def concat_heads_values(p: Probe) -> None:
    """concat_heads is the inverse of split_heads: (batch, heads, n, p) -> (batch, n, heads*p)."""
    compare_cases(p, "concat_heads", "concat", cases.concat_cases(p.generator("concat")))


# --------------------------------------------------------------------------------------
# Softmax and pooling

@check("masked_softmax.values", part="masked_softmax", kind="values", group="softmax", hidden=False)
def masked_softmax_values(p: Probe) -> None:
    """masked_softmax without valid_lens is the softmax over the last (key) axis."""
    compare_cases(p, "masked_softmax", "softmax",
                  cases.softmax_cases(p.generator("softmax"), masked=False))


@check("masked_softmax.masked", part="masked_softmax", kind="values", group="softmax", hidden=False)
def masked_softmax_masked(p: Probe) -> None:
    """Keys at positions >= valid length get weight 0; length 0 gives zeros, never NaN."""
    compare_cases(p, "masked_softmax", "softmax",
                  cases.softmax_cases(p.generator("softmax.masked"), masked=True))


@check("attention_pool.values", part="attention_pool", kind="values", group="pool", hidden=False)
def attention_pool_values(p: Probe) -> None:
    """attention_pool returns (softmax(Q Kᵀ / sqrt(p)) V, weights) for 3-D and 4-D inputs."""
    compare_cases(p, "attention_pool", "pool", cases.pool_cases(p.generator("pool"), masked=False))


@check("attention_pool.masked", part="attention_pool", kind="values", group="pool", hidden=False)
def attention_pool_masked(p: Probe) -> None:
    """attention_pool honours valid_lens, broadcast over the head axis."""
    compare_cases(p, "attention_pool", "pool", cases.pool_cases(p.generator("pool.masked"), masked=True))


@check("functions.pure", part="conventions", kind="instrument", group="api", instruments=["mutation"])
def functions_pure(p: Probe) -> None:
    """No function writes into its input tensors; counts once a function gives right values
    (garbage that leaves its inputs alone earns nothing), whatever is wrong in the others."""
    calls = p.evidence.calls
    if not any(_right(records) for fn, records in calls.items() if fn in PURE):
        raise Blocked("not graded until one of " + ", ".join(PURE) + " gives right values: "
                      "leaving the inputs alone counts for a function that works",
                      by=[f"{fn}.values" for fn in PURE])
    for fn, records in [r for e in p.evidence.both() for r in e.calls.items()]:
        # a redo only adds failures
        for case, result, _ in records:
            if result.get("mutated"):
                raise CheckFailed(f"{fn} changed its input tensor(s) in place on "
                                  f"{case.describe}; work on a copy "
                                  "(masked_fill, not masked_fill_ or X[mask] = value)")


PURE = ("split_heads", "concat_heads", "masked_softmax", "attention_pool")


def _right(records) -> bool:
    """Whether every call recorded for a function gave the reference's values."""
    try:
        for _, result, expected in records:
            if "value" not in result:
                return False
            for a, e, label in _pairs(result["value"], expected, "the call"):
                expect_close(actual=a, expected=e, what=label, **F64)
    except CheckFailed:
        return False
    return bool(records)
