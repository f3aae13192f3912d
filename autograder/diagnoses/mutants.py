"""The mistakes of the TAXONOMY, written out in torch.

A diagnosis fires when the submission behaves like one of these (and not like the
reference) on the inputs the checks already used: same values where the mistake
returns, an exception where the mistake raises. Each function mirrors the API function
it replaces, or is a switch of ``simulate``, a functional forward of the module.
"""
from __future__ import annotations

import math
import re

import torch

LOWEST = torch.finfo(torch.float64).min


class Raises(RuntimeError):
    """The mistake raises here, and that is its symptom: code that runs here does not have it
    (other failures of a simulation only mean it cannot say). ``expect(info)`` says whether
    an exception the submission raised (type and message, as the probe reports it) is this
    mistake's: code that raises something else here does not have it either."""

    def __init__(self, message: str, *, expect=None):
        super().__init__(message)
        self.expect = expect


_BROADCAST = re.compile(r"size of tensor a \((\d+)\) must match the size of tensor b "
                        r"\((\d+)\) at non-singleton dimension (\d+)")


def broadcast_error(a: int, b: int, dim: int):
    """The exception of two sizes a and b meeting in one axis (``dim``, counted from the front
    of the broadcast shape), in either order: a mask laid on the wrong axis of the scores."""
    def expect(info: dict) -> bool:
        found = _BROADCAST.search(str(info.get("message", "")))
        return info.get("type") == "RuntimeError" and found is not None \
            and {int(found.group(1)), int(found.group(2))} == {a, b} and int(found.group(3)) == dim
    return expect


#: The kinds of failure a simulation and a submission can share: the same kind of exception
#: at the same kind of operation (a view of strided memory, shapes that do not fit, two
#: dtypes); any other exception is known by its type and message.
FAILURE_KINDS = (("view", re.compile(r"view size is not compatible|use \.reshape|contiguous", re.I)),
                 ("dtype", re.compile(r"dtype|scalar type", re.I)),
                 ("shape", re.compile(r"size|shape|dimension|broadcast|cannot be multiplied|"
                                      r"out of range|mismatch", re.I)))


def failure_kind(type_name: str, message: str) -> str:
    for kind, pattern in FAILURE_KINDS:
        if pattern.search(message):
            return kind
    return f"{type_name}: {message}"


def same_failure(error: Exception, info: dict) -> bool:
    """Whether the submission's exception (``info``) is what the simulation raised here."""
    if isinstance(error, Raises) and error.expect is not None:
        return bool(error.expect(info))
    same_type = info.get("type") == type(error).__name__ or (
        isinstance(error, RuntimeError) and info.get("type") in ("RuntimeError", "IndexError"))
    return same_type and failure_kind(type(error).__name__, str(error)) == \
        failure_kind(str(info.get("type")), str(info.get("message", "")))


# ---- masked softmax variants --------------------------------------------------------

def _lens(scores, valid_lens):
    """valid_lens shaped to broadcast against scores' (batch, ..., n_q, 1)."""
    if valid_lens.dim() == 1:
        return valid_lens.reshape(-1, *(1,) * (scores.dim() - 1))
    return valid_lens.reshape(-1, *(1,) * (scores.dim() - 3), scores.shape[-2], 1)


def key_mask(scores, valid_lens):
    return torch.arange(scores.shape[-1]) < _lens(scores, valid_lens)


def _lens_repeated_per_head(scores, valid_lens):
    """Heads folded into the batch ((batch·heads) rows, head fastest) with the lengths copied
    by ``.repeat(heads)``: row b·heads + j takes example (b·heads + j) mod batch's lengths."""
    batch, heads = scores.shape[:2]
    rows = (torch.arange(batch * heads) % batch).reshape(batch, heads)
    lens = valid_lens[rows]                                   # (batch, heads[, n_q])
    return lens.reshape(batch, heads, *(1,) * (scores.dim() - 3 - (valid_lens.dim() - 1)),
                        *valid_lens.shape[1:], 1)


def _lens_repeated_per_row(scores, valid_lens):
    """One length per query row copied by ``.repeat(n_q)`` from (batch,) lengths: row (b, i)
    takes example (b·n_q + i) mod batch's length, the same for every head."""
    batch, n_q = scores.shape[0], scores.shape[-2]
    if valid_lens.dim() != 1:
        return _lens(scores, valid_lens)
    lens = valid_lens.repeat(n_q).reshape(batch, n_q)
    return lens.reshape(batch, *(1,) * (scores.dim() - 3), n_q, 1)


