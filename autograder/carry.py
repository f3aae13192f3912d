"""Error carried forward, the follow-through convention of exam marking.

When a part P (split_heads, masked_softmax, ...) is wrong, every check of what is built on
P fails too, and P's one mistake is charged many times. So the checks that failed are graded
once more with the reference's P in place of the student's: in the sandbox, P becomes a
proxy (``probes.carried``) that asks the grader for the reference's answer to the student's
own call (and for its vector-Jacobian product in backward). The reference stays here; only
its answers to those calls cross the boundary. What passes then earns its points, with a
note saying so; P's mistake stays charged at P's checks. Rubric policy ``carry_forward``.

Only along the contract's dependency graph (``parts.BUILT_ON``): a check is graded again
with the wrong parts *its own part* is built on answered, never a part's own checks with
another part answered (two wrong parts would pass as each other's proxy), and never a
measurement of the running code (``kind == "instrument"``: cost, device, precision, purity,
built-ins: work done inside a proxy is not the student's). A proxy answers only the calls
the contract allows for its part (``contract_call``), and an answer's size is known, and
bounded, before anything is computed.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from .model import CheckResult, Status
from .parts import BUILT_ON
from .sandbox.probes import CARRYABLE

MAX_ELEMENTS = 1 << 20       #: elements of one tensor argument or answer the grader computes


def wrong_parts(results, checks: dict) -> set[str]:
    """The carryable parts whose own value checks did not pass."""
    return {checks[r.name].part for r in results if r.name in checks
            and checks[r.name].kind == "values" and checks[r.name].part in CARRYABLE
            and r.status is not Status.PASSED}


def parts_for(check, wrong: set[str]) -> set[str]:
    """What a check is graded again with: the wrong parts its own part is built on."""
    if check.kind == "instrument":
        return set()
    return set(BUILT_ON.get(check.part, ())) & wrong


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


def released(result: CheckResult, blockers) -> CheckResult:
    """A measurement held back by checks that pass given correct parts: graded on the
    student's own code, as it runs."""
    if result.status is Status.PASSED:
        return result
    names = ", ".join(sorted(blockers))
    return replace(result, feedback=f"graded once {names} passed given correct parts "
                   "(error carried forward): " + result.feedback)


def answer(question, allowed: set[str]) -> dict:
    """The reference's answer to one call of a carried part, or why there is none."""
    try:
        fn, mode, args = _question(question, allowed)
        import solutions
        function = getattr(solutions, fn)
        if mode == "value":
            from .sandbox.probes import OpTrace
            trace = OpTrace("cpu")
            with torch.no_grad(), trace:         # what the answer cost: counted in the student's
                value = function(*args)          # trace as if the student had done it
            return {"answer": value, "cost": {"ops": dict(trace.counts), "flops": trace.flops,
                                              "work": trace.work}}
        return {"answer": _vjp(function, args, question.get("grads"))}
    except Exception as e:          # the student's arguments: the proxy raises it there
        return {"raised": f"{type(e).__name__}: {e}"[:300]}


def _question(question, allowed):
    if type(question) is not dict or question.get("fn") not in allowed \
            or question.get("mode") not in ("value", "vjp") \
            or type(question.get("args")) not in (list, tuple) or len(question["args"]) > 4:
        raise ValueError("not a question the grader answers")
    for a in question["args"]:
        if not (a is None or type(a) is int or (
                type(a) is torch.Tensor and a.layout == torch.strided
                and a.device.type == "cpu" and a.numel() <= MAX_ELEMENTS)):
            raise ValueError("an argument that is not a plain CPU tensor, an int or None")
    contract_call(question["fn"], list(question["args"]))
    return question["fn"], question["mode"], list(question["args"])


def contract_call(fn: str, args: list) -> int:
    """The number of elements the answer to ``fn(*args)`` has, for a call of the shapes the
    contract allows for that part; ValueError (what is wrong with the call) otherwise."""
    tensors = [a for a in args if type(a) is torch.Tensor]
    if any(not (t.is_floating_point()) for t in tensors[:_floating[fn]]):
        raise ValueError(f"{fn} takes floating-point tensors")
    size = _CALLS[fn](*args)
    if size > MAX_ELEMENTS:
        raise ValueError(f"an answer of {size} elements is more than the grader computes "
                         f"for one call ({MAX_ELEMENTS})")
    return size


def _lens(valid_lens, batch: int, n_q: int) -> None:
    if valid_lens is None:
        return
    if type(valid_lens) is not torch.Tensor or valid_lens.is_floating_point() \
            or valid_lens.dtype is torch.bool or tuple(valid_lens.shape) not in (
                (batch,), (batch, n_q)):
        raise ValueError("valid_lens is an integer tensor of shape (batch,) or (batch, n_q)")


def _project(H, W, *rest):
    if rest or H.dim() < 2 or W.dim() != 2 or H.shape[-1] != W.shape[0]:
        raise ValueError("project takes H (..., n, d) and W (d, p)")
    return H.numel() // H.shape[-1] * W.shape[1]


def _project_heads(H, W, *rest):
    if rest or H.dim() != 3 or W.dim() != 3 or H.shape[-1] != W.shape[1]:
        raise ValueError("project_heads takes H (batch, n, d) and W_heads (heads, d, p)")
    return H.shape[0] * W.shape[0] * H.shape[1] * W.shape[2]


def _split(X, num_heads=None, *rest):
    if rest or type(X) is not torch.Tensor or X.dim() != 3 or type(num_heads) is not int \
            or num_heads < 1:
        raise ValueError("split_heads takes X (batch, n, num_heads*p) and an int num_heads")
    return X.numel()


def _concat(X, *rest):
    if rest or X.dim() != 4:
        raise ValueError("concat_heads takes X (batch, num_heads, n, p)")
    return X.numel()


def _softmax(scores, valid_lens=None, *rest):
    if rest or scores.dim() < 2:
        raise ValueError("masked_softmax takes scores (..., n_q, n_k) and valid_lens")
    _lens(valid_lens, scores.shape[0], scores.shape[-2])
    return scores.numel()


def _pool(Q, K, V, valid_lens=None, *rest):
    if rest or not all(type(t) is torch.Tensor for t in (Q, K, V)) or Q.dim() < 2 \
            or not (Q.dim() == K.dim() == V.dim()) or Q.shape[:-2] != K.shape[:-2] \
            or K.shape[:-2] != V.shape[:-2] or Q.shape[-1] != K.shape[-1] \
            or K.shape[-2] != V.shape[-2]:
        raise ValueError("attention_pool takes Q (..., n_q, p), K (..., n_k, p) and "
                         "V (..., n_k, p_v) with the same leading axes")
    _lens(valid_lens, Q.shape[0], Q.shape[-2])
    lead = Q.numel() // (Q.shape[-2] * Q.shape[-1]) if Q.numel() else 0
    return lead * Q.shape[-2] * (V.shape[-1] + K.shape[-2])


_CALLS = {"project": _project, "project_heads": _project_heads, "split_heads": _split,
          "concat_heads": _concat, "masked_softmax": _softmax, "attention_pool": _pool}
#: how many leading arguments of each part are floating-point tensors
_floating = {"project": 2, "project_heads": 2, "split_heads": 1, "concat_heads": 1,
             "masked_softmax": 1, "attention_pool": 3}


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
