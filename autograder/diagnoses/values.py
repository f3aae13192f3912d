"""Diagnoses of value mistakes: the submission behaves like a mistake of mutants.py.

Each is decided on the inputs the checks already ran (``probe.evidence``), both at
the level of the function and of the module's forward, since a mistake can live in
forward's own code while the standalone function is right (or the other way round).
"""
from __future__ import annotations

import functools

import torch

from ..compare import within
from ..sandbox.probes import _prepare
from . import diagnosis
from . import mutants as m


def _close(a, b) -> bool:
    """Equal to float32's precision: a computation done partly in float32 (charged once, at
    the precision checks) is still the same computation, or the same mistake; the mistakes
    themselves differ from the reference by far more."""
    if type(a) is not torch.Tensor or type(b) is not torch.Tensor or a.shape != b.shape \
            or a.is_complex() or b.is_complex():
        return False
    a, b = a.to(torch.float64), b.to(torch.float64)
    close = within(a, b, rtol=1e-4, atol=1e-6)        # the common cases, in one reduction
    return close if close is not None else bool(torch.allclose(a, b, rtol=1e-4, atol=1e-6,
                                                                equal_nan=True))


def _same(a, b) -> bool:
    if isinstance(b, tuple):
        return isinstance(a, tuple) and len(a) == len(b) and all(map(_same, a, b))
    return _close(a, b)


#: What .view() raises on memory it cannot describe: code written with .view where the
#: mistake's example uses .reshape raises on the checks' non-contiguous inputs.
VIEW_ERRORS = ("view size is not compatible", "use .reshape", "contiguous")


def _view_error(result) -> bool:
    message = str(result.get("raised", {}).get("message", "")).lower()
    return any(text in message for text in VIEW_ERRORS)


def as_reference(records) -> bool:
    """The student's function gave the reference's answer on every case (so no mistake can
    be told from it: ``behaves_like`` needs a case where the student does the mistake's
    other thing). One pass, where trying each candidate mistake would simulate it."""
    return bool(records) and all(_right(records))


#: records (by id) -> (the records, how many, whether each case's answer is the reference's):
#: every candidate mistake reads the same cases, so each is compared with the reference once
_RIGHT: dict = {}


def _right(records) -> list[bool]:
    kept = _RIGHT.get(id(records))
    if kept is None or kept[0] is not records or kept[1] != len(records):
        if len(_RIGHT) >= 256:
            _RIGHT.clear()
        kept = _RIGHT[id(records)] = (records, len(records), [
            "value" in result and _same(result["value"], expected)
            for _, result, expected in records])
    return kept[2]


def behaves_like(records, mistake) -> bool:
    """True if the student does what the mistake does on at least one case where the mistake
    differs from the reference, and on every such case either does that (raises the mistake's
    exception where it raises, the same values where it returns) or the reference's thing: a mistake that shows
    in some configurations only is still that mistake. A .view() that cannot take a
    non-contiguous input is no evidence either way."""
    if as_reference(records):
        return False                     # no case where it does another thing than the reference
    telling = 0
    for (case, result, expected), right in zip(records, _right(records)):
        args = [_prepare(a) for a in case.args]
        try:
            predicted = mistake(*args)
        except Exception as e:
            if "raised" not in result:
                if right and not isinstance(e, m.Raises):
                    continue
                return False
            if not m.same_failure(e, result["raised"]):
                return False        # it raises here, but not this mistake's exception
            telling += 1
            continue
        if "raised" in result:
            if _view_error(result):
                continue
            return False            # the mistake runs here; the student's code does not
        if _same(predicted, expected):
            continue
        if _same(result.get("value"), predicted):
            telling += 1
        elif not right:
            return False
    return telling > 0 and any("value" in result for _, result, _ in records)


def calls(probe, fn):
    return probe.evidence.calls.get(fn, [])


