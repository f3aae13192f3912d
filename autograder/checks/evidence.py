"""The data behind the structure checks and diagnoses, gathered once per submission.

Each helper runs its probes on both sides (once: results, and the student's errors, are kept
in ``p.evidence.structure``) and returns plain findings. Judging them is left to the
checks in ``structure`` and to the diagnoses; a StudentError propagates to the caller.
"""
from __future__ import annotations

import operator

import torch

from ..sandbox.host import StudentError
from .cases import randn
from .module import Config, inputs

ROLES = ("W_q", "W_k", "W_v", "W_o")
HEADS_CONFIG = Config("distinct-heads", 12, 4, bias=True, batch=2, n_q=4, n_k=5)
P = HEADS_CONFIG.d_model // HEADS_CONFIG.num_heads
SAME, MOVED = 1e-12, 1e-9                      # float64: "identical" and "changed"
INIT_CONFIGS = (Config("init", 12, 4), Config("init-d-total", 8, 2, d_total=12))
HEAD_COUNTS = (1, 2, 4, 8)
TRACES = {"d_total = d_model": {"d_model": 16},
          "d_total != d_model, bias": {"d_model": 16, "d_total": 24, "bias": True}}
#: The measured forwards' sizes, drawn per run (trace_spec). Every forward the grader runs is
#: measured (``probes.forward``), and these are graded like the others: their inputs are
#: drawn as the value checks draw theirs (three tensors, lengths with 0 and full), and their
#: answers are judged against the reference's (``measured_answers``).
TRACE_SIZES = {"batch": (2, 3), "n_q": (3, 4, 5), "n_k": (4, 5, 6)}
KERNELS = {"mm", "bmm", "addmm", "baddbmm", "addbmm", "dot", "mv", "_softmax", "_log_softmax",
           "_safe_softmax", "exp"}
FLOP_SLACK = 0.01
#: All arithmetic of a forward (matrix products and every other operator, by elements) may
#: exceed the reference's by this factor: correct code written otherwise (a broadcast-and-sum
#: product, masks built another way, an extra copy) stays well inside it; M-fold work does not.
WORK_SLACK = 0.5
#: The part of that work that grows with num_heads (the softmax and the masks run on
#: num_heads·n_q·n_k entries) may be at most this many times the reference's growth: work
#: repeated per head over the full width grows M-fold.
GROWTH_SLACK = 2.0


def once(p, key, make):
    """make() once per submission; a StudentError is kept and raised again on every call."""
    store = p.evidence.structure
    if key not in store:
        try:
            store[key] = ("ok", make())
        except StudentError as e:
            store[key] = ("error", e)
    kind, value = store[key]
    if kind == "error":
        raise value
    return value


# --------------------------------------------------------------------------------------
# Distinct heads

def aliased_roles(p) -> list[str]:
    """Names of contract parameters whose memory overlaps another's (first such group)."""
    def make():
        p.student.require("MultiHeadAttention")
        return p.student.mha({"init": HEADS_CONFIG.init}, group="heads")["params"]
    params = [q for q in once(p, "params", make)
              if q["name"].split(".")[0] in ROLES and q["name"].count(".") == 1]
    for i, a in enumerate(params):
        group = [b["name"] for b in params[i + 1:]
                 if b["storage"] == a["storage"] and _overlap(_span(a), _span(b))]
        if group:
            return [a["name"]] + group
    return []


def _span(param: dict) -> tuple:
    """The bytes a parameter spans in its storage (all of it, if the answer does not say)."""
    span = param.get("span")
    ok = isinstance(span, (tuple, list)) and len(span) == 2 and all(type(x) is int for x in span)
    return tuple(span) if ok else (0, float("inf"))


def _overlap(a: tuple, b: tuple) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def heads(p) -> dict:
    """Distinct weights loaded: how far apart the heads are, what perturbing one head's block
    of W_q / W_k moves, and which head blocks get exactly zero gradient."""
    return once(p, "heads", lambda: _heads(p))


