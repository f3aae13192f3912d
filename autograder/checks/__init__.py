"""The registry of checks, and what a check body receives: a ``Probe``.

A check is a plain function decorated with ``@check``; its docstring says what it checks
and cites the SPEC. Points live in the rubric (``autograder/rubric.toml``), not here.
A check body compares the student's answers with the reference's and raises
``CheckFailed`` (from ``compare``) with feedback when they differ.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch

from ..model import Check
from ..sandbox.host import StudentError

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
    """One implementation seen through probes: the student's sandbox or the reference."""

    def __init__(self, run_probe, names=None):
        self._run = run_probe
        self.names = names

    def probe(self, name: str, group: str, **kwargs):
        return self._run(name, group, kwargs)

    def require(self, fn: str) -> None:
        if self.names is not None and fn not in self.names:
            raise StudentError(f"the submission defines no {fn}, which the assignment asks for "
                               "(check the spelling and that it is at the top level)")

    def attempt(self, fn: str, *args, group: str, **kwargs) -> dict:
        """Call fn; {"value": v, "mutated": [...]} or {"raised": info}. Which inputs the call
        changed is decided here, from the tensors sent and the tensors the probe sent back."""
        self.require(fn)
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

    def mha(self, spec: dict, *, group: str) -> dict:
        self.require("MultiHeadAttention")
        return self.probe("mha", group, spec=spec)


@dataclass
class Probe:
    """What a check body gets: both sides, the run's seed, and a notebook for diagnoses."""

    student: Side
    reference: Side
    seed: int
    has_cuda: bool = False
    device: str = "cpu"
    observations: dict = field(default_factory=dict)
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