def forward_behaves_like(probe, **mistake) -> bool:
    """The module's forward matches simulate(..., **mistake) on at least one run where that
    differs from the reference, and on every such run matches it or the reference. Read on
    the module as the student wrote it, and on the module graded with the reference's parts
    in place of the student's wrong ones (``carried``: its own mistakes, alone)."""
    return any(_forward_like(flat, **mistake) for flat in telling_runs(probe))


def module_runs(probe) -> tuple[list, list]:
    """The module's forwards as written, and as graded with the reference's parts in place of
    the student's wrong ones (error carried forward)."""
    carried = probe.evidence.carried
    return probe.evidence.mha, carried.mha if carried is not None else []


def telling_runs(probe) -> tuple[list, list]:
    """``module_runs`` as the simulations read them, once per submission: each a flat list
    of the eval-mode forwards (num_heads, state, run, student's out, reference's out,
    whether those two differ, the simulated outputs judged against the student's so far:
    ``_like_student``), those that differ first, so that a mistake the evidence
    contradicts is turned down at its first simulation; a list where no forward differs is
    left empty, since no mistake can be told from it (a telling run is one where the
    student's answer is the mistake's, not the reference's)."""
    store = probe.evidence
    if store.telling_runs is None:
        store.telling_runs = tuple(_flat(observed) for observed in module_runs(probe))
    return store.telling_runs


def _flat(observed) -> list:
    flat = [(config.num_heads, ref["state"], run, s["out"], r["out"],
             not _close(s["out"], r["out"]), {})
            for config, runs, student, ref in observed if ref.get("state") is not None
            for run, s, r in zip(runs, student["runs"], ref["runs"]) if not run.get("train")]
    return sorted(flat, key=lambda f: not f[5]) if any(f[5] for f in flat) else []


def _forward_like(flat, **mistake) -> bool:
    """On the runs of ``telling_runs``: the verdict does not depend on their order (every
    run must agree; one that contradicts, or where the mistake raises, decides)."""
    telling = 0
    for num_heads, state, run, student, reference, differs, judged in flat:
        try:
            out, _ = m.simulate(state, num_heads, run, **mistake)
        except m.Raises:
            return False        # it would have raised here, and the forward ran
        except Exception:
            continue            # a mistake that cannot run gives no evidence either way
        if m.kept_verdict(_close, out, reference):
            continue
        if _like_student(judged, student, out):
            telling += 1
        elif differs:
            return False
    return telling > 0


def _like_student(judged: dict, student, out) -> bool:
    """``_close(student, out)``, judged once per simulated output (many switches give the
    same one: a mask's on a run without lengths): ``judged`` is the run's own, so the
    submission's answers stay with its evidence, and holds each output it judged, so an id
    is not reused while it is there."""
    hit = judged.get(id(out))
    if hit is None:
        hit = judged[id(out)] = (out, _close(student, out))
    return hit[1]


def function_or_forward(fn, mistake, **module_mistake):
    def decide(probe, results):
        return behaves_like(calls(probe, fn), mistake) or \
            (bool(module_mistake) and forward_behaves_like(probe, **module_mistake))
    return decide


#: code -> message of each value diagnosis (``diagnose`` names a code ``compose`` forces too)
MESSAGES: dict[str, str] = {}


def register(code, message, decide):
    MESSAGES[code] = message
    diagnosis(code)(lambda probe, results: message if decide(probe, results) else None)


# ---- head layout ---------------------------------------------------------------------

register("split.no-transpose",
         "split_heads reshapes (batch, n, heads*p) straight to (batch, heads, n, p), so 'head j' "
         "is a run of the flattened (position, feature) sequence, not column block j of every "
         "position. Reshape to (batch, n, heads, p) first, then transpose(1, 2).",
         function_or_forward("split_heads", m.split_no_transpose, split=m.split_no_transpose))