def _heads(p) -> dict:
    c, h = HEADS_CONFIG, HEADS_CONFIG.num_heads
    gen = p.generator("heads.distinct")
    seed = int(torch.randint(0, 2**31, (1,), generator=gen))
    base = p.reference.mha({"init": c.init, "seed": seed, "want_state": True}, group="heads")["state"]
    run = inputs(gen, c, grad=True)
    loads, labels = [base], []
    for role in ("W_q", "W_k"):
        for j in range(h):
            weights = {k: v.clone() for k, v in base.items()}
            weights[f"{role}.weight"][j * P:(j + 1) * P] += randn(gen, P, c.d_model)
            loads.append(weights)
            labels.append((role, j))
    forward_only = {k: v for k, v in run.items() if k != "grad"}
    p.student.require("MultiHeadAttention")
    student = p.student.probe("mha_loads", "heads", spec={
        "init": c.init, "seed": seed, "loads": loads, "runs": [run] + [forward_only] * len(labels)})
    runs = student["runs"]
    shape = (c.batch, h, c.n_q, c.n_k)
    if any(not isinstance(r["weights"], torch.Tensor) or tuple(r["weights"].shape) != shape
           for r in runs):
        return {"problem": f"{c.describe()}: self.attention_weights after forward is not a "
                           f"tensor of shape {shape} (batch, num_heads, n_q, n_k)"}
    w0 = runs[0]["weights"].double()
    spread = _spread(w0)
    perturbed = [(role, j, [k for k in range(h)
                            if float((r["weights"].double()[:, k] - w0[:, k]).abs().max()) > MOVED])
                 for (role, j), r in zip(labels, runs[1:])]
    shapes = {f"{role}.weight": tuple(w.shape) for role, w in
              ((r, base[f"{r}.weight"]) for r in ROLES)}
    return {"spread": spread, "perturbed": perturbed,
            **_zero_blocks(runs[0]["grads"], h, shapes)}


def _spread(weights: torch.Tensor) -> float:
    """The largest difference between head 0's attention weights and any other head's."""
    return max(float((weights[:, j] - weights[:, 0]).abs().max()) for j in range(weights.shape[1]))


def _zero_blocks(grads: dict, h: int, shapes: dict) -> dict:
    """Head blocks (rows of W_q/W_k/W_v, columns of W_o) whose gradient is exactly zero."""
    zero, partial = {}, {}
    for role in ROLES:
        g = grads.get(f"{role}.weight")
        if not isinstance(g, torch.Tensor) or tuple(g.shape) != shapes[f"{role}.weight"]:
            g = None
        else:
            g = g.double()
        blocks = ([torch.zeros(1)] * h if g is None else
                  g.reshape(h, -1, g.shape[-1]).unbind(0) if role != "W_o" else
                  g.reshape(g.shape[0], h, -1).unbind(1))
        dead = [j for j, b in enumerate(blocks) if not bool(b.abs().max() > 0)]
        if dead:
            zero[role] = dead
            if len(dead) < h:
                partial[role] = dead
    return {"zero_grad": zero, "partial_zero_grad": partial}


def constructor(c: Config) -> str:
    extra = f", d_total={c.d_total}" if c.d_total is not None else ""
    return f"MultiHeadAttention({c.d_model}, {c.num_heads}{extra}, bias={c.bias})"


#: When a fresh module's head blocks are read: as built, and as its first forward (in training
#: mode, as training starts) left them: heads tied there are judged as the module uses them.
BUILT, FIRST_FORWARD = "right after construction", "after its first forward"