#: Each masking mistake of the TAXONOMY, by the ways it is written (its simulations below).
MASK_VARIANTS = {
    "wrong-axis": ("wrong-axis",
                   "wrong-axis-square"),        # the key mask turned onto the query axis as is
    "ignores-valid-lens": ("ignores-valid-lens",),
    "zero-len-nan": ("zero-len-nan",),
    "zero-len-uniform": ("zero-len-uniform",
                         "zero-len-unmasked"),  # a finite penalty added: empty rows as if unmasked
    "after-softmax": ("after-softmax",),
    "repeat-not-interleave": ("repeat-not-interleave",
                              "repeat-per-row",     # one length per query row, shared by heads
                              "repeat-per-head"),   # heads folded into the batch (D2L)
}
CODE_OF_VARIANT = {v: code for code, variants in MASK_VARIANTS.items() for v in variants}


#: Where the lengths land, and what the fill does: one mistake of each can come together.
PLACEMENT = frozenset({"wrong-axis", "wrong-axis-square", "repeat-not-interleave",
                       "repeat-per-row", "repeat-per-head"})
FILL = frozenset({"zero-len-nan", "zero-len-uniform", "zero-len-unmasked", "after-softmax"})


def softmax(scores, valid_lens=None, *, mistake=None, dim=-1):
    """``mistake``: a variant of MASK_VARIANTS, or a tuple of one PLACEMENT and one FILL."""
    if valid_lens is None:
        return torch.softmax(scores, dim=dim)
    kinds = set(mistake) if isinstance(mistake, tuple) else {mistake}
    keep = key_mask(scores, valid_lens)
    if kinds & {"wrong-axis", "wrong-axis-square"}:
        if "wrong-axis-square" in kinds and scores.shape[-2] != scores.shape[-1]:
            raise Raises("a (n_k, 1) mask does not broadcast against (n_q, n_k) scores",
                         expect=broadcast_error(scores.shape[-2], scores.shape[-1],
                                                scores.dim() - 2))
        keep = (torch.arange(scores.shape[-2]).unsqueeze(-1) < _lens(scores, valid_lens))
        keep = keep.expand(scores.shape)
    elif "repeat-per-row" in kinds:
        keep = torch.arange(scores.shape[-1]) < _lens_repeated_per_row(scores, valid_lens)
    elif "repeat-not-interleave" in kinds:
        shape = scores.shape
        if valid_lens.dim() == 1:
            lens = valid_lens.repeat(math.prod(shape[1:-1])).reshape(*shape[:-1], 1)
        else:
            lens = valid_lens.repeat(math.prod(shape[1:-2]), 1).reshape(*shape[:-1], 1)
        keep = torch.arange(shape[-1]) < lens
    elif "repeat-per-head" in kinds:
        keep = torch.arange(scores.shape[-1]) < _lens_repeated_per_head(scores, valid_lens)
    if "ignores-valid-lens" in kinds:
        return torch.softmax(scores, dim=dim)
    if "zero-len-nan" in kinds:
        return torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=dim)
    if "zero-len-uniform" in kinds:
        return torch.softmax(scores.masked_fill(~keep, LOWEST), dim=dim)
    if "zero-len-unmasked" in kinds:
        empty = ~keep.any(dim=-1, keepdim=True)
        return torch.softmax(scores.masked_fill(~keep & ~empty, LOWEST), dim=dim)
    if "after-softmax" in kinds:
        return torch.softmax(scores, dim=dim).masked_fill(~keep, 0.0)
    return torch.softmax(scores.masked_fill(~keep, LOWEST), dim=dim).masked_fill(~keep, 0.0)


def merged(a: dict, b: dict) -> dict | None:
    """Two switches of ``simulate`` as one, or None where they cannot both hold: they may
    share only ``mask``, as one placement and one fill."""
    shared = set(a) & set(b)
    if not shared:
        return {**a, **b}
    if shared != {"mask"} or isinstance(a["mask"], tuple) or isinstance(b["mask"], tuple):
        return None
    pair = {a["mask"], b["mask"]}
    if len(pair & PLACEMENT) != 1 or len(pair & FILL) != 1:
        return None
    return {**a, **b, "mask": tuple(sorted(pair, key=lambda v: v in FILL))}


def pool(Q, K, V, valid_lens=None, *, scale=None, mask=None, dim=-1, transpose=(-2, -1)):
    return attend(scores_of(Q, K, scale, transpose), V, valid_lens, mask=mask, dim=dim)


def scores_of(Q, K, scale=None, transpose=(-2, -1)):
    return Q @ K.transpose(*transpose) / (math.sqrt(Q.shape[-1]) if scale is None else scale)


def attend(scores, V, valid_lens=None, *, mask=None, dim=-1):
    weights = softmax(scores, valid_lens, mistake=mask, dim=dim)
    return weights @ V, weights


# ---- layout variants ----------------------------------------------------------------

