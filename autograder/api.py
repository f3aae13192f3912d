"""The grading pipeline, in one place: a submission is loaded, then goes through ``STAGES``
(read the source; in its sandbox: the checks, error carried forward, the diagnoses, the
prices; then scoring and the report's notes) and becomes a Report."""
from __future__ import annotations

import copy
import math
import os
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import checks as registry
from . import carry, diagnoses, integrity, prices, scoring, source_facts, submission, variants
from .checks.module import forbidden_seen
from .checks.questions import unanswered
from .errors import UsageError
from .evidence import Evidence
from .fingerprint import fingerprint
from .model import Fact, Report, Status
from .parts import BUILT_ON
from .runner import run_check
from .sandbox import probes
from .sandbox.host import Sandbox, StudentError, Zygote

PROJECT = Path(__file__).resolve().parent.parent
REFERENCE = PROJECT / "solutions" / "mha.py"     #: the source the reference's sandbox runs
#: The probes that run the student's parts and module, where carried parts are answered (the
#: operator trace too: what the reference computes for a carried part is not counted, and fewer
#: counted is accepted; the meta device and low precision cannot cross the boundary).
CARRIED_PROBES = ("call", "calls", "mha", "mhas", "mha_loads", "trace")
LIMITS = {"RLIMIT_CPU": 120, "RLIMIT_NPROC": 32, "RLIMIT_FSIZE": 16 << 20,
          "RLIMIT_NOFILE": 128, "RLIMIT_CORE": 0}
#: Memory of one sandbox's processes together, watched by the zygote and, where the machine
#: allows, limited by a cgroup of its own (shared memory included); on CPU runs also each
#: process's address space (RLIMIT_AS clashes with CUDA's virtual reservations: STYLE 3.1).
#: A Grader may be given less (``memory_bytes``: tests keep memory attacks cheap).
MEMORY = 4 << 30
#: Wall-clock limits in seconds, on the grader's clock: importing the submission, one probe,
#: one group of checks, the whole submission. A Grader copies them (tests shorten them).
TIMEOUTS = {"import": 20.0, "probe": 15.0, "group": 30.0, "submission": 90.0}
#: The instructor's note where error carried forward's question got no answer (``carry``)
UNANSWERED = ("for the instructor: error carried forward asked the reference's process a "
              "question it did not answer (")


