"""What grading established about one submission: a typed record, one layer below the
checks and the diagnoses.

The checks write it as they judge (each field says who established its facts); the
diagnoses, the prices and the report read it. It is gathered once whatever the rubric
selects: the grader judges every check, the disabled ones too, so what a check or a
diagnosis reads never depends on which checks the rubric weighs (``Grader.judged``).

Who establishes a fact:

* ``grader``: the grader computed it itself, from answers it judged (values it compared
  with the reference's, tensors it compared byte for byte before and after a call);
* ``sandbox``: the instruments in the sandbox reported it (the guard's refused lines,
  the forbidden kernels it watched), each answer checked for its form on the way
  (``sandbox.results``);
* ``source``: the grader read it in exactly the text the worker compiles
  (``source_facts``): an advice or a public code rule, never a guess that costs points.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Evidence:
    """One submission's evidence, in the strict pass (``carried`` holds the carried pass's)."""

    # -- grader: the answers the checks judged ---------------------------------------------
    #: function -> [(case, the student's result, the reference's value)], every case run
    calls: dict[str, list] = field(default_factory=dict)
    #: the module's graded forwards: [(config, runs, the student's answer, the reference's)],
    #: each forward's answer with what it cost as it ran (``cost``: operators, FLOPs, syncs)
    mha: list = field(default_factory=list)
    #: [(config, the student's parameters, the reference's)] as ``mha`` reported them
    params: list = field(default_factory=list)
    #: [(function, the exception's type or None)] where bad shapes did not raise ValueError
    no_valueerror: list = field(default_factory=list)
    #: where a float64 answer matched float32 rounding (what)
    float32_detour: list = field(default_factory=list)
    #: [((d_model, d_total, num_heads), what head_weight_shape answered)]
    head_weight_shape: list = field(default_factory=list)
    #: two eval-mode forwards on the same inputs differed
    eval_nondeterministic: bool = False
    #: the structure checks' probes, each made once (``checks.evidence.once``)
    structure: dict = field(default_factory=dict)

    # -- sandbox: what its instruments reported --------------------------------------------
    #: forbidden built-in attention reached or called while the submission ran
    forbidden: set = field(default_factory=set)
    #: the code rules the guard refused while the submission ran (the host's list)
    rules: list = field(default_factory=list)

    # -- source: what the grader read in the compiled text ---------------------------------
    source: Any = None                     #: ``source_facts.SourceFacts``
    guarded: bool = True                   #: the code rules were compiled in

    # -- grading's own state -----------------------------------------------------------------
    current: str | None = None             #: the check being judged (the reference's cache key)
    carry: frozenset | set | None = None   #: the parts answered by the reference, carried pass
    carried: Evidence | None = None        #: the carried pass's evidence (a redo only adds)
    grader_faults: list = field(default_factory=list)   #: for the instructor
    #: the diagnoses' simulations, made once: function -> codes, the module's codes, the
    #: combination they force, and the module's forwards as the simulations read them
    functions_simulated: dict = field(default_factory=dict)
    module_simulated: frozenset = frozenset()
    composed: frozenset | None = None
    telling_runs: tuple | None = None

    def both(self) -> tuple[Evidence, ...]:
        """This pass and the carried one, where there was one: what both saw counts."""
        return (self,) if self.carried is None else (self, self.carried)

    def forbidden_reached(self) -> list[str]:
        """Forbidden built-ins reached or called, in the strict and the carried runs."""
        return sorted(set().union(*(e.forbidden for e in self.both())))
