"""One mistake, one price: a named mistake costs the same wherever it sits.

A check-by-check score charges one mistake differently by style: a NaN for rows with no
valid key costs the points of ``masked_softmax.masked`` when it sits in that function
(error carried forward clears what is built on it), and those of every module check it
breaks when the same lines are inlined in ``forward``. An exam marker charges it once. So
each mistake code has a *price* (by default the rubric points of the checks of its *home*,
the part it breaks; the rubric's ``[prices]`` table may set any code's price), and the
failures a named mistake explains lose exactly the prices of the mistakes that explain
them, never more than the points of those checks. A failure no named mistake explains is
charged by its check, as before.

A failed check is *explained* by a named mistake when it is one of the mistake's home
checks; or when it passed once the wrong parts it is built on were answered by the
reference (error carried forward); or when it is a module check and the module's forwards
are reproduced exactly by the grader's simulation of the named mistakes
(``diagnoses.compose``), which is how an inlined mistake is known for the module's own.
The grader computes each of these itself: nothing here reads the submission's code.

Pure functions on results; ``api`` applies them before the rubric's policies.
"""
from __future__ import annotations

from dataclasses import replace

from .model import CheckResult, Deduction, Status

MODULE = "MultiHeadAttention"
#: code -> the checks of the part it breaks (its home): its default price is their points
HOME: dict[str, tuple[str, ...]] = {
    "shape.head-weight-full-width": ("head_weight_shape.values",),
    "split.no-transpose": ("split_heads.values",),
    "split.wrong-head-order": ("split_heads.values",),
    "concat.no-transpose": ("concat_heads.values",),
    "concat.view-noncontiguous": ("concat_heads.values",),
    "proj.heads-no-permute": ("project_heads.values",),
    "proj.transposed-weight": ("MultiHeadAttention.values",),
    "proj.ignores-bias": ("MultiHeadAttention.values",),
    "proj.qkv-aliased": ("MultiHeadAttention.params",),
    "module.self-attention-only": ("MultiHeadAttention.values",),
    "module.missing-out-proj": ("MultiHeadAttention.values",),
    "module.dropout-in-eval": ("MultiHeadAttention.dropout",),
    "pool.no-scale": ("attention_pool.values",),
    "pool.scale-d-model": ("MultiHeadAttention.values",),
    "pool.softmax-wrong-axis": ("masked_softmax.values",),
    "pool.transpose-wrong-axes": ("attention_pool.values",),
    "mask.wrong-axis": ("masked_softmax.masked",),
    "mask.ignores-valid-lens": ("masked_softmax.masked",),
    "mask.zero-len-nan": ("masked_softmax.masked",),
    "mask.zero-len-uniform": ("masked_softmax.masked",),
    "mask.after-softmax": ("masked_softmax.masked",),
    "mask.repeat-not-interleave": ("MultiHeadAttention.masked",),
    "mask.fp16-overflow": ("precision.autocast",),
    "heads.shared-weights": ("MultiHeadAttention.params", "MultiHeadAttention.distinct"),
    "heads.tiled-block": ("MultiHeadAttention.distinct",),
    "heads.unused-block": ("MultiHeadAttention.distinct",),
    "heads.identical-init": ("MultiHeadAttention.init",),
    "cost.python-loop-over-heads": ("cost.parallel",),
    "cost.extra-params": ("cost.params",),
    "device.hardcoded-cpu": ("device.meta",),
    "device.host-sync": ("device.sync",),
    "dtype.forces-float32": ("precision.autocast",),
    "api.mutates-input": ("functions.pure",),
}
#: codes charged by their checks, as before: what a raises check or a rule of the contract
#: costs is already that check's (or, for a forbidden built-in, the rubric's policy)
UNPRICED = frozenset({"shape.no-valueerror", "api.forbidden-sdpa", "api.breaks-code-rules"})


#: The module's checks that judge no forward (construction, parameters, names called): a
#: simulation of the module's forwards explains none of them
NOT_FORWARDS = frozenset({"MultiHeadAttention.raises", "MultiHeadAttention.params",
                          "MultiHeadAttention.builtin", "MultiHeadAttention.init"})


def price(code: str, points: dict[str, float], overrides: dict[str, float]) -> float:
    """A code's price: the rubric's ``[prices]`` entry, else its home checks' points."""
    if code in overrides:
        return float(overrides[code])
    return float(sum(points.get(name, 0.0) for name in HOME.get(code, ())))


def explained_by(code: str, result: CheckResult, carried_pass: set[str],
                 simulated, released: frozenset = frozenset()) -> bool:
    """Does the named mistake ``code`` explain this failed check? (See the module's text.)
    ``simulated``: part -> the codes whose simulation together reproduces what that part did
    (a set alone: the module's); ``released``: the measurements graded on the student's own
    code once what held them back was explained (a module whose forwards are the simulated
    mistakes' is measured with them: the module's attention on other shapes costs other
    work, say)."""
    if result.name in HOME.get(code, ()):
        return True
    if result.name in carried_pass:
        return True
    if not isinstance(simulated, dict):
        simulated = {MODULE: simulated}
    if result.name in released and code in simulated.get(MODULE, ()) and \
            result.name not in NOT_FORWARDS:
        return True
    if code not in simulated.get(result.part, ()):
        return False
    if result.part == MODULE:
        return result.name not in NOT_FORWARDS
    return not result.name.endswith(".raises")