class Grader:
    """Holds what grading many submissions shares: the zygote, the rubric, the reference cache."""

    def __init__(self, *, rubric=None, device: str = "auto", public_only: bool = False,
                 seed: int | None = None, hide=(), memory_bytes: int = MEMORY,
                 rules: bool = True):
        torch.set_num_threads(1)   # tiny tensors: threads only add overhead (and spin under load)
        self.checks = registry.load_all()
        self.rubric = scoring.load_rubric(rubric, known=set(self.checks))
        self.public_only = public_only
        self.seed = secrets.randbelow(2**31) if seed is None else int(seed)
        self.has_cuda = device != "cpu" and torch.cuda.is_available()
        if device == "cuda" and not self.has_cuda:
            raise UsageError("--device cuda was asked for, but this machine has no CUDA device")
        self.device = "cuda" if self.has_cuda else "cpu"
        self.hide = [str(PROJECT / d) for d in ("autograder", "solutions", "tests", "assignments",
                                                 ".git")] + [str(Path(h).resolve()) for h in hide]
        self.timeouts = dict(TIMEOUTS)
        self.memory = int(memory_bytes)
        #: the code rules compiled into every submission (``sandbox.rules``); only the tests
        #: of the sandbox's isolation turn them off, to try that layer alone
        self.rules = bool(rules)
        self._reference_cache: dict = {}
        # The reference seeds torch's global RNG (probes.build): threads sharing this Grader
        # (autograder.batch) must not interleave there, or the reference values would change.
        self._reference_lock = threading.Lock()
        self._zygote = Zygote(hide=self.hide, memory_bytes=self.memory)   # boots in the background
        #: the reference's answers to carried parts' questions, from its own sandbox
        self.answers = carry.Answers(self._reference_sandbox)
        self._warm = False
        self._trusted: dict | None = None

    @property
    def zygote(self) -> Zygote:
        return self._zygote

    def close(self) -> None:
        self.answers.close()
        self._zygote.close()

    def selected(self):
        """The checks the report shows: those the rubric weighs (and, --public-only, the
        public ones)."""
        return [c for c in self.judged() if self.rubric.enabled(c.name)]

    def judged(self):
        """The checks judged: every one --public-only keeps, those the rubric disables too
        (weighing 0 and left out of the report), so that disabling a check changes no other
        check's outcome (what it gates, what carry forward and the diagnoses see)."""
        return [c for c in self.checks.values() if not (self.public_only and c.hidden)]

    def _points(self, name: str) -> float:
        return float(self.rubric.points.get(name, 0.0))

    def grade(self, path, variant: variants.Variant | None = None) -> Report:
        """Grade one submission; ``variant``: the student's own numbers and seed (default:
        ``variants.DEFAULT`` and this Grader's seed). The stages of ``STAGES`` in turn, the
        sandbox open for those that run the submission."""
        variant = variant or variants.DEFAULT
        g = Grading(submission.load(path), variant,
                    self.seed if variant.seed is None else variant.seed)
        for stage in BEFORE_SANDBOX:
            stage(self, g)
        g.sandbox = self._sandbox(g.sub)
        try:
            for stage in IN_SANDBOX:
                stage(self, g)
        finally:
            if g.sandbox is not None:
                g.sandbox.close()
        for stage in AFTER_SANDBOX:
            stage(self, g)
        return Report(g.sub.name, tuple(g.results), tuple(g.found), g.seed, tuple(g.notes),
                      _facts(g.facts, g.probe.evidence), g.deductions)

    # ---- the stages: each reads and adds to one Grading ------------------------------

    def read_source(self, g: Grading) -> None:
        """The facts the source shows (the forbidden built-ins it names, the code rules its
        syntax breaks), from exactly the text the worker compiles."""
        g.facts = source_facts.SourceFacts() if g.sub.problem else \
            source_facts.read(g.sub.source, g.sub.cells, self._trusted_cells())

    def open_probe(self, g: Grading) -> None:
        """Both sides seen through probes: the student's in the sandbox, the reference here."""
        g.probe = self._probe(g.sub, g.sandbox, g.seed, g.variant, g.facts)

    def run_checks(self, g: Grading) -> None:
        """Every judged check on the submission's own code (``strict``)."""
        passed = self._ungated()
        # The numeric questions are the notebook's: a .py module is not asked them.
        asked = g.sub.name.endswith(".ipynb")
        for check in self.judged():
            if check.group == "questions" and not asked:
                if self.rubric.questions == "every":
                    g.strict.append(unanswered(check, self._points(check.name)))
                continue
            g.probe.evidence.current = check.name
            g.strict.append(run_check(check, g.probe, self._points(check.name), passed,
                                      self.has_cuda))
        g.results = g.strict

    def carry_forward(self, g: Grading) -> None:
        """Error carried forward (``_carry_forward``), where the submission ran; the rubric
        decides afterwards whether it counts (``price``)."""
        if g.ran:
            g.results = self._carry_forward(g.sub, g.sandbox, g.seed, g.variant, g.facts,
                                            g.strict, g.probe)

    def diagnose(self, g: Grading) -> None:
        """The mistakes the submission's behaviour shows, read from the strict pass."""
        g.found = diagnoses.diagnose(g.probe, g.strict)

    def price(self, g: Grading) -> None:
        """carry_forward = false grades strictly (prices too); else one mistake, one price."""
        if not self.rubric.carry_forward:
            g.results = g.strict
        elif self.rubric.one_price and g.ran:
            g.results, g.deductions, g.charged = self._one_price(g.probe, g.strict, g.results,
                                                                 g.found)

    def score(self, g: Grading) -> None:
        """What the rubric weighs, scored (a forbidden built-in voids what it says), and the
        deductions in the report's points."""
        forbidden = bool(forbidden_seen(g.probe.evidence))
        weighed = [r for r in g.results if self.rubric.enabled(r.name)]
        g.results, g.notes = scoring.score(weighed, self.rubric, forbidden=forbidden)
        g.deductions = prices.rescaled(g.deductions, weighed, g.results, g.charged)

    def annotate(self, g: Grading) -> None:
        """The report's notes: loading, the sandbox's limits, the code rules, scoring, the
        grader's own faults, the variant, the deductions."""
        sub, sandbox = g.sub, g.sandbox
        faults = [f for e in g.probe.evidence.both() for f in e.grader_faults]
        notes = list(sub.notes) + (sandbox.notes if sandbox else []) + _rule_notes(
            g.probe.evidence) + g.notes + list(dict.fromkeys(faults))   # the carried pass's too
        if sub.problem or (sandbox and sandbox.load_problem):
            notes.insert(0, sub.problem or sandbox.load_problem)
        elif sandbox and not sandbox.names:
            notes.insert(0, "the submission defines none of the API names ("
                         + ", ".join(submission.API) + "), so every check errs")
        if g.variant.seed is not None:
            notes.append(f"graded against the variant of student {g.variant.student}: its "
                         f"numbers and its seed (regrade with --student {g.variant.student})")
        if g.deductions:
            notes.append("charged once per named mistake (rubric policy 'one_price'): "
                         + "; ".join(d.line() for d in g.deductions))
        g.notes = notes

    def _one_price(self, probe, strict, results, found) -> tuple[list, tuple, list]:
        """The failures the named mistakes explain, charged at their prices (``prices``), the
        deductions, and the checks charged for them.
        First the measurements those failures held back are graded on the student's own
        code, as error carried forward releases them: a held-back check is charged by what
        it then finds, never given its points unseen."""
        rubric = self.rubric
        simulated = {**probe.evidence.functions_simulated,
                     prices.MODULE: probe.evidence.module_simulated}
        # a mistake whose home the rubric weighs at nothing is charged by its checks
        found = [d for d in found if d.code in rubric.prices
                 or prices.price(d.code, rubric.points, {}) > 0]
        explains = prices.explained(strict, results, found, rubric.prices, simulated)
        if not explains:
            return results, (), []
        by_name, released = {r.name: r for r in results}, set()
        passed = {r.name for r in results if r.status is Status.PASSED} | self._ungated() \
            | set(explains)
        for check in self.judged():
            held = by_name.get(check.name)
            if held is not None and held.blocked_by and \
                    set(held.blocked_by) <= set(explains) and \
                    all(name in passed for name in check.requires):
                probe.evidence.current = check.name
                again = run_check(check, probe, self._points(check.name), passed,
                                  self.has_cuda)
                by_name[check.name] = prices.released(again, held.blocked_by)
                released.add(check.name)
        results = [by_name[r.name] for r in results]
        explains = prices.explained(strict, results, found, rubric.prices, simulated,
                                    frozenset(released))
        results, deductions = prices.apply(results, explains, found, rubric.points,
                                           rubric.prices)
        return results, deductions, list(explains)

    def _carry_forward(self, sub, sandbox, seed, variant, facts, results, strict) -> list:
        """The failed checks graded again with the wrong parts their own part is built on
        answered by the reference (error carried forward): what passes then lost points only
        through those parts. Then the measurements those checks held back, graded on the
        student's own code. What the carried pass saw goes to ``strict.evidence.carried``
        (the module's own mistakes, alone, for the diagnoses; its forbidden calls count as
        the strict pass's), whatever the rubric then does with the points."""
        wrong = carry.wrong_parts(results, self.checks)
        by_name = {r.name: r for r in results}
        redo = [c for c in self.judged() if c.name in by_name
                and by_name[c.name].status in (Status.FAILED, Status.ERROR)
                and carry.parts_for(c, wrong)]
        if not redo:
            return results
        probe = self._probe(sub, sandbox, seed, variant, facts, carried=True)
        passed = {r.name for r in results if r.status is Status.PASSED} | self._ungated()
        for check in redo:
            parts = carry.parts_for(check, wrong)
            probe.evidence.current, probe.evidence.carry = check.name, parts
            again = run_check(check, probe, self._points(check.name), passed, self.has_cuda)
            if again.status is Status.PASSED:
                by_name[check.name] = carry.note(again, parts)
            elif by_name[check.name].blocked_by and not again.blocked_by:
                by_name[check.name] = carry.graded_given(again, parts)  # its own failure now
        strict.evidence.carried = probe.evidence
        for check in self.judged():             # measurements the carried checks held back
            held = by_name.get(check.name)
            if held is not None and held.blocked_by and check.kind == "instrument" and \
                    all(name in passed for name in check.requires):
                strict.evidence.current = check.name
                again = run_check(check, strict, self._points(check.name), passed,
                                  self.has_cuda)
                if again.status is Status.ERROR and check.instruments == {"trace"}:
                    # the student's own forward does not run with its wrong parts: its cost
                    # is read with them answered, the answers counted at the reference's cost
                    parts = wrong & set(BUILT_ON["MultiHeadAttention"])
                    probe.evidence.current, probe.evidence.carry = check.name, parts
                    again = run_check(check, probe, self._points(check.name), passed,
                                      self.has_cuda)
                by_name[check.name] = carry.released(again, held.blocked_by)
        return [by_name[r.name] for r in results]

    def _ungated(self) -> set[str]:
        """The checks that hold back nothing: those --public-only leaves out (they never
        run, so they never pass)."""
        return set(self.checks) - {c.name for c in self.judged()}

    def _trusted_cells(self) -> dict:
        """The released notebook's own setup cells (imports, test helpers), read once."""
        if self._trusted is None:
            self._trusted = source_facts.trusted_cells()
        return self._trusted

    def _sandbox(self, sub) -> Sandbox | None:
        if sub.problem:
            return None
        if not self._warm:     # the reference side's lazy imports, while the zygote boots
            probes.warm_up()
            self._warm = True
        t = self.timeouts
        return Sandbox(self.zygote, sub.source, "mha.py",
                       self._config(hide=[str(Path(sub.path).resolve().parent)]),
                       import_timeout=t["import"], probe_timeout=t["probe"],
                       group_budget=t["group"], budget=t["submission"])

    def _reference_sandbox(self) -> Sandbox:
        """The reference's own sandbox, where error carried forward's questions are answered
        (``carry.Answers``): a submission's sandbox (jail, limits, memory), given the
        reference's source. Its code is compiled as written: the code rules make what a
        process measures of the code it runs trustworthy, and this one runs no student
        code (its inputs are plain tensors and ints) and is not measured; the reference
        passes the rules anyway, as a submission (the rules' guard cost 0.4 ms a question,
        45 ms a split bug's 111). Each question has a probe's deadline; the sandbox lives
        as long as it is held, so it has no budget of its own (``Answers`` replaces it once
        it stops)."""
        t = self.timeouts
        return Sandbox(self.zygote, REFERENCE.read_bytes(), "mha.py",
                       dict(self._config(), rules=False), import_timeout=t["import"],
                       probe_timeout=t["probe"], restarts=0, group_budget=math.inf,
                       budget=math.inf, worker="the reference's process")

    def _config(self, hide=()) -> dict:
        """A sandbox's configuration: what it hides, its limits, its memory, the code rules."""
        limits = LIMITS if self.has_cuda else dict(LIMITS, RLIMIT_AS=self.memory)
        return {"hide": self.hide + list(hide), "limits": limits, "memory_bytes": self.memory,
                "host_uid": os.getuid(), "host_gid": os.getgid(), "rules": self.rules}

    def _probe(self, sub, sandbox, seed: int, variant, facts,
               carried: bool = False) -> registry.Probe:
        """Both sides seen through probes, and the evidence record they fill. ``carried``:
        the student's module (or part) is run with the parts in ``evidence.carry`` answered
        by the reference (``carry``)."""
        # the code rules broken, as the sandbox's guard reports them (the host's list, kept
        # up to date as answers come)
        evidence = Evidence(rules=sandbox.rules_broken if sandbox is not None else [],
                            source=facts, guarded=self.rules)

        def answer(question, allowed):
            """The reference's answer; where its process gave none, the instructor is told."""
            reply = self.answers(question, allowed)
            if carry.unanswered(reply) and not any(
                    f.startswith(UNANSWERED) for f in evidence.grader_faults):
                evidence.grader_faults.append(
                    f"{UNANSWERED}{reply['raised']}): the checks redone with the reference's "
                    "parts that asked it failed for that reason; if it was the grader's (its "
                    "process killed, the machine short of memory), grade this submission again")
            return reply

        def student(name, group, kwargs):
            if sandbox is None:
                raise StudentError(sub.problem)
            parts = evidence.carry if carried and name in CARRIED_PROBES else None
            try:
                return sandbox.probe(name, group=group, **kwargs,
                                     **({"carry": (parts, answer)} if parts else {}))
            finally:
                hits = getattr(sandbox, "forbidden", None)
                if hits:
                    evidence.forbidden.update(hits)
                    sandbox.forbidden = []

        def reference(name, group, kwargs):
            key = (seed, evidence.current, name, fingerprint(kwargs))
            with self._reference_lock:
                if key not in self._reference_cache:
                    import solutions
                    self._reference_cache[key] = probes.PROBES[name](solutions,
                                                                     **copy.deepcopy(kwargs))
                return self._reference_cache[key]

        # A submission that could not be imported: every check gets the import's message.
        names = None if sandbox is None or sandbox.load_problem else sandbox.names
        return registry.Probe(student=registry.Side(student, names, batched=True),
                              reference=registry.Side(reference), seed=seed,
                              has_cuda=self.has_cuda, device=self.device,
                              evidence=evidence, variant=variant)