register("split.wrong-head-order",
         "split_heads factors the feature axis as (p, heads) instead of (heads, p): head j gets "
         "the strided columns j, j+heads, … instead of the block [j*p, (j+1)*p). Reshape to "
         "(batch, n, heads, p), not (batch, n, p, heads).",
         function_or_forward("split_heads", m.split_wrong_order, split=m.split_wrong_order))
register("concat.no-transpose",
         "concat_heads reshapes (batch, heads, n, p) straight to (batch, n, heads*p) without moving "
         "the head axis back, which mixes positions and heads. Transpose(1, 2) first, then reshape.",
         function_or_forward("concat_heads", m.concat_no_transpose, concat=m.concat_no_transpose))


def _view_noncontiguous(probe, results):
    records = calls(probe, "concat_heads")
    raised = [r for _, r, _ in records if "raised" in r]
    return bool(raised) and behaves_like(records, m.concat_view)


register("concat.view-noncontiguous",
         "concat_heads calls .view() on the transposed tensor, whose memory is not contiguous, so it "
         "raises whenever heads > 1 and n > 1. Use .reshape(...) (or .contiguous().view(...)).",
         _view_noncontiguous)

# ---- projections and the module ---------------------------------------------------------

register("proj.heads-no-permute",
         "project_heads multiplies by all heads at once as one (d, heads*p) matrix and reshapes the "
         "(batch, n, heads*p) result straight to (batch, heads, n, p), mixing positions and heads. "
         "Reshape to (batch, n, heads, p) and transpose, or broadcast H.unsqueeze(1) @ W_heads.",
         function_or_forward("project_heads", m.project_heads_no_permute))
register("proj.transposed-weight",
         "forward multiplies by nn.Linear's weight as if it were the row-vector (d, p) matrix; "
         "nn.Linear stores (out_features, in_features), so the row-vector matrix is weight.T "
         "(or just call the layer: self.W_q(X)).",
         lambda p, r: forward_behaves_like(p, proj="transposed-weight")
         or forward_behaves_like(p, proj="transposed-weight-qkv"))
register("proj.ignores-bias",
         "the projections are done by hand with .weight and the biases are never added, so the "
         "output is wrong whenever bias=True. Add the bias, or call the layer: self.W_q(X).",
         lambda p, r: forward_behaves_like(p, proj="ignores-bias")
         or forward_behaves_like(p, proj="ignores-bias-qkv"))
register("module.self-attention-only",
         "forward projects the queries for the keys and values too, as if it were always "
         "self-attention. Use W_k on keys and W_v on values.",
         lambda p, r: forward_behaves_like(p, kv="self"))
def _reached(grad) -> bool:
    return type(grad) is torch.Tensor and bool(grad.abs().max() > 0)


def _out_proj_gets_no_gradient(probe, results) -> bool:
    """W_o gets no gradient (none, or exactly zero) where the reference's W_o gets one, while
    the heads reach the output (W_v's gradient does): the output does not go through
    self.W_o, e.g. an nn.Linear built inside forward, new and untrained on every call."""
    telling = False
    for observed in module_runs(probe):
        for config, runs, student, ref in observed:
            for s, r in zip(student["runs"], ref["runs"]):
                mine, theirs = s.get("grads") or {}, r.get("grads") or {}
                if not _reached(theirs.get("W_o.weight")) or not _reached(mine.get("W_v.weight")):
                    continue
                if _reached(mine.get("W_o.weight")):
                    return False
                telling = True
    return telling


register("module.missing-out-proj",
         "forward's output does not go through the output projection self.W_o: it returns the "
         "concatenated heads, or applies another layer (e.g. an nn.Linear built inside forward, "
         "new and untrained on every call), so W_o never acts and gets no gradient. Return "
         "self.W_o(concat_heads(...)).",
         lambda p, r: forward_behaves_like(p, out_proj=False) or _out_proj_gets_no_gradient(p, r))


def _dropout_in_eval(probe, results):
    return any(e.eval_nondeterministic for e in probe.evidence.both())