def split_no_transpose(X, h):
    return X.reshape(*X.shape[:-2], h, X.shape[-2], X.shape[-1] // h)


def split_wrong_order(X, h):
    return X.reshape(*X.shape[:-1], X.shape[-1] // h, h).movedim(-1, -3)


def split_ok(X, h):
    return X.reshape(*X.shape[:-1], h, X.shape[-1] // h).transpose(-3, -2)


def concat_no_transpose(X):
    h, n, p = X.shape[-3:]
    return X.reshape(*X.shape[:-3], n, h * p)


def concat_view(X):
    h, n, p = X.shape[-3:]
    return X.transpose(-3, -2).view(*X.shape[:-3], n, h * p)


def concat_ok(X):
    h, n, p = X.shape[-3:]
    return X.transpose(-3, -2).reshape(*X.shape[:-3], n, h * p)


def project_heads_no_permute(H, W_heads):
    h, d, p = W_heads.shape
    fused = H @ W_heads.permute(1, 0, 2).reshape(d, h * p)
    return fused.reshape(*H.shape[:-2], h, H.shape[-2], p)


# ---- the module, with switches -------------------------------------------------------

def simulate(state: dict, num_heads: int, run: dict, *, split=split_ok, concat=concat_ok,
             proj="ok", kv="ok", out_proj=True, scale=None, mask=None, dim=-1, aliased=False):
    """Forward of the contract's module from the reference's weights, with the mistakes
    switched on (``aliased``: one nn.Linear serves W_q, W_k and W_v, so the weights loaded
    last, W_v's, are the three's). The composition search simulates hundreds of switches on
    the same runs, most of them sharing the projections and the scores, and many of them
    tried again on another pass: those are kept (``_kept``), the rest is computed anew. A
    mask mistake changes nothing where there are no lengths (``softmax``), so there every
    mask switch is kept as none: a pair of mistakes, one of them the mask's, is the other
    one alone on those runs. So are a bias ignored where there is none, and a scale by name
    (d_model and d_total are one number where d_total is d_model)."""
    if run.get("valid_lens") is None:
        mask = None
    if proj.startswith("ignores-bias") and not any(key.endswith(".bias") for key in state):
        proj = "ok"
    if scale in ("d_model", "d_total"):
        scale = math.sqrt(run["queries"].shape[-1] if scale == "d_model"
                          else state["W_q.weight"].shape[0])
    return _kept((state, run, num_heads, split, concat, proj, kv, out_proj, scale, mask, dim,
                  aliased, "forward"),
                 lambda: _simulated(state, num_heads, run, split, concat, proj, kv, out_proj,
                                    scale, mask, dim, aliased))


def _simulated(state, num_heads, run, split, concat, proj, kv, out_proj, scale, mask, dim,
               aliased):
    projection = (state, run, num_heads, split, proj, kv, aliased)
    Q, K, V = _kept(projection, lambda: _projected(*projection))
    scores = _kept((*projection, scale), lambda: scores_of(Q, K, scale))
    out, weights = attend(scores, V, run.get("valid_lens"), mask=mask, dim=dim)
    heads = concat(out)
    return (_linear(state, heads, "W_o", proj) if out_proj else heads), weights


def _linear(state: dict, x, role: str, proj: str):
    """proj: "<mistake>" on all four projections, or "<mistake>-qkv" on W_q/W_k/W_v only."""
    W, b = state[f"{role}.weight"], state.get(f"{role}.bias")
    mistake = "ok" if proj.endswith("-qkv") and role == "W_o" else proj.removesuffix("-qkv")
    y = x @ W if mistake == "transposed-weight" else x @ W.T
    return y if b is None or mistake == "ignores-bias" else y + b


def _projected(state, run, num_heads, split, proj, kv, aliased):
    """Q, K and V, each split into heads."""
    if aliased:
        state = dict(state, **{f"W_{r}.{kind}": state[f"W_v.{kind}"] for r in "qk"
                               for kind in ("weight", "bias") if f"W_v.{kind}" in state})
    q_in = run["queries"]
    k_in = q_in if kv == "self" else run["keys"]
    v_in = q_in if kv == "self" else run["values"]
    return tuple(split(_linear(state, x, r, proj), num_heads)
                 for x, r in ((q_in, "W_q"), (k_in, "W_k"), (v_in, "W_v")))


#: What ``simulate`` computed, by its inputs: each entry holds the state and the run it was
#: computed from, so their ids (the key) cannot be reused while it is kept; nothing here
#: changes a tensor in place, so a kept one is never altered.
_KEPT: dict = {}
KEPT_LIMIT = 8192


def _kept(inputs: tuple, make):
    key = (id(inputs[0]), id(inputs[1]), *inputs[2:])
    hit = _KEPT.get(key)
    if hit is None:
        if len(_KEPT) >= KEPT_LIMIT:
            _KEPT.clear()
        hit = _KEPT[key] = (inputs[0], inputs[1], make())
    return hit[2]


def kept_verdict(judge, a, b) -> bool:
    """``judge(a, b)`` for two kept tensors (a simulation's output and a reference's), kept
    with them: a switch tried again on another pass is judged once."""
    return _kept((a, b, judge, "verdict"), lambda: judge(a, b))
