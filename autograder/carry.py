"""Error carried forward, the follow-through convention of exam marking.

When a part P (split_heads, masked_softmax, ...) is wrong, every check of what is built on
P fails too, and P's one mistake is charged many times. So the checks that failed are graded
once more with the reference's P in place of the student's: in the sandbox, P becomes a
proxy (``probes.carried``) that asks the grader for the reference's answer to the student's
own call (and for its vector-Jacobian product in backward). The reference stays here; only
its answers to those calls cross the boundary. What passes then earns its points, with a
note saying so; P's mistake stays charged at P's checks. Rubric policy ``carry_forward``.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from .model import CheckResult, Status
from .sandbox.probes import CARRYABLE

MAX_ELEMENTS = 1 << 20       #: elements of one tensor argument the grader answers for
VALUE_CHECKS = (".values", ".masked")


def wrong_parts(results) -> set[str]:
    """The parts whose own value checks did not pass."""
    return {r.name.split(".")[0] for r in results
            if r.name.split(".")[0] in CARRYABLE and r.name.endswith(VALUE_CHECKS)
            and r.status is not Status.PASSED}


def parts_for(check_name: str, wrong: set[str]) -> set[str]:
    """What a check is graded with: every wrong part but the one it is about."""
    return wrong - {check_name.split(".")[0]}


def note(result: CheckResult, carried: set[str]) -> CheckResult:
    names = ", ".join(sorted(carried))
    return replace(result, feedback=(
        f"right given a correct {names}: this check lost nothing of its own, only through "
        f"{names} (whose own checks are charged for it; error carried forward)"))


def graded_given(result: CheckResult, carried: set[str]) -> CheckResult:
    """A check the wrong parts held back, graded with them answered by the reference: what it
    finds then is the check's own."""
    names = ", ".join(sorted(carried))
    return replace(result, feedback=f"graded with a correct {names} in place of yours: "
                   + result.feedback)


def answer(question, allowed: set[str]) -> dict:
    """The reference's answer to one call of a carried part, or why there is none."""
    try:
        fn, mode, args = _question(question, allowed)
        import solutions
        function = getattr(solutions, fn)
        if mode == "value":
            with torch.no_grad():
                return {"answer": function(*args)}
        return {"answer": _vjp(function, args, question.get("grads"))}
    except Exception as e:          # the student's arguments: the proxy raises it there
        return {"raised": f"{type(e).__name__}: {e}"[:300]}


def _question(question, allowed):
    if type(question) is not dict or question.get("fn") not in allowed \
            or question.get("mode") not in ("value", "vjp") \
            or type(question.get("args")) not in (list, tuple) or len(question["args"]) > 4:
        raise ValueError("not a question the grader answers")
    for a in question["args"]:
        if not (a is None or type(a) in (int, bool) or (
                type(a) is torch.Tensor and a.layout == torch.strided
                and a.device.type == "cpu" and a.numel() <= MAX_ELEMENTS)):
            raise ValueError("an argument that is not a plain CPU tensor, an int or None")
    return question["fn"], question["mode"], list(question["args"])


def _vjp(function, args, grads) -> list:
    """Gradients for each tensor argument (None where it has none) of function(*args)
    against the output gradients ``grads``."""
    inputs = [a.detach().clone().requires_grad_() if type(a) is torch.Tensor
              and a.is_floating_point() else a for a in args]
    out = function(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    if type(grads) not in (list, tuple) or len(grads) != len(outs):
        raise ValueError("output gradients that do not match the outputs")
    pairs = [(o, g.to(o.dtype)) for o, g in zip(outs, grads)
             if type(g) is torch.Tensor and g.shape == o.shape and o.requires_grad]
    wanted = [a for a in inputs if type(a) is torch.Tensor and a.requires_grad]
    got = iter(torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs],
                                   allow_unused=True) if pairs and wanted else [None] * len(wanted))
    return [next(got) if a.requires_grad else None
            for a in inputs if type(a) is torch.Tensor]
