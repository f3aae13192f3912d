"""The registry of checks, and what a check body receives: a ``Probe``.

A check is a plain function decorated with ``@check``; its docstring says what it checks
and cites the SPEC. Points live in the rubric (``autograder/rubric.toml``), not here.
A check body compares the student's answers with the reference's and raises
``CheckFailed`` (from ``compare``) with feedback when they differ.
"""
from __future__ import annotations

import collections
import inspect
from dataclasses import dataclass, field

import torch

from ..evidence import Evidence
from ..model import Check
from ..sandbox.host import StudentError, failure
from ..sandbox.probes import CALLS_LIMIT

REGISTRY: dict[str, Check] = {}


#: What the sandbox measures about the code it runs; a check that rests on one names it.
INSTRUMENTS = frozenset({"exception", "mutation", "parameters", "forbidden", "trace", "device",
                         "precision"})


#: What a check holds its part to (``model.Check.kind``).
KINDS = frozenset({"values", "raises", "structure", "instrument", "question"})


def check(name: str, *, part: str, kind: str, group: str, hidden: bool = True, needs=(),
          requires=(), instruments=()):
    def register(body):
        if name in REGISTRY:
            raise ValueError(f"two checks are called {name}")
        if kind not in KINDS:
            raise ValueError(f"{name}: unknown kind {kind!r}")
        if not INSTRUMENTS.issuperset(instruments):
            raise ValueError(f"{name}: unknown instruments {set(instruments) - INSTRUMENTS}")
        REGISTRY[name] = Check(name=name, group=group, points=0.0, part=part, kind=kind,
                               body=body, hidden=hidden,
                               needs=frozenset(needs), requires=tuple(requires),
                               doc=inspect.getdoc(body) or "",
                               instruments=frozenset(instruments))
        return body
    return register


class Side:
    """One implementation seen through probes: the student's sandbox or the reference.

    ``batched``: calls announced with ``ahead`` go in one request (the sandbox's side: one
    round trip instead of one a call); elsewhere ``ahead`` does nothing."""

    def __init__(self, run_probe, names=None, batched: bool = False):
        self._run = run_probe
        self.names = names
        self._batched = batched
        self._ahead: collections.deque = collections.deque()

    def probe(self, name: str, group: str, **kwargs):
        return self._run(name, group, kwargs)

    def require(self, fn: str) -> None:
        if self.names is not None and fn not in self.names:
            raise StudentError(f"the submission defines no {fn}, which the assignment asks for "
                               "(check the spelling and that it is at the top level)")

    def ahead(self, fn: str, arg_lists, *, group: str) -> None:
        """The calls of fn a check is about to make, in its order, run now in one request:
        each ``attempt`` with the same arguments (the same objects) then takes its answer
        instead of a round trip of its own. Nothing about a call changes (the sandbox makes the
        same calls in the same order, each judged as before); an attempt that was not
        announced, or comes out of order, drops what is left and runs as usual."""
        self._ahead.clear()
        arg_lists = [tuple(a) for a in arg_lists]
        if not self._batched or len(arg_lists) < 2 or self.names is None \
                or fn not in self.names:
            return
        for start in range(0, len(arg_lists), CALLS_LIMIT):
            chunk = arg_lists[start:start + CALLS_LIMIT]
            try:
                answers = self.probe("calls", group, fn=fn, batch=[list(a) for a in chunk])
            except StudentError as e:    # timed out or crashed: as the first call would have
                answers = [e] * len(chunk)
            self._ahead.extend((fn, args, answer) for args, answer in zip(chunk, answers))

    def _announced(self, fn: str, args: tuple, kwargs: dict):
        """The answer ``ahead`` got for this call, if it is the next one announced."""
        if self._ahead:
            name, sent, answer = self._ahead[0]
            if name == fn and not kwargs and len(sent) == len(args) \
                    and all(a is b for a, b in zip(sent, args)):
                self._ahead.popleft()
                if isinstance(answer, StudentError):
                    raise answer
                if "bad" in answer or (fn == "MultiHeadAttention" and "raised" in answer):
                    raise failure(answer)
                return dict(answer)
            self._ahead.clear()
        return None

    def attempt(self, fn: str, *args, group: str, **kwargs) -> dict:
        """Call fn; {"value": v, "mutated": [...]} or {"raised": info}. Which inputs the call
        changed is decided here, from the tensors sent and the tensors the probe sent back."""
        self.require(fn)
        result = self._announced(fn, args, kwargs)
        if result is None:
            result = self.probe("call", group, fn=fn, args=list(args), kwargs=kwargs)
        if "after" in result:
            result = dict(result, mutated=_changed(args, result.pop("after")))
        return result

    def call(self, fn: str, *args, group: str, **kwargs):
        result = self.attempt(fn, *args, group=group, **kwargs)
        if "raised" in result:
            info = result["raised"]
            raise StudentError(f"{fn} raised {info.get('type')}: {info.get('message')}",
                               raised=info)
        return result["value"]

    def ahead_mha(self, specs: list, *, group: str) -> None:
        """``ahead`` for modules: the ``mha`` requests a check is about to send, in its
        order, sent now in one ``mhas`` request; each ``mha`` with the same spec (the same
        object) then takes its answer. The sandbox runs them in the same order; the first
        that goes wrong ends the request, as it would end the check."""
        self._ahead.clear()
        if not self._batched or len(specs) < 2 or self.names is None \
                or "MultiHeadAttention" not in self.names:
            return
        try:
            answers = self.probe("mhas", group, specs=list(specs))
        except StudentError as e:        # timed out or crashed: as the first would have
            answers = [e]
        self._ahead.extend(("MultiHeadAttention", (spec,), answer)
                           for spec, answer in zip(specs, answers))

    def mha(self, spec: dict, *, group: str) -> dict:
        self.require("MultiHeadAttention")
        answer = self._announced("MultiHeadAttention", (spec,), {})
        if answer is not None:
            return answer["ok"]
        return self.probe("mha", group, spec=spec)


