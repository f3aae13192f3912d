"""Error carried forward, the follow-through convention of exam marking.

When a part P (split_heads, masked_softmax, ...) is wrong, every check of what is built on
P fails too, and P's one mistake is charged many times. So the checks that failed are graded
once more with the reference's P in place of the student's: in the sandbox, P becomes a
proxy (``probes.carried``) that asks the grader for the reference's answer to the student's
own call (and for its vector-Jacobian product in backward). The grader checks the question
(``_question``: a call the contract allows, its answer's size bounded, nothing computed)
and relays it to the reference's own sandbox (``Answers``): a process forked from the same
zygote with a submission's limits (memory, CPU time, no network, the jail), running the
reference's source as a submission's sandbox runs the submission. No answer is computed in
the grader's process, which a whole batch shares; only the reference's answers to those
calls reach the student's sandbox. What passes then earns its points, with a note saying
so; P's mistake stays charged at P's checks. Rubric policy ``carry_forward``.

Only along the contract's dependency graph (``parts.BUILT_ON``): a check is graded again
with the wrong parts *its own part* is built on answered, never a part's own checks with
another part answered (two wrong parts would pass as each other's proxy), and never a
measurement of the running code (``kind == "instrument"``: cost, device, precision, purity,
built-ins: work done inside a proxy is not the student's). A proxy answers only the calls
the contract allows for its part (``contract_call``), and an answer's size is known, and
bounded, before anything is computed.
"""
from __future__ import annotations

import collections
import threading
from dataclasses import replace

import torch

from .fingerprint import fingerprint
from .model import CheckResult, Status
from .parts import BUILT_ON
from .sandbox import results
from .sandbox.host import StudentError
from .sandbox.probes import CARRYABLE

MAX_ELEMENTS = 1 << 20       #: elements of one tensor argument or answer the reference computes
CACHE_BYTES = 64 << 20       #: the answers kept for students who ask the same (``Answers``)


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


#: how an answer the reference's process could not give begins (its limit, its time-out, its
#: end): the student's proxy raises it, and the instructor is told (``unanswered``)
NO_ANSWER = "no answer: "


def unanswered(reply: dict) -> bool:
    """The reference's process gave no answer (as opposed to raising on the arguments)."""
    return str(reply.get("raised", "")).startswith(NO_ANSWER)


class Answers:
    """The reference's answers to the questions of carried parts, from a process of its own.

    ``start()`` gives that process: a sandbox forked from the grader's zygote with a
    submission's limits, given the reference's source as a submission is given its own,
    asked through the ``answer`` probe (``probes.answer``). It is started at the first
    question (a submission with no wrong part asks none), kept for the next ones and
    replaced once it stops (killed at a limit, timed out); one question at a time (the
    threads of a batch share one Grader). Each question is first held here to the calls the contract allows
    (``_question``: types, shapes and bounds, nothing computed). Whatever goes wrong is an
    answer (``{"raised": ...}``: the student's proxy raises it, and the check fails as it
    would), never an exception in the grader."""

    def __init__(self, start, memory: int = CACHE_BYTES):
        self._start = start
        self._box = None           #: the reference's sandbox, once a question has come
        self._lock = threading.Lock()
        #: answers already given, by the question's fingerprint (the reference is a pure
        #: function of the question: students who make the same mistake ask the same ones),
        #: the least recently asked dropped first past ``memory`` bytes
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._cached, self._memory = 0, memory

    def __call__(self, question, allowed: set[str]) -> dict:
        """The reference's answer to one call of a carried part, or why there is none."""
        try:
            question = _question(question, allowed)
        except ValueError as e:         # the student's arguments: the proxy raises it there
            return _raised(e)
        key = fingerprint(question)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key][0]
            answer = self._ask(question)
            if "raised" not in answer:          # a limit or a time-out may not recur
                self._keep(key, answer)
            return answer

    def _keep(self, key: str, answer: dict) -> None:
        size = sum(t.numel() * t.element_size() for t in results.tensors(answer["answer"]))
        if size > self._memory:
            return
        self._cache[key] = (answer, size)
        self._cached += size
        while self._cached > self._memory:
            _, (_, dropped) = self._cache.popitem(last=False)
            self._cached -= dropped

    def _ask(self, question: dict, again: bool = True) -> dict:
        """Asked of the running sandbox; where one that had answered before stops (its CPU
        time spent, killed while idle), once more of a new one: a question is not charged
        for the questions before it."""
        reused = self._box is not None
        try:
            if self._box is None:
                self._box = self._start()
            return self._box.probe("answer", group="answer", question=question)
        except StudentError as e:
            if e.raised:                # the reference raised on these arguments
                return {"raised": str(e)[:300]}
            worn = reused and not self._box.timed_out_groups
            self._drop()
            if worn and again:
                return self._ask(question, again=False)
            return {"raised": f"{NO_ANSWER}{e}"[:300]}
        except Exception as e:          # noqa: BLE001 — the zygote gone: no answer, no crash
            self._drop()
            return {"raised": f"{NO_ANSWER}the reference's process failed ({e})"[:300]}

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._box is not None:
            self._box.close()
            self._box = None


def _raised(e: Exception) -> dict:
    return {"raised": f"{type(e).__name__}: {e}"[:300]}


def _question(question, allowed) -> dict:
    """The question as it is relayed, if it is one the grader answers: a part carried for
    this check, plain CPU tensors, ints or None as arguments, in the shapes the contract
    allows, within the bounds (ValueError otherwise)."""
    if type(question) is not dict or question.get("fn") not in allowed \
            or question.get("mode") not in ("value", "vjp") \
            or type(question.get("args")) not in (list, tuple) or len(question["args"]) > 4:
        raise ValueError("not a question the grader answers")
    for a in question["args"]:
        if not (a is None or type(a) is int or _plain(a)):
            raise ValueError("an argument that is not a plain CPU tensor, an int or None")
    contract_call(question["fn"], list(question["args"]))
    relayed = {"fn": question["fn"], "mode": question["mode"], "args": list(question["args"])}
    if question["mode"] == "vjp":
        grads = question.get("grads")
        if type(grads) not in (list, tuple) or len(grads) > 2 \
                or not all(g is None or _plain(g) for g in grads):
            raise ValueError("output gradients that are not plain CPU tensors")
        relayed["grads"] = list(grads)
    return relayed


def _plain(a) -> bool:
    return type(a) is torch.Tensor and a.layout == torch.strided \
        and a.device.type == "cpu" and a.numel() <= MAX_ELEMENTS


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