def explained(strict: list[CheckResult], final: list[CheckResult], diagnoses,
              overrides: dict, simulated=frozenset(), released: frozenset = frozenset()
              ) -> dict[str, list[str]]:
    """Failed check -> the priced codes that explain it (see the module's text).

    ``strict``: every check as the submission's own code did; ``final``: after error
    carried forward; ``simulated``: part -> the codes whose simulation together reproduces
    what that part did (a set alone: the module's forwards); ``released``: the measurements
    graded on the student's code once what held them back was explained."""
    failed = [r for r in strict if r.status in (Status.FAILED, Status.ERROR)]
    by_name = {r.name: r for r in final}
    carried_pass = {r.name for r in failed
                    if r.name in by_name and by_name[r.name].status is Status.PASSED}
    found: dict[str, list[str]] = {}
    for d in diagnoses:
        if d.code in UNPRICED or (d.code not in HOME and d.code not in overrides):
            continue
        for r in failed:
            if explained_by(d.code, r, carried_pass, simulated, released):
                found.setdefault(r.name, []).append(d.code)
    return found


def apply(final: list[CheckResult], explains: dict[str, list[str]], diagnoses, points: dict,
          overrides: dict) -> tuple[list[CheckResult], tuple[Deduction, ...]]:
    """The final results with the explained failures charged at the named mistakes' prices,
    never more than those checks' points; returns them and the deductions, in the order of
    the diagnoses."""
    codes = {code for names in explains.values() for code in names}
    deductions = [Deduction(d.code, price(d.code, points, overrides), d.message)
                  for d in diagnoses if d.code in codes]
    if not deductions:
        return final, ()
    by_name = {r.name: r for r in final}
    names = [name for name in explains if name in by_name]
    cap = sum(by_name[name].max_score for name in names)
    full = sum(x.points for x in deductions)
    target = min(full, cap)
    lost = sum(by_name[name].max_score - by_name[name].score for name in names)
    order = _home_first(names, deductions)
    if lost > target + 1e-9:
        by_name = _give_back(by_name, list(reversed(order)), lost - target)
    elif lost < target - 1e-9:
        by_name = _take(by_name, order, target - lost, deductions)
    if target < full:                    # capped: the cap shared in proportion
        deductions = [replace(x, points=round(x.points * target / full, 2)) for x in deductions]
    return [by_name[r.name] for r in final], tuple(deductions)


def rescaled(deductions, before: list[CheckResult], after: list[CheckResult], charged
             ) -> tuple[Deduction, ...]:
    """The deductions in the report's points: the rubric's rescaling (a skipped check's points
    shared out over the others in whole points) changes the points of the checks they were
    charged on. Each is scaled as its home checks were (else as the charged checks were on
    the whole), then all together to what the charged checks lose once rescaled."""
    if not deductions:
        return tuple(deductions)
    old, new = {r.name: r for r in before}, {r.name: r for r in after}
    names = [n for n in charged if n in old and n in new and old[n].max_score > 0]
    raw = sum(old[n].max_score - old[n].score for n in names)
    now = sum((old[n].max_score - old[n].score) * new[n].max_score / old[n].max_score
              for n in names)
    if raw <= 1e-9 or abs(now - raw) <= 1e-9:
        return tuple(deductions)

    def factor(code: str) -> float:
        homes = [n for n in HOME.get(code, ()) if n in old and n in new and old[n].max_score]
        if not homes:
            return now / raw
        return sum(new[n].max_score for n in homes) / sum(old[n].max_score for n in homes)
    scaled = [x.points * factor(x.code) for x in deductions]
    total = sum(scaled)
    norm = now / total if total > 1e-9 else 0.0
    return tuple(replace(x, points=round(v * norm, 2)) for x, v in zip(deductions, scaled))


def released(result: CheckResult, blockers) -> CheckResult:
    """A measurement held back by failures that named mistakes explain, graded on the
    student's own code."""
    if result.status is Status.PASSED:
        return result
    return replace(result, feedback=f"graded although {', '.join(sorted(blockers))} failed "
                   "(a named mistake's doing, charged at its price): " + result.feedback)


def _home_first(explained: list[str], deductions) -> list[str]:
    """The explained checks, the mistakes' home checks first (they keep the charge)."""
    homes = [name for x in deductions for name in HOME.get(x.code, ()) if name in explained]
    rest = [name for name in explained if name not in homes]
    return list(dict.fromkeys(homes)) + rest


def _give_back(by_name: dict, order: list[str], amount: float) -> dict:
    """Points back to explained checks (those furthest from the mistakes' homes first)."""
    by_name = dict(by_name)
    for name in order:
        if amount <= 1e-9:
            break
        r = by_name[name]
        back = min(amount, r.max_score - r.score)
        if back > 0:
            by_name[name] = replace(r, score=r.score + back, feedback=_priced(r.feedback))
            amount -= back
    return by_name


def _take(by_name: dict, order: list[str], amount: float, deductions) -> dict:
    """The rest of the mistakes' prices from their explained checks, home checks first (a
    check error carried forward cleared is then failed again, at this one price)."""
    by_name = dict(by_name)
    codes = ", ".join(x.code for x in deductions)
    for name in order:
        if amount <= 1e-9:
            break
        r = by_name[name]
        take = min(amount, r.score)
        if take > 0:
            by_name[name] = replace(r, score=r.score - take, status=Status.FAILED,
                                    feedback=(r.feedback + " " if r.feedback else "")
                                    + f"(charged for {codes}: one price per mistake)")
            amount -= take
    return by_name


def _priced(feedback: str) -> str:
    note = "(points given back: this failure is a named mistake's, charged once at its price)"
    return feedback if note in feedback else (feedback + " " if feedback else "") + note