@dataclass
class Probe:
    """What a check body gets: both sides, the run's seed, and the evidence record the
    checks write and the diagnoses read (``evidence.Evidence``)."""

    student: Side
    reference: Side
    seed: int
    has_cuda: bool = False
    device: str = "cpu"
    evidence: Evidence = field(default_factory=Evidence)
    variant: object = None      #: the student's autograder.variants.Variant (numeric questions)

    def generator(self, salt: str) -> torch.Generator:
        """A generator seeded by the run's seed and the check: checks stay independent."""
        return torch.Generator().manual_seed((self.seed * 1_000_003 + _stable_hash(salt)) % 2**63)


def _changed(sent, after) -> list[int]:
    """The positions of the tensor arguments whose values came back different."""
    changed = []
    for i, (arg, back) in enumerate(zip(sent, after)):
        arg = arg["noncontig"] if isinstance(arg, dict) and "noncontig" in arg else arg
        if isinstance(arg, torch.Tensor) and not (
                isinstance(back, torch.Tensor) and back.dtype == arg.dtype
                and back.shape == arg.shape and torch.equal(back, arg)):
            changed.append(i)
    return changed


def _stable_hash(text: str) -> int:
    value = 0
    for ch in text.encode():
        value = (value * 131 + ch) % 2**61
    return value


#: The modules of checks, in the order reports list their checks.
MODULES = ("functions", "module", "structure", "questions")


def load_all() -> dict[str, Check]:
    """Import every module of checks so their decorators run; the checks in a fixed order
    (module, then place in it), whichever module some other import loaded first."""
    from . import functions, module, questions, structure  # noqa: F401

    def place(c: Check):
        return (MODULES.index(c.body.__module__.rsplit(".", 1)[-1]),
                c.body.__code__.co_firstlineno)
    return dict(sorted(REGISTRY.items(), key=lambda item: place(item[1])))
