"""Comparisons that raise ``CheckFailed`` with feedback saying what, where and by how much.

Feedback names the function, the case and the shapes, and describes the difference
(count, largest error and where), but never prints a hidden expected tensor.

Every helper is total on what a submission can return: ``actual`` may be anything that
crosses the sandbox boundary (a tuple holding a tensor, a meta, sparse, complex or bool
tensor, NaN, a huge int, a string, None), and the only exception a helper raises on it is
``CheckFailed``. ``expected`` is the reference's and is trusted.
"""
from __future__ import annotations

import math

import torch

from .sandbox.results import describe


class CheckFailed(Exception):
    """The submission answered, and the answer is wrong; the message is the feedback."""


class Blocked(CheckFailed):
    """Not graded yet: what the check is about does not work, so it can prove nothing. Scores
    like a failure, but the report shows it held back, by what (``by``: checks, by name)."""

    def __init__(self, message: str, *, by):
        super().__init__(message)
        self.by = tuple(by)


class SkipCheck(Exception):
    """The grader cannot run this check here (e.g. no CUDA); decided by the grader only."""


def shape_of(value) -> str:
    if isinstance(value, torch.Tensor):
        return str(tuple(value.shape))
    return type(value).__name__


def expect_tensor(actual, *, what: str) -> torch.Tensor:
    """A plain, dense CPU tensor with values: the only kind a comparison below reads."""
    if type(actual) is not torch.Tensor:
        raise CheckFailed(f"{what} returned {describe(actual)}, expected a torch.Tensor")
    if actual.layout is not torch.strided:
        raise CheckFailed(f"{what} returned {describe(actual)}, expected a dense tensor "
                          "(call .to_dense())")
    if actual.device.type != "cpu":
        raise CheckFailed(f"{what} returned {describe(actual)}, expected a tensor with values "
                          "on the CPU")
    return actual


def expect_shape(actual, *, expected: tuple, what: str) -> None:
    expect_tensor(actual, what=what)
    if tuple(actual.shape) != tuple(expected):
        raise CheckFailed(f"{what} returned shape {tuple(actual.shape)}, expected "
                          f"{tuple(expected)}")


def within(a: torch.Tensor, e: torch.Tensor, *, rtol: float, atol: float) -> bool | None:
    """Whether |a - e| <= atol + rtol·|e| everywhere (torch.isclose's rule; two tensors of one
    shape and floating dtype), in one reduction instead of isclose's many operators: True or
    False, or None where a NaN or an infinity makes one subtraction undecided (the caller
    rules on those). Exact, not a float approximation of the rule: for finite x and y,
    x - y <= 0 exactly when x <= y."""
    if a.numel() == 0:
        return True
    worst = float(torch.sub(a, e).abs_().sub_(torch.mul(e, rtol).abs_().add_(atol)).max())
    return True if worst <= 0 else False if worst > 0 else None


def expect_close(*, actual, expected: torch.Tensor, what: str, rtol: float = 1e-7,
                 atol: float = 1e-10, dtype: bool = True) -> None:
    """Shape, then dtype, then NaN pattern, then values (float64 comparison)."""
    expect_shape(actual, expected=tuple(expected.shape), what=what)
    if (dtype and actual.dtype != expected.dtype) or \
            (actual.dtype.is_complex and not expected.dtype.is_complex):
        raise CheckFailed(f"{what} returned dtype {actual.dtype}, expected {expected.dtype} "
                          "(keep the inputs' dtype)")
    a, e = actual.to(torch.float64), expected.to(torch.float64)
    if within(a, e, rtol=rtol, atol=atol):
        return         # the common case in one pass: every value finite and within the tolerance
    nan = torch.isnan(a) & ~torch.isnan(e)
    if nan.any():
        raise CheckFailed(f"{what}: {int(nan.sum())} of {a.numel()} values are NaN, first at "
                          f"index {_index(nan, a.shape)}")
    diff = (a - e).abs()
    bad = ~(diff <= atol + rtol * e.abs()) & ~(torch.isnan(e) & torch.isnan(a))
    if bad.any():
        worst = torch.where(bad, diff.nan_to_num(math.inf), torch.zeros_like(diff))
        flat = int(worst.reshape(-1).argmax())
        raise CheckFailed(
            f"{what}: {int(bad.sum())} of {a.numel()} values differ from the reference; greatest "
            f"absolute difference {float(diff.reshape(-1)[flat]):.3g} at index "
            f"{_unravel(flat, a.shape)} (tolerance {atol:g} + {rtol:g}·|expected|)")


