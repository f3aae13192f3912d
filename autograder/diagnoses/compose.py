"""Mistakes that come together: the smallest combination of the TAXONOMY's mistakes that
explains what the submission did.

Real code carries several mistakes, and a rule that asks the whole function or module to
behave like "the reference plus one mistake" is vetoed by any other. Here each function is
explained on its own inputs by a combination of its mistakes (a softmax over the wrong axis
*and* lengths repeated the wrong way), and the module's forward by a combination of module
mistakes on top of what its parts were found to do: first on the module graded with the
reference's parts in place of the student's wrong ones (error carried forward), then on the
module as written. A combination counts only when it explains every case where it differs
from the reference, so nothing is named that the evidence does not force; where two
combinations of the same size explain the same evidence, only what they share is named.
"""
from __future__ import annotations

import functools
import itertools

from . import mutants as m
from .values import (MASK_MISTAKES, _close, _forward_like, as_reference, behaves_like, calls,
                     module_runs, telling_runs)

#: Module-level mistakes as switches of ``mutants.simulate`` (alternatives for one code).
MODULE: dict[str, list[dict]] = {
    "split.no-transpose": [{"split": m.split_no_transpose}],
    "split.wrong-head-order": [{"split": m.split_wrong_order}],
    "concat.no-transpose": [{"concat": m.concat_no_transpose}],
    "proj.transposed-weight": [{"proj": "transposed-weight"}, {"proj": "transposed-weight-qkv"}],
    "proj.ignores-bias": [{"proj": "ignores-bias"}, {"proj": "ignores-bias-qkv"}],
    "proj.qkv-aliased": [{"aliased": True}],
    "module.self-attention-only": [{"kv": "self"}],
    "module.missing-out-proj": [{"out_proj": False}],
    "pool.no-scale": [{"scale": 1.0}],
    "pool.scale-d-model": [{"scale": "d_model"}, {"scale": "d_total"}],
    "pool.softmax-wrong-axis": [{"dim": -2}, {"dim": 1}],
    **{f"mask.{code}": [{"mask": variant} for variant in m.MASK_VARIANTS[code]]
       for code in MASK_MISTAKES},
}


#: The softmax's axis: the key axis (right), the query axis, or a fixed axis 1 (the 3-D
#: idiom, which is the head axis of 4-D per-head scores).
AXES = (-1, -2, 1)


def _function_candidates() -> dict[str, list[tuple[frozenset, object]]]:
    """fn -> (codes, the function with those mistakes), combinations included."""
    masks = (None, *m.CODE_OF_VARIANT)
    softmax = [(frozenset(_codes(mask=mask, dim=dim)),
                functools.partial(m.softmax, mistake=mask, dim=dim))
               for mask, dim in itertools.product(masks, AXES) if (mask, dim) != (None, -1)]
    pool = [(frozenset(_codes(mask=mask, dim=dim, scale=scale, transpose=t)),
             functools.partial(m.pool, mask=mask, dim=dim, scale=scale, transpose=t))
            for mask, dim, scale, t in itertools.product(masks, AXES, (None, 1.0),
                                                         ((-2, -1), (1, 2)))
            if (mask, dim, scale, t) != (None, -1, None, (-2, -1))]
    return {"masked_softmax": softmax, "attention_pool": pool}


def _codes(*, mask=None, dim=-1, scale=None, transpose=(-2, -1)) -> list[str]:
    return ([f"mask.{m.CODE_OF_VARIANT[mask]}"] if mask else []) \
        + (["pool.softmax-wrong-axis"] if dim != -1 else []) \
        + (["pool.no-scale"] if scale == 1.0 else []) \
        + (["pool.transpose-wrong-axes"] if transpose != (-2, -1) else [])


FUNCTIONS = _function_candidates()


def explained(probe) -> frozenset:
    """Every code that the smallest explaining combinations force, functions and module.
    ``evidence.functions_simulated``: function -> the codes whose simulation together
    gives each of its answers that is not the reference's (``prices``)."""
    store = probe.evidence
    if store.composed is None:
        found, store.functions_simulated = set(), {}
        for fn, candidates in FUNCTIONS.items():
            records = calls(probe, fn)
            if as_reference(records):
                continue                 # no mistake is told by a function that is right
            codes = _smallest(candidates, lambda mistake: behaves_like(records, mistake))
            store.functions_simulated[fn] = frozenset(codes)
            found |= codes
        module, store.module_simulated = _module(probe, found)
        found |= module
        store.composed = frozenset(found)
    return store.composed


def _smallest(candidates, explains) -> set:
    """The codes shared by every explaining candidate of the smallest size."""
    for size in sorted({len(codes) for codes, _ in candidates}):
        hits = [codes for codes, mistake in candidates if len(codes) == size and explains(mistake)]
        if hits:
            return set(frozenset.intersection(*hits))
    return set()