def identical_init(p) -> list[tuple]:
    """(config, seed, role, identical block pairs, when) for each fresh module whose W_q, W_k
    or W_v has two equal head blocks, right after construction or after one training-mode
    forward of its own fresh weights (a forward that raises leaves construction alone judged
    here)."""
    def make():
        found = []
        gen = p.generator("heads.init")
        for c in INIT_CONFIGS:
            d_total, h = c.d_total or c.d_model, c.num_heads
            for seed in torch.randint(0, 2**31, (2,), generator=gen).tolist():
                p.student.require("MultiHeadAttention")
                spec = {"init": c.init, "seed": seed, "want_state": True}
                try:
                    run = dict(inputs(gen, c), train=True)        # as training starts
                    answer = p.student.mha({**spec, "runs": [run],
                                            "want_state_after": True}, group="heads")
                    states = ((BUILT, answer["state"]), (FIRST_FORWARD, answer["state_after"]))
                except StudentError:
                    states = ((BUILT, p.student.mha(spec, group="heads")["state"]),)
                for role in ROLES[:3]:
                    for when, state in states:
                        W = state.get(f"{role}.weight")
                        if W is None or tuple(W.shape) != (d_total, c.d_model):
                            continue
                        blocks = W.reshape(h, d_total // h, c.d_model)
                        pairs = [(j, k) for j in range(h) for k in range(j + 1, h)
                                 if torch.equal(blocks[j], blocks[k])]
                        if pairs:
                            found.append((c, seed, role, pairs, when))
                            break
        return found
    return once(p, "init", make)


def fresh_spread(p) -> float:
    """How far apart the heads' attention weights are with the student's own fresh weights."""
    def make():
        c = HEADS_CONFIG
        gen = p.generator("heads.fresh")
        p.student.require("MultiHeadAttention")
        run = p.student.mha({"init": c.init, "seed": 1, "runs": [inputs(gen, c)]},
                            group="heads")["runs"][0]
        w = run["weights"]
        if not isinstance(w, torch.Tensor) or w.dim() != 4 or w.shape[1] != c.num_heads:
            return None
        return _spread(w.double())
    return once(p, "fresh", make)


# --------------------------------------------------------------------------------------
# Cost parity

def trace_spec(p, name: str) -> dict:
    """The trace request for one configuration: sizes, an input seed and, per head count,
    weights to load, all drawn from the run's seed (the same for both sides)."""
    def make():
        gen = p.generator("trace")
        pick = lambda options: options[int(torch.randint(len(options), (1,), generator=gen))]  # noqa: E731
        shapes = {k: pick(v) for k, v in TRACE_SIZES.items()}
        shapes["seed"] = int(torch.randint(2**31, (1,), generator=gen))
        specs = {}
        for config, init in TRACES.items():
            d, dt = init["d_model"], init.get("d_total", init["d_model"])
            sizes = {"W_q": (dt, d), "W_k": (dt, d), "W_v": (dt, d), "W_o": (d, dt)}

            def weights():
                w = {f"{r}.weight": torch.randn(*s, generator=gen, dtype=torch.float64) / s[1] ** 0.5
                     for r, s in sizes.items()}
                if init.get("bias"):
                    w.update({f"{r}.bias": 0.1 * torch.randn(s[0], generator=gen,
                                                             dtype=torch.float64)
                              for r, s in sizes.items()})
                return w
            sized = Config(config, d, 1, batch=shapes["batch"], n_q=shapes["n_q"],
                           n_k=shapes["n_k"])
            specs[config] = {"heads": list(HEAD_COUNTS), "init": init, "shapes": shapes,
                             "seed": int(torch.randint(2**31, (1,), generator=gen)),
                             "loads": {str(h): weights() for h in HEAD_COUNTS},
                             "runs": {str(h): inputs(gen, sized, masked="1-d")
                                      for h in HEAD_COUNTS}}
        return specs
    return once(p, "trace-spec", make)[name]


def traces(p, side: str) -> dict:
    """{config name: {num_heads: {"params", "ops", "flops", "work", "sync"} or {"params",
    "raised"}}}."""
    def make():
        target = p.student if side == "student" else p.reference
        target.require("MultiHeadAttention")
        return {name: target.probe("trace", "cost", spec=trace_spec(p, name)) for name in TRACES}
    return once(p, ("trace", side), make)


def describe_trace(p, name: str) -> str:
    init, shapes = TRACES[name], trace_spec(p, name)["shapes"]
    extra = f", d_total={init['d_total']}" if "d_total" in init else ""
    return (f"MultiHeadAttention({init['d_model']}, num_heads{extra}, bias={init.get('bias', False)})"
            f", batch {shapes['batch']}, n_q={shapes['n_q']}, n_k={shapes['n_k']}")


def expected_params(name: str) -> int:
    init = TRACES[name]
    d, dt = init["d_model"], init.get("d_total", init["d_model"])
    return 4 * d * dt + ((3 * dt + d) if init.get("bias") else 0)


def key_bias(name: str) -> int:
    """The size of W_k's bias in trace ``name`` (0 without biases): a module may leave it out."""
    init = TRACES[name]
    return init.get("d_total", init["d_model"]) if init.get("bias") else 0


def formula(name: str) -> str:
    init = TRACES[name]
    d, dt = init["d_model"], init.get("d_total", init["d_model"])
    bias = f" + 3·{dt} + {d}" if init.get("bias") else ""
    return f"4·{d}·{dt}{bias} = {expected_params(name)}"


def _in_order(per_head: dict, pick) -> dict:
    """{num_heads: pick(entry)} in the order of HEAD_COUNTS, whatever the answer's order."""
    return {str(h): pick(per_head[str(h)]) for h in HEAD_COUNTS}


def param_counts(p) -> list[tuple]:
    student, ref = traces(p, "student"), traces(p, "reference")
    pick = operator.itemgetter("params")
    return [(name, _in_order(student[name], pick), _in_order(ref[name], pick),
             expected_params(name)) for name in TRACES]


def _per_head(p, pick) -> list[tuple]:
    student, ref = traces(p, "student"), traces(p, "reference")
    out = []
    for name in TRACES:
        for h, e in student[name].items():
            if "raised" in e or "bad" in e:
                info = e.get("raised", {})
                raise StudentError(f"{describe_trace(p, name)}, num_heads={h}: forward failed: "
                                   f"{info.get('type', '')} {info.get('message', e.get('bad'))}",
                                   raised=e.get("raised"))
        out.append((name, _in_order(student[name], pick), _in_order(ref[name], pick)))
    return out


def measured_answers(p) -> list[tuple]:
    """[(what, the student's (out, weights), the reference's)] of the measured forwards:
    graded like the others, so code cannot answer them otherwise."""
    student, ref = traces(p, "student"), traces(p, "reference")
    return [(f"{describe_trace(p, name)}, num_heads={h}", (e["out"], e["weights"]),
             (ref[name][h]["out"], ref[name][h]["weights"]))
            for name in TRACES for h, e in _in_order(student[name], dict).items() if "out" in e] \
        + [(f"{what} with num_heads={RERUN_HEADS}", answer, ref_answer)
           for what, _, _, _, answer, ref_answer in two_head_reruns(p)]


#: The head count a graded forward is measured again at (its two-head rerun): same inputs,
#: same weights, only num_heads changed, so the kernels' growth with num_heads is read at the
#: sizes of every graded forward, not at sizes code could single out.
RERUN_HEADS = 2


def two_head_reruns(p) -> list[tuple]:
    """[(what, num_heads, the graded forward's cost, its rerun's (num_heads 2) cost, the
    rerun's answer, the reference's)] for each graded configuration of 3 heads or more whose
    d_total 2 heads can split and whose first eval-mode forward dispatched more matmul/softmax
    kernels than the reference's: that forward run again with num_heads 2."""
    def make():
        graded, specs = {}, []
        for c, runs, student, ref in p.evidence.mha:
            dt = c.d_total or c.d_model
            if c.name in graded or c.num_heads <= RERUN_HEADS or dt % RERUN_HEADS \
                    or ref.get("state") is None:
                continue
            for run, s, r in zip(runs, student["runs"], ref["runs"]):
                # a forward with no more kernels than the reference's same forward cannot
                # hide a loop over heads: only the others are run again
                if not run.get("train") and run.get("grad") is None \
                        and kernels(s["cost"]) > kernels(r["cost"]):
                    graded[c.name] = (f"{c.describe()} (graded forward)", c.num_heads, s["cost"])
                    specs.append({"init": dict(c.init, num_heads=RERUN_HEADS),
                                  "load": ref["state"], "runs": [run]})
                    break
        if not specs:
            return []
        refs = [p.reference.mha(spec, group="cost")["runs"][0] for spec in specs]
        p.student.ahead_mha(specs, group="cost")
        reruns = [p.student.mha(spec, group="cost")["runs"][0] for spec in specs]
        return [(*graded[name], rerun["cost"], (rerun["out"], rerun["weights"]),
                 (ref["out"], ref["weights"])) for name, rerun, ref in zip(graded, reruns, refs)]
    return once(p, "reruns", make)


def graded_forwards_right(p) -> bool:
    """Every eval-mode forward the value checks graded gave the reference's output and
    weights (a training-mode forward draws its own dropout)."""
    def same(a, b):
        return b is None or (isinstance(a, torch.Tensor) and a.shape == b.shape
                             and a.dtype == b.dtype and bool(torch.allclose(a, b, rtol=1e-9,
                                                                            atol=1e-11)))
    return all(same(s["out"], r["out"]) and same(s["weights"], r["weights"])
               for _, runs, student, ref in p.evidence.mha
               for run, s, r in zip(runs, student["runs"], ref["runs"]) if not run.get("train"))


def graded_costs(p) -> list[tuple]:
    """[(what, num_heads, the student's cost, the reference's)] of every forward the value
    checks graded (each one measured as it ran: ``probes.forward``)."""
    return [(f"{c.describe()} (graded forward {i + 1})", c.num_heads, s["cost"], r["cost"])
            for c, _, student, ref in p.evidence.mha
            for i, (s, r) in enumerate(zip(student["runs"], ref["runs"]))]


def kernels(cost: dict) -> int:
    """The matmul/softmax kernels one forward dispatched."""
    return sum(n for op, n in cost["ops"].items() if op in KERNELS)


def flop_counts(p) -> list[tuple]:
    return _per_head(p, lambda e: e["flops"])


def work_counts(p) -> list[tuple]:
    return _per_head(p, lambda e: e["work"])


def kernel_counts(p) -> list[tuple]:
    return _per_head(p, kernels)