def expect_masked_zero(weights, valid_lens, *, what: str) -> None:
    """The contract's exactness: keys at positions >= the valid length get weight exactly
    0 (not 1e-27, what a finite fill such as -60 leaves). ``valid_lens`` of shape (batch,)
    or (batch, n_q), as the contract lays them along the scores."""
    if not isinstance(weights, torch.Tensor) or not isinstance(valid_lens, torch.Tensor) \
            or weights.dim() < 2 or valid_lens.dim() not in (1, 2):
        return                             # a form the value comparison has judged already
    n_q, n_k = weights.shape[-2:]
    lens = valid_lens.to(torch.int64)
    if lens.dim() == 1:
        lens = lens.reshape(-1, *(1,) * (weights.dim() - 1))
    elif lens.shape[-1] == n_q:
        lens = lens.reshape(-1, *(1,) * (weights.dim() - 3), n_q, 1)
    else:
        return
    try:
        masked = torch.arange(n_k) >= lens
        off = masked & (weights.detach().to(torch.float64) != 0)
    except RuntimeError:
        return                             # shapes the value comparison has judged already
    if off.any():
        largest = float(weights.detach().to(torch.float64).abs()[off].max())
        raise CheckFailed(f"{what}: {int(off.sum())} weights of masked keys are not exactly 0 "
                          f"(largest {largest:.3g}, first at index {_index(off, off.shape)}); the "
                          "contract wants exactly 0: fill with the dtype's lowest value "
                          "(torch.finfo(scores.dtype).min) or zero the masked weights after the "
                          "softmax")


def expect_equal_values(*, actual, expected, what: str) -> None:
    """Plain values (sizes, numbers, strings, tuples of them) compared by ``==`` where both
    sides are plain; a tensor, or a container of another length, is simply different."""
    if not same_values(actual, expected):
        raise CheckFailed(f"{what} returned {describe(actual)}, expected {describe(expected)}")


def same_values(actual, expected) -> bool:
    """Whether ``actual`` equals ``expected``, never raising: tensors must match in shape,
    dtype and every value, sequences item by item, plain values by ``==``."""
    if type(expected) in (tuple, list):
        return (type(actual) in (tuple, list) and len(actual) == len(expected)
                and all(same_values(a, e) for a, e in zip(actual, expected)))
    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        return (type(actual) is torch.Tensor and type(expected) is torch.Tensor
                and actual.layout is torch.strided and actual.device == expected.device
                and actual.shape == expected.shape and actual.dtype == expected.dtype
                and bool(torch.equal(actual, expected)))
    if type(actual) not in _PLAIN or type(expected) not in _PLAIN:
        return False
    if type(expected) in (bool, int, str, type(None)) and type(actual) is not type(expected):
        return False                       # typed: 3.0 is not 3, True is not 1
    if type(expected) is float and type(actual) is bool:
        return False
    return (actual == expected) is True


_PLAIN = (type(None), bool, int, float, str)


def _index(mask: torch.Tensor, shape) -> tuple:
    return _unravel(int(mask.reshape(-1).nonzero()[0]), shape)


def _unravel(flat: int, shape) -> tuple:
    index = []
    for size in reversed(tuple(shape)):
        index.append(flat % size if size else 0)
        flat //= size if size else 1
    return tuple(reversed(index))