@dataclass
class Grading:
    """One submission's grading as it goes through the stages: each reads what earlier
    stages left here and adds its own."""
    sub: submission.Submission
    variant: variants.Variant
    seed: int
    facts: source_facts.SourceFacts | None = None
    sandbox: Sandbox | None = None
    probe: registry.Probe | None = None
    strict: list = field(default_factory=list)      #: each check as the submission's own code did
    results: list = field(default_factory=list)     #: as graded: carried forward, priced, scored
    found: list = field(default_factory=list)       #: the diagnoses
    deductions: tuple = ()                          #: one price per named mistake
    charged: list = field(default_factory=list)     #: the checks those deductions were charged on
    notes: list = field(default_factory=list)

    @property
    def ran(self) -> bool:
        """The submission was loaded into a sandbox (no load problem of its own)."""
        return self.sandbox is not None and not self.sub.problem


#: The pipeline, as nbgrader lists its preprocessors: a submission's grading is these
#: stages in turn, the middle ones while its sandbox is open (``Grader.grade``).
BEFORE_SANDBOX = (Grader.read_source,)
IN_SANDBOX = (Grader.open_probe, Grader.run_checks, Grader.carry_forward, Grader.diagnose,
              Grader.price)
AFTER_SANDBOX = (Grader.score, Grader.annotate)
STAGES = BEFORE_SANDBOX + IN_SANDBOX + AFTER_SANDBOX