def _module(probe, function_codes: set) -> tuple[set, frozenset]:
    """Module mistakes (at most two on top of what its parts do, or two and one of the
    mask's) that explain its forwards;
    and every code whose simulation gives the module's own forwards exactly, the parts'
    included (``prices``: the module's failures are then those mistakes' doing)."""
    base, based = {}, set()
    for code in sorted(function_codes):
        for switch in MODULE.get(code, [])[:1]:
            base = m.merged(base, switch) or {**base, **switch}
            based.add(code)
    plain, carried = module_runs(probe)
    plain_flat, carried_flat = telling_runs(probe)
    simulated = frozenset(based) if plain and base and _all_like(plain, base) else frozenset()
    for observed, flat, start in ((carried, carried_flat, {}), (plain, plain_flat, base),
                                  (plain, plain_flat, {})):
        if not observed or _all_like(observed, start):
            continue                   # nothing of the module's own is left to explain here
        found = _combinations(flat, start) or _with_a_mask(observed, flat, start)
        if found:
            if observed is plain:
                simulated = frozenset(found | (based if start else set()))
            return found, simulated
    return set(), simulated


def simulated(probe, codes) -> frozenset:
    """The named codes whose simulation, all together, gives every forward of the module as
    written (``prices``: the module's failures are then those mistakes' doing): the largest
    such set among the named codes that have a module switch, each with its alternatives."""
    plain, _ = module_runs(probe)
    named = sorted(code for code in codes if code in MODULE)
    if not plain or not named:
        return frozenset()
    for size in range(len(named), 0, -1):
        for subset in itertools.combinations(named, size):
            for choice in itertools.product(*(MODULE[code] for code in subset)):
                switch: dict | None = {}
                for one in choice:
                    switch = m.merged(switch, one)
                    if switch is None:
                        break
                if switch is not None and _all_like(plain, switch):
                    return frozenset(subset)
    return frozenset()


def _all_like(observed, switch: dict) -> bool:
    """Every forward as ``simulate(**switch)`` gives it (no switch: the reference's output)."""
    for config, runs, student, ref in observed:
        state = ref.get("state")
        for run, s, r in zip(runs, student["runs"], ref["runs"]):
            if run.get("train"):
                continue
            try:
                out = m.simulate(state, config.num_heads, run, **switch)[0] if switch else r["out"]
            except Exception:
                return False
            if state is None or not _close(s["out"], out):
                return False
    return True


def _module_candidates() -> list[tuple[frozenset, dict]]:
    """(codes, switch) for each module mistake and each pair that can hold together."""
    singles = [(frozenset([code]), switch) for code, alts in MODULE.items() for switch in alts]
    pairs = [(a | b, both) for (a, sa), (b, sb) in itertools.combinations(singles, 2)
             if (both := m.merged(sa, sb)) is not None]
    return singles + pairs


MODULE_CANDIDATES = _module_candidates()


def _combinations(flat, start: dict) -> set:
    def explains(switch):
        whole = m.merged(start, switch)
        return whole is not None and _forward_like(flat, **whole)
    return _smallest(MODULE_CANDIDATES, explains)


#: Module mistakes of the mask, and (codes, switch) of those that touch no mask (one or two)
MASKS = [(frozenset([code]), switch) for code, alts in MODULE.items() if code.startswith("mask.")
         for switch in alts]
UNMASKED_CANDIDATES = [(codes, switch) for codes, switch in MODULE_CANDIDATES
                       if "mask" not in switch]


def _with_a_mask(observed, flat, start: dict) -> set:
    """Three module mistakes, one of them the mask's. A mask mistake changes no forward
    without valid_lens, so the others are found on those forwards first (at most two, each
    tried until its first forward that differs), then one mask mistake on top of each, on
    every forward (``flat``: them as ``values.telling_runs`` gives them): some hundred
    simulations where every triple would take thousands."""
    unmasked = _unmasked(observed)
    if not unmasked:
        return set()
    hits = []
    for codes, switch in UNMASKED_CANDIDATES:
        whole = m.merged(start, switch)
        if whole is None or not _all_like(unmasked, whole):
            continue
        for mask_codes, mask in MASKS:
            both = m.merged(whole, mask)
            if both is not None and _forward_like(flat, **both):
                hits.append(codes | mask_codes)
    if not hits:
        return set()
    size = min(len(h) for h in hits)
    return set(frozenset.intersection(*[h for h in hits if len(h) == size]))


def _unmasked(observed) -> list:
    """The observed forwards without valid_lens (and not in training mode)."""
    out = []
    for config, runs, student, ref in observed:
        keep = [i for i, run in enumerate(runs)
                if run.get("valid_lens") is None and not run.get("train")]
        if keep:
            out.append((config, [runs[i] for i in keep],
                        {**student, "runs": [student["runs"][i] for i in keep]},
                        {**ref, "runs": [ref["runs"][i] for i in keep]}))
    return out