register("module.dropout-in-eval",
         "attention dropout stays active after model.eval(): two eval-mode forwards on the same "
         "inputs differ. Use self.dropout = nn.Dropout(p) (it follows train/eval), or pass "
         "training=self.training to F.dropout.", _dropout_in_eval)

# ---- pooling ----------------------------------------------------------------------------

register("pool.no-scale",
         "the scores are Q Kᵀ without the 1/sqrt(p) scaling, so the weights are too peaked. "
         "Divide the scores by math.sqrt(p), p the head dimension Q.shape[-1].",
         function_or_forward("attention_pool", functools.partial(m.pool, scale=1.0), scale=1.0))


def _scale_d_model(probe, results):
    if behaves_like(calls(probe, "attention_pool"), functools.partial(m.pool, scale=1.0)):
        return False
    return forward_behaves_like(probe, scale="d_model") or forward_behaves_like(probe, scale="d_total")


register("pool.scale-d-model",
         "forward scales the scores by 1/sqrt(d_model) (the full width) instead of 1/sqrt(p), the "
         "head dimension d_total/num_heads, so the weights are too flat. Scale by the per-head width.",
         _scale_d_model)
register("pool.softmax-wrong-axis",
         "the softmax normalises over the query axis (dim=-2) instead of the key axis, so the "
         "weight rows do not sum to 1. Use softmax(..., dim=-1).",
         lambda p, r: behaves_like(calls(p, "masked_softmax"),
                                   functools.partial(m.softmax, dim=-2))
         or behaves_like(calls(p, "attention_pool"), functools.partial(m.pool, dim=-2))
         or forward_behaves_like(p, dim=-2))


def _unmasked(records):
    """The calls without lengths: a mistake of the product itself shows there, and a shape
    error the mask raises is no evidence of it."""
    return [record for record in records if len(record[0].args) < 4 or record[0].args[3] is None]


register("pool.transpose-wrong-axes",
         "K is transposed with fixed axes (e.g. K.transpose(1, 2), the 3-D idiom) which is wrong "
         "for 4-D per-head tensors. Transpose the last two axes: K.transpose(-2, -1).",
         lambda p, r: behaves_like(_unmasked(calls(p, "attention_pool")),
                                   functools.partial(m.pool, transpose=(1, 2))))


# ---- masking ----------------------------------------------------------------------------

MASK_MESSAGES = {
    "wrong-axis": "the length mask is laid along the query axis (rows i >= len blanked) instead "
                  "of the key axis: keys at positions >= valid length must get weight 0.",
    "ignores-valid-lens": "valid_lens is accepted but never takes effect: the masked results equal "
                          "the unmasked ones. Pass valid_lens on to the softmax and mask the keys.",
    "zero-len-nan": "rows with valid length 0 come out NaN (or their gradients do, where the NaN "
                    "is cleaned after the softmax): a -inf fill makes softmax 0/0 there. Fill "
                    "with torch.finfo(dtype).min and zero the masked weights afterwards.",
    "zero-len-uniform": "rows with valid length 0 are left as they are (a large finite fill or "
                        "penalty and nothing else): uniform weights 1/n_k, or the unmasked "
                        "softmax where the penalty is added; a row with no valid key must get "
                        "all-zero weights and an all-zero output. Zero the masked weights after "
                        "the softmax.",
    "after-softmax": "the softmax runs over all keys and the masked weights are zeroed afterwards "
                     "without renormalising, so partial rows sum to less than 1. Mask the scores "
                     "before the softmax.",
    "repeat-not-interleave": "the lengths are spread over the rows (or heads) in another order "
                             "than the rows themselves, so masks land on other examples: each "
                             "example's length must follow its own rows. With heads folded into "
                             "the batch batch-major (reshape then transpose: row b*num_heads + h) "
                             "use valid_lens.repeat_interleave(num_heads, dim=0); folded "
                             "head-major (torch.cat of torch.split: row h*batch + b) use "
                             "valid_lens.repeat(num_heads); or keep the head axis and broadcast "
                             "valid_lens[:, None, None, None].",
}