def _rule_notes(evidence: Evidence) -> list[str]:
    """The code rules the submission broke, for the student (public): read before anything
    ran, and refused while it ran."""
    from .diagnoses.structure import code_rules_broken
    broken = code_rules_broken(evidence)
    if not broken:
        return []
    return [f"your code breaks the code rules (docs/contract.md, 'Code rules'); each of these "
            f"lines raises instead of running: {'; '.join(broken[:5])}"
            + (f" (and {len(broken) - 5} more)" if len(broken) > 5 else "")]


def _facts(source, evidence: Evidence) -> tuple[Fact, ...]:
    """The facts the structural verdicts rested on, each with who established it."""
    from .diagnoses.structure import code_rules_broken
    from .diagnoses.values import changed_inputs
    changed = changed_inputs(evidence)
    return (Fact("code rules broken", code_rules_broken(evidence), "grader"),
            Fact("forbidden built-ins named in the code", [str(f) for f in source.forbidden],
                 "source"),
            Fact("forbidden built-ins reached or called", evidence.forbidden_reached(),
                 "sandbox"),
            Fact("functions that changed an input in place", changed, "grader"),
            Fact("code rules enforced in the sandbox", evidence.guarded,
                 "grader"))


def grade(path, **options) -> Report:
    """Grade one submission (a .py, an .ipynb or a folder holding one)."""
    grader = Grader(**options)
    try:
        with integrity.guard():
            return grader.grade(path)
    finally:
        grader.close()
