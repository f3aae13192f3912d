"""Comparisons that raise ``CheckFailed`` with feedback saying what, where and by how much.

Feedback names the function, the case and the shapes, and describes the difference
(count, largest error and where), but never prints a hidden expected tensor.
"""
from __future__ import annotations

import math

import torch


class CheckFailed(Exception):
    """The submission answered, and the answer is wrong; the message is the feedback."""


class SkipCheck(Exception):
    """The grader cannot run this check here (e.g. no CUDA); decided by the grader only."""


def shape_of(value) -> str:
    if isinstance(value, torch.Tensor):
        return str(tuple(value.shape))
    return type(value).__name__


def expect_tensor(actual, *, what: str) -> torch.Tensor:
    if type(actual) is not torch.Tensor:
        raise CheckFailed(f"{what} returned {type(actual).__name__}, expected a torch.Tensor")
    return actual


def expect_shape(actual, *, expected: tuple, what: str) -> None:
    expect_tensor(actual, what=what)
    if tuple(actual.shape) != tuple(expected):
        raise CheckFailed(f"{what} returned shape {tuple(actual.shape)}, expected "
                          f"{tuple(expected)}")


def expect_close(*, actual, expected: torch.Tensor, what: str, rtol: float = 1e-7,
                 atol: float = 1e-10, dtype: bool = True) -> None:
    """Shape, then dtype, then NaN pattern, then values (float64 comparison)."""
    expect_shape(actual, expected=tuple(expected.shape), what=what)
    if dtype and actual.dtype != expected.dtype:
        raise CheckFailed(f"{what} returned dtype {actual.dtype}, expected {expected.dtype} "
                          "(keep the inputs' dtype)")
    a, e = actual.to(torch.float64), expected.to(torch.float64)
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


def expect_equal_values(*, actual, expected, what: str) -> None:
    if actual != expected:
        raise CheckFailed(f"{what} returned {actual!r}, expected {expected!r}")


def _index(mask: torch.Tensor, shape) -> tuple:
    return _unravel(int(mask.reshape(-1).nonzero()[0]), shape)


def _unravel(flat: int, shape) -> tuple:
    index = []
    for size in reversed(tuple(shape)):
        index.append(flat % size if size else 0)
        flat //= size if size else 1
    return tuple(reversed(index))
