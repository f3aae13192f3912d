"""Checks of the MultiHeadAttention module: parameters, values with the reference's
weights loaded, masks, gradients and dropout (SPEC, items 1 and 2)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..compare import Blocked, CheckFailed, expect_close, expect_shape
from ..sandbox.host import StudentError
from . import Probe, cases, check
from .functions import F64, expect_float64


@dataclass(frozen=True)
class Config:
    name: str
    d_model: int
    num_heads: int
    d_total: int | None = None
    bias: bool = False
    batch: int = 2
    n_q: int = 4
    n_k: int = 4

    @property
    def init(self) -> dict:
        init = {"d_model": self.d_model, "num_heads": self.num_heads, "bias": self.bias}
        if self.d_total is not None:
            init["d_total"] = self.d_total
        return init

    def describe(self) -> str:
        extra = f", d_total={self.d_total}" if self.d_total is not None else ""
        return (f"MultiHeadAttention({self.d_model}, {self.num_heads}{extra}, bias={self.bias}), "
                f"batch {self.batch}, n_q={self.n_q}, n_k={self.n_k}")


CONFIGS = [Config("typical", 12, 3, bias=True, n_q=5, n_k=7), Config("one-head", 8, 1),
           Config("head-dim-1", 6, 6, n_q=3, n_k=5), Config("d-total-ne-d-model", 8, 2, d_total=12,
           bias=True, n_k=6), Config("batch-1", 8, 4, batch=1, n_q=6, n_k=3),
           Config("no-bias-many-heads", 16, 8, n_q=2, n_k=9)]
MASKED = [Config("masked", 12, 3, bias=True, batch=3, n_q=5, n_k=6),
          Config("masked-one-head", 8, 1, batch=2, n_q=3, n_k=4),
          Config("masked-d-total", 8, 4, d_total=16, batch=4, n_q=2, n_k=5)]


def inputs(gen, c: Config, *, masked: str | None = None, grad: bool = False) -> dict:
    run = {"queries": cases.randn(gen, c.batch, c.n_q, c.d_model),
           "keys": cases.randn(gen, c.batch, c.n_k, c.d_model),
           "values": cases.randn(gen, c.batch, c.n_k, c.d_model)}
    if masked == "1-d":
        run["valid_lens"] = cases.lens(gen, c.batch, c.n_k)
    elif masked == "2-d":
        run["valid_lens"] = cases.lens(gen, c.batch, c.n_k, n_q=c.n_q)
    if grad:
        run["grad"] = cases.randn(gen, c.batch, c.n_q, c.d_model)
    return run


def run_both(p: Probe, c: Config, runs: list[dict], *, group: str = "mha", dropout=None):
    """Build on both sides, load the reference's weights into the student's, run."""
    (student, ref), = run_all(p, [(c, runs)], group=group, dropout=dropout)
    return student, ref


def run_all(p: Probe, planned: list, *, group: str = "mha", dropout=None):
    """``run_both`` for each (config, runs) in turn, yielding (student, ref): the student's
    modules sent in one request (``Side.ahead_mha``), each judged as it comes, so a check
    that stops at its first failure sees what it saw one module at a time."""
    specs = []
    for c, runs in planned:
        init = dict(c.init) if dropout is None else dict(c.init, dropout=dropout)
        seed = int(torch.randint(0, 2**31, (1,), generator=p.generator("weights" + c.name)))
        ref = p.reference.mha({"init": init, "seed": seed, "want_state": True, "runs": runs},
                              group=group)
        specs.append((ref, {"init": init, "seed": seed, "load": ref["state"], "runs": runs}))
    p.student.ahead_mha([spec for _, spec in specs], group=group)
    for (c, runs), (ref, spec) in zip(planned, specs):
        try:
            student = p.student.mha(spec, group=group)
        except StudentError as e:
            raise StudentError(f"{c.describe()}: {e}", raised=e.raised) from None
        p.evidence.mha.append((c, runs, student, ref))
        yield student, ref


ROLES = ("queries", "keys", "values")


def unchanged(run: dict, after, what: str) -> None:
    """forward leaves its inputs as they were: judged here, from the tensors sent and the ones
    the probe sent back after the call (none came back: not judged)."""
    if not isinstance(after, (list, tuple)):
        return
    for role, back in zip(ROLES, after):
        sent = run[role]
        try:
            same = back.dtype == sent.dtype and back.layout == sent.layout \
                and back.device == sent.device and back.shape == sent.shape \
                and torch.equal(back, sent)
        except Exception:          # a tensor no comparison reads (meta, sparse): changed
            same = False
        if not same:
            raise CheckFailed(f"{what}: forward changed its {role} tensor in place; work on a "
                              "copy (masked_fill, not masked_fill_; no writes into the inputs)")


#: Parameters the module may leave out, as their gradient is zero by the maths: a key bias
#: adds the same q·b_k to every key's score of a query row, which the softmax ignores.
INERT = {"W_k.bias": "a key bias adds the same q·b_k to every score of a query row, "
                     "which the softmax ignores"}


def unloaded(student, ref) -> list[str]:
    """The reference's weights the student's module has no parameter for (not loaded)."""
    have = {q["name"] for q in student.get("params", ())}
    return [name for name in ref.get("state", {}) if name not in have]


def compare_runs(p: Probe, c: Config, runs, student, ref, *, grads: bool = False) -> None:
    """The student's forwards against the reference's. A parameter the module lacks was not
    loaded: right where it is ``INERT`` (its gradient compares as zeros), and named in the
    message of a failure otherwise."""
    try:
        _compare_runs(p, c, runs, student, ref, grads=grads)
    except CheckFailed as e:
        missing = [name for name in unloaded(student, ref) if name not in INERT]
        if not missing:
            raise
        raise CheckFailed(f"{e} (the module has no {', '.join(missing)}, so the reference's "
                          "could not be loaded: with bias=True the contract asks for "
                          "nn.Linear(..., bias=bias))") from None


def _compare_runs(p: Probe, c: Config, runs, student, ref, *, grads: bool = False) -> None:
    for run, s, r in zip(runs, student["runs"], ref["runs"]):
        lens = run.get("valid_lens")
        what = f"forward of {c.describe()}" + (f", valid_lens {lens.tolist()}" if lens is not None else "")
        expect_float64(p, actual=s["out"], expected=r["out"], what=f"{what}: output")
        unchanged(run, s.get("after"), what)
        if s["weights"] is None:
            raise CheckFailed(f"{what}: self.attention_weights is not a tensor after forward")
        expect_float64(p, actual=s["weights"], expected=r["weights"],
                       what=f"{what}: attention_weights")
        if grads:
            for name, expected in r["grads"].items():
                actual = s["grads"].get(name)
                if actual is None:
                    actual = _absent_gradient(name, expected, what)
                expect_float64(p, actual=actual, expected=expected,
                               what=f"{what}: gradient of {name}", **GRAD_TOL)


GRAD_TOL = dict(rtol=1e-8, atol=1e-10)


def _absent_gradient(name: str, expected, what: str) -> torch.Tensor:
    """No gradient reached ``name``: right only where the reference's is zero by the maths
    (W_k's bias cannot change the softmax: it adds the same q·b to every key of a query
    row), so an absent gradient compares as zeros; anywhere else it is missing."""
    zeros = torch.zeros_like(expected)
    try:
        expect_close(actual=zeros, expected=expected, what=what, **GRAD_TOL)
    except CheckFailed:
        raise CheckFailed(f"{what}: no gradient reached {name}") from None
    return zeros


@check("MultiHeadAttention.params", part="MultiHeadAttention", kind="structure", group="mha", hidden=False, instruments=["parameters"])
def mha_params(p: Probe) -> None:
    """W_q, W_k, W_v = Linear(d_model, d_total), W_o = Linear(d_total, d_model), by these names
    (W_k's bias may be left out: ``INERT``)."""
    for c in (CONFIGS[0], CONFIGS[3], CONFIGS[1]):
        ref = p.reference.mha({"init": c.init}, group="mha")
        student = p.student.mha({"init": c.init}, group="mha")
        p.evidence.params.append((c, student["params"], ref["params"]))
        have = {q["name"]: tuple(q["shape"]) for q in student["params"]}
        for q in ref["params"]:
            if q["name"] not in have and q["name"] in INERT:
                continue
            if q["name"] not in have:
                raise CheckFailed(f"{c.describe()}: the module has no parameter {q['name']} "
                                  f"(shape {tuple(q['shape'])}); the contract asks for "
                                  "W_q, W_k, W_v and W_o as torch.nn.Linear layers")
            if have[q["name"]] != tuple(q["shape"]):
                raise CheckFailed(f"{c.describe()}: {q['name']} has shape {have[q['name']]}, "
                                  f"expected {tuple(q['shape'])} (nn.Linear stores "
                                  "(out_features, in_features))")


#: Configurations that must build: num_heads divides d_total but not d_model.
VALID_INITS = ({"d_model": 10, "num_heads": 4, "d_total": 12},)


@check("MultiHeadAttention.raises", part="MultiHeadAttention", kind="raises", group="mha", hidden=False, instruments=["exception"])
def mha_raises(p: Probe) -> None:
    """MultiHeadAttention(8, 3) raises ValueError: 8 is not divisible by 3, and
    MultiHeadAttention(10, 4, d_total=12) builds: the head count divides d_total (graded once
    MultiHeadAttention(8, 2) builds)."""
    p.student.require("MultiHeadAttention")
    built = p.student.probe("mha_raises", "mha", init={"d_model": 8, "num_heads": 2})
    if "raised" in built or "bad" in built:
        raise Blocked("not graded: MultiHeadAttention(8, 2) could not be built either, so "
                      "raising proves nothing yet", by=["MultiHeadAttention.params"])
    problems = []
    for init in ({"d_model": 8, "num_heads": 3}, {"d_model": 8, "num_heads": 4, "d_total": 10}):
        p.student.require("MultiHeadAttention")
        result = p.student.probe("mha_raises", "mha", init=init)
        text = ", ".join(f"{k}={v}" for k, v in init.items())
        if "raised" not in result or not result["raised"].get("value_error"):
            p.evidence.no_valueerror.append(("MultiHeadAttention", text))
        if "raised" not in result:
            problems.append(f"MultiHeadAttention({text}) was built; it must raise ValueError "
                            "(the width is not divisible by the number of heads)")
        elif not result["raised"].get("value_error"):
            problems.append(f"MultiHeadAttention({text}) raised {result['raised'].get('type')}, "
                            "expected ValueError (not an assert)")
    for init in VALID_INITS:
        p.student.require("MultiHeadAttention")
        result = p.student.probe("mha_raises", "mha", init=init)
        if "raised" in result:
            text = ", ".join(f"{k}={v}" for k, v in init.items())
            problems.append(f"MultiHeadAttention({text}) raised {result['raised'].get('type')}: "
                            f"{result['raised'].get('message', '')[:200]}; it is a valid "
                            f"configuration: d_total={init['d_total']} is divisible by "
                            f"num_heads={init['num_heads']} (d_model need not be). Check "
                            "d_total % num_heads, not d_model % num_heads")
    if problems:
        raise CheckFailed("; ".join(problems))


@check("MultiHeadAttention.values", part="MultiHeadAttention", kind="values", group="mha", hidden=False)
def mha_values(p: Probe) -> None:
    """With the reference's weights loaded, forward's output and attention_weights match."""
    gen = p.generator("mha.values")
    planned = [(c, [inputs(gen, c)]) for c in CONFIGS]
    for (c, runs), (student, ref) in zip(planned, run_all(p, planned)):
        compare_runs(p, c, runs, student, ref)


@check("MultiHeadAttention.masked", part="MultiHeadAttention", kind="values", group="mha", hidden=False)
def mha_masked(p: Probe) -> None:
    """valid_lens of shape (batch,) and (batch, n_q), lengths 0 and full included."""
    gen = p.generator("mha.masked")
    planned = [(c, [inputs(gen, c, masked="1-d"), inputs(gen, c, masked="2-d")]) for c in MASKED]
    for (c, runs), (student, ref) in zip(planned, run_all(p, planned)):
        compare_runs(p, c, runs, student, ref)


@check("MultiHeadAttention.grads", part="MultiHeadAttention", kind="values", group="mha")
def mha_grads(p: Probe) -> None:
    """Backward gives the reference's gradients for the inputs and every parameter."""
    gen = p.generator("mha.grads")
    planned = [(c, [inputs(gen, c, masked="1-d" if c.name.startswith("masked") else None,
                           grad=True)]) for c in (CONFIGS[0], CONFIGS[3], MASKED[0])]
    for (c, runs), (student, ref) in zip(planned, run_all(p, planned)):
        compare_runs(p, c, runs, student, ref, grads=True)


@check("MultiHeadAttention.dropout", part="MultiHeadAttention", kind="values", group="mha", requires=["MultiHeadAttention.values"])
def mha_dropout(p: Probe) -> None:
    """Dropout acts in training mode only, and on the attention weights: in eval mode the
    output is the reference's; in training mode it zeroes attention weights, not outputs."""
    gen = p.generator("mha.dropout")
    c = CONFIGS[0]
    runs = [inputs(gen, c), inputs(gen, c)]
    runs[1] = dict(runs[0])
    student, ref = run_both(p, c, runs, dropout=0.5)
    first, second = (r["out"] for r in student["runs"])
    if first.shape == second.shape and not torch.equal(first, second):
        if _random_without_dropout(p, c, runs):
            raise CheckFailed(f"{c.describe()}: two eval-mode forwards on the same inputs differ "
                              "even with dropout=0, so forward is random for some other reason "
                              "(e.g. a layer built, with fresh random weights, inside forward)")
        p.evidence.eval_nondeterministic = True
        raise CheckFailed(f"{c.describe()} with dropout=0.5: two eval-mode forwards on the same "
                          "inputs differ, so dropout still acts after model.eval()")
    compare_runs(p, c, runs, student, ref)
    train = [dict(inputs(gen, c), train=True, seed=1)]
    student, _ = run_both(p, c, train, dropout=0.5)
    _, eval_ref = run_both(p, c, [dict(train[0], train=False)], dropout=0.5)
    trained, eval_out = student["runs"][0]["out"], eval_ref["runs"][0]["out"]
    expect_shape(trained, expected=tuple(eval_out.shape),
                 what=f"{c.describe()} with dropout=0.5 in training mode: forward")
    if torch.allclose(trained.double(), eval_out.double(), rtol=0, atol=1e-12):
        raise CheckFailed(f"{c.describe()} with dropout=0.5 in training mode gave the eval-mode "
                          "output: dropout on the attention weights never acts")
    _dropout_acts_on_the_weights(p, gen)


def _random_without_dropout(p: Probe, c: Config, runs) -> bool:
    """Whether two eval-mode forwards on the same inputs differ with dropout=0 too: then the
    randomness is not dropout's."""
    seed = int(torch.randint(0, 2**31, (1,), generator=p.generator("dropout-free" + c.name)))
    student = p.student.mha({"init": dict(c.init, dropout=0.0), "seed": seed, "runs": runs},
                            group="mha")
    first, second = (r["out"] for r in student["runs"])
    return first.shape == second.shape and not torch.equal(first, second)


def _dropout_acts_on_the_weights(p: Probe, gen) -> None:
    """Where dropout acts, seen in training mode with W_v = W_o = I loaded: head j's output
    row is then sum_k D_ik w_ik v_k over random values v_k, so dropout on the weights zeroes a
    head's row whole or not at all, while dropout on the pooled output (or after concat, or
    after W_o) zeroes single entries."""
    c = Config("dropout-placement", 12, 3, n_q=5, n_k=7)
    init = dict(c.init, dropout=0.5)
    seed = int(torch.randint(0, 2**31, (1,), generator=gen))
    ref = p.reference.mha({"init": init, "seed": seed, "want_state": True}, group="mha")
    eye = torch.eye(c.d_model, dtype=torch.float64)
    weights = dict(ref["state"], **{"W_v.weight": eye, "W_o.weight": eye})
    run = dict(inputs(gen, c), train=True, seed=3)
    student = p.student.mha({"init": init, "seed": seed, "load": weights, "runs": [run]},
                            group="mha")
    out = student["runs"][0]["out"]
    if tuple(out.shape) != (c.batch, c.n_q, c.d_model):
        return                                  # the value checks say what is wrong
    zero = out.reshape(c.batch, c.n_q, c.num_heads, -1) == 0
    if bool((zero.any(-1) & ~zero.all(-1)).any()):
        raise CheckFailed(f"{c.describe()} with dropout=0.5 in training mode (W_v and W_o set to "
                          "the identity): single entries of a head's output are zero while the "
                          "rest of its row is not, so dropout acts on the pooled output, not on "
                          "the attention weights. Apply dropout to the weights: "
                          "dropout(weights) @ V.")


def forbidden_seen(evidence) -> list[str]:
    """torch's built-in attention the submission used: named in its code (the grader read it;
    naming one counts as using it), reached or called while it ran (the sandbox's guard and
    kernel watch saw it), in the graded runs and in those of error carried forward alike."""
    source = evidence.source
    named = {str(f) for f in source.forbidden} if source else set()
    return sorted(set(evidence.forbidden_reached()) | named)


@check("MultiHeadAttention.builtin", part="MultiHeadAttention", kind="instrument", group="api", requires=["MultiHeadAttention.values"],
       instruments=["forbidden"])
def mha_own_parts(p: Probe) -> None:
    """The module uses its own parts, not scaled_dot_product_attention or nn.MultiheadAttention."""
    hits = forbidden_seen(p.evidence)
    if hits:
        raise CheckFailed("the submission uses built-in attention the assignment forbids ("
                          + ", ".join(hits) + "); build the module from your own projection, "
                          "split, pooling and concat. This costs the module's points.")