def _mask_decider(code):
    def decide(probe, results):
        return any(behaves_like(calls(probe, "masked_softmax"),
                                functools.partial(m.softmax, mistake=variant))
                   or behaves_like(calls(probe, "attention_pool"),
                                   functools.partial(m.pool, mask=variant))
                   or forward_behaves_like(probe, mask=variant)
                   for variant in m.MASK_VARIANTS[code])
    return decide


def _empty_rows(run) -> torch.Tensor | None:
    """(batch, n_q) True where a query row has no valid key, from a forward's valid_lens."""
    lens = run.get("valid_lens")
    if type(lens) is not torch.Tensor:
        return None
    batch, n_q = run["queries"].shape[:2]
    lens = lens.reshape(batch, 1).expand(batch, n_q) if lens.dim() == 1 else lens
    return lens.reshape(batch, n_q) == 0


def _nan_gradients_of_empty_rows(probe, results) -> bool:
    """The NaN of an all -inf row cleaned after the softmax (nan_to_num, where): the forward is
    right, but backward through the 0/0 still gives NaN, in the gradients of those rows'
    queries only, where the reference's are finite."""
    telling = False
    for observed in module_runs(probe):
        for config, runs, student, ref in observed:
            for run, s, r in zip(runs, student["runs"], ref["runs"]):
                empty = _empty_rows(run)
                mine, theirs = (x.get("grads", {}).get("queries") for x in (s, r))
                if empty is None or not empty.any() or type(mine) is not torch.Tensor \
                        or type(theirs) is not torch.Tensor or mine.shape != theirs.shape:
                    continue
                if not torch.isfinite(s["out"]).all() or not torch.isfinite(theirs).all():
                    continue
                nan_rows = torch.isnan(mine).any(dim=-1)
                if nan_rows.any():
                    if (nan_rows & ~empty).any():
                        return False         # NaN beyond the empty rows: some other cause
                    telling = True
    return telling


def _either(*deciders):
    return lambda probe, results: any(decide(probe, results) for decide in deciders)


MASK_MISTAKES = tuple(MASK_MESSAGES)
_DECIDERS = {name: _mask_decider(name) for name in MASK_MISTAKES}
_DECIDERS["zero-len-nan"] = _either(_DECIDERS["zero-len-nan"], _nan_gradients_of_empty_rows)

for _name, _message in MASK_MESSAGES.items():
    register(f"mask.{_name}", _message, _DECIDERS[_name])

# ---- shapes and API rules ------------------------------------------------------------------


def _full_width(probe, results):
    seen = probe.evidence.head_weight_shape
    telling = [(args, out) for args, out in seen if args[2] > 1]
    return bool(telling) and all(tuple(out) == (args[0], args[1]) if isinstance(out, (tuple, list))
                                 else False for args, out in telling)


register("shape.head-weight-full-width",
         "head_weight_shape returns a full-width head (d, d_total); each of the num_heads heads "
         "gets only d_total // num_heads columns.", _full_width)
register("shape.no-valueerror",
         "an impossible head count is not reported with ValueError (an assert raises AssertionError, "
         "and nothing at all under python -O). Raise ValueError with a clear message.",
         lambda p, r: bool(p.evidence.no_valueerror))


def changed_inputs(evidence) -> list[str]:
    """The functions that changed an input in place, as the grader judged from the bytes."""
    return sorted({fn for e in evidence.both() for fn, records in e.calls.items()
                   if any(r.get("mutated") for _, r, _ in records)})


def _mutates(probe, results):
    return bool(changed_inputs(probe.evidence))


register("api.mutates-input",
         "a function writes into its input tensor in place (e.g. scores.masked_fill_ or "
         "X[mask] = value on the caller's scores), so the caller's data changes. Work on a copy: "
         "masked_fill (no underscore) returns a new tensor.", _mutates)
