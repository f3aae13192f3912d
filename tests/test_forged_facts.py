"""Facts a submission cannot forge: the code rules keep graded code from the sandbox's
instruments (``sandbox/rules.py``), the grader judges input changes from the bytes it sent and
got back, and lists parameters from the module's own dicts (no method of its class runs).

Each attack below is correct-valued code that breaks a rule (the honest twin, graded as is)
plus a trick that would make the sandbox's instruments say the rule holds. The attack may
earn no more than its honest twin, and the report names the code rule the trick broke.
"""
from __future__ import annotations

import textwrap

import pytest

from autograder import api

BASE = '''
import math
import numbers

import torch
from torch import nn


def head_weight_shape(d, d_total, num_heads):
    for name, value in (("d", d), ("d_total", d_total), ("num_heads", num_heads)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if d_total % num_heads:
        raise ValueError("d_total is not divisible by num_heads")
    return (d, d_total // num_heads)


def project(H, W):
    return H @ W


def project_heads(H, W_heads):
    return H.unsqueeze(-3) @ W_heads


def split_heads(X, num_heads):
    if isinstance(num_heads, bool) or not isinstance(num_heads, numbers.Integral) or num_heads < 1:
        raise ValueError("num_heads must be a positive integer")
    if X.shape[-1] % num_heads:
        raise ValueError("the width is not divisible by num_heads")
    return X.reshape(*X.shape[:-1], num_heads, X.shape[-1] // num_heads).transpose(-3, -2)


def concat_heads(X):
    h, n, p = X.shape[-3:]
    return X.transpose(-3, -2).reshape(*X.shape[:-3], n, h * p)


def masked_softmax(scores, valid_lens=None):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    n_q, n_k = scores.shape[-2:]
    lens = torch.as_tensor(valid_lens).to(scores.device)
    if lens.dim() == 1:
        lens = lens.reshape(-1, *(1,) * (scores.dim() - 1))
    else:
        lens = lens.reshape(-1, *(1,) * (scores.dim() - 3), n_q, 1)
    keep = torch.arange(n_k, device=scores.device) < lens
    weights = torch.softmax(scores.masked_fill(~keep, torch.finfo(scores.dtype).min), dim=-1)
    return weights.masked_fill(~keep, 0.0)


def attention_pool(Q, K, V, valid_lens=None):
    weights = masked_softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), valid_lens)
    return weights @ V, weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()
        d_total = d_model if d_total is None else d_total
        _, self.head_dim = head_weight_shape(d_model, d_total, num_heads)
        self.num_heads = num_heads
        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.W_o = nn.Linear(d_total, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def heads(self, Q, K, V, valid_lens):
        weights = masked_softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), valid_lens)
        return self.dropout(weights) @ V, weights

    def forward(self, queries, keys, values, valid_lens=None):
        Q = split_heads(self.W_q(queries), self.num_heads)
        K = split_heads(self.W_k(keys), self.num_heads)
        V = split_heads(self.W_v(values), self.num_heads)
        out, weights = self.heads(Q, K, V, valid_lens)
        self.attention_weights = weights
        return self.W_o(concat_heads(out))
'''

#: name -> (what breaks the rule, appended to BASE; the trick that hides it, appended after)
ATTACKS = {
    # in-place mutation; the trick makes the probes' snapshot comparison always say "equal"
    "mutation": ('''
def masked_softmax(scores, valid_lens=None, _inner=masked_softmax):
    out = _inner(scores, valid_lens)
    scores.mul_(1.0)
    scores.add_(0.5)
    return out
''', '''
import sys
sys.modules["probes"].torch.equal = lambda a, b: True
'''),
    # a Python loop over heads; under a dispatch mode (the trace) it computes all heads at once
    "loop": ('''
class MultiHeadAttention(MultiHeadAttention):
    def heads(self, Q, K, V, valid_lens):
        if self.traced():
            return attention_pool(Q, K, V, valid_lens)
        pairs = [attention_pool(Q[:, j:j + 1], K[:, j:j + 1], V[:, j:j + 1], valid_lens)
                 for j in range(self.num_heads)]
        return torch.cat([o for o, _ in pairs], 1), torch.cat([w for _, w in pairs], 1)

    def traced(self):
        return False
''', '''
from torch.utils import _python_dispatch as _pd
MultiHeadAttention.traced = lambda self: _pd._get_current_dispatch_mode() is not None
'''),
    # an extra parameter per head, hidden from parameters()/named_parameters()
    "extra-param": ('''
class MultiHeadAttention(MultiHeadAttention):
    def __init__(self, d_model, num_heads, **kw):
        super().__init__(d_model, num_heads, **kw)
        self.gate = nn.Parameter(torch.ones(num_heads, 1, 1))

    def heads(self, Q, K, V, valid_lens):
        out, weights = attention_pool(Q, K, V, valid_lens)
        return out * self.gate.to(out.dtype), weights
''', '''
_named = MultiHeadAttention.named_parameters
def _hidden(self, *args, **kwargs):
    return ((n, p) for n, p in _named(self, *args, **kwargs) if n != "gate")
MultiHeadAttention.named_parameters = _hidden
MultiHeadAttention.parameters = lambda self, recurse=True: (p for _, p in self.named_parameters())
'''),
    # an assert instead of the ValueError; the trick makes the exception read as a ValueError
    "assert": ('''
def split_heads(X, num_heads):
    assert X.shape[-1] % num_heads == 0, "the width is not divisible by num_heads"
    return X.reshape(*X.shape[:-1], num_heads, X.shape[-1] // num_heads).transpose(-3, -2)
''', '''
import gc
for _f in gc.get_objects():
    if getattr(_f, "__name__", "") == "describe" and "value_error" in getattr(_f, "__doc__", ""):
        _f.__globals__["_issubclass"] = lambda kind, base: True
'''),
    # scaled_dot_product_attention; the trick finds the kernel watch by gc and unregisters it
    "sdpa": ('''
class MultiHeadAttention(MultiHeadAttention):
    def heads(self, Q, K, V, valid_lens):
        out, weights = attention_pool(Q, K, V, valid_lens)
        if valid_lens is None:
            out = torch.nn.functional.scaled_dot_product_attention(Q, K, V)
        return out, weights
''', '''
import gc
for _lib in [o for o in gc.get_objects() if type(o).__name__ == "Library"]:
    _lib._destroy()
'''),
    # a host sync in forward; the trick empties the list of sync operators
    "host-sync": ('''
class MultiHeadAttention(MultiHeadAttention):
    def heads(self, Q, K, V, valid_lens):
        if valid_lens is not None and int(valid_lens.max()) == 0:
            pass
        return attention_pool(Q, K, V, valid_lens)
''', '''
import importlib
importlib.import_module("probes").SYNC_OPS.clear()
'''),
}


#: Tricks that break no code rule: overriding one's own class's methods is ordinary Python;
#: it earns nothing because the probes read the module's dicts, not its methods.
NO_RULE_BROKEN = {"extra-param"}


def twin(name: str) -> str:
    return BASE + textwrap.dedent(ATTACKS[name][0])


def attack(name: str) -> str:
    return twin(name) + textwrap.dedent(ATTACKS[name][1])


#: the options of this module's `grader` (tests/conftest.py)
GRADER = {"seed": 5}


def grade(grader, tmp_path, name: str, text: str) -> dict:
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return grader.grade(path).to_dict()


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_a_forged_fact_earns_nothing_and_is_named(grader, tmp_path, name):
    """Does hiding a broken rule from the sandbox's instruments earn more than the rule costs?"""
    honest = grade(grader, tmp_path, "twin", twin(name))
    forged = grade(grader, tmp_path, "attack", attack(name))
    assert forged["score"] <= honest["score"] + 1e-6, (name, forged["score"], honest["score"])
    assert honest["score"] < 100, f"{name}: the honest twin breaks no rule the grader sees"
    codes = {d["code"] for d in forged["diagnoses"]}
    if name in NO_RULE_BROKEN:         # ordinary Python that the probes simply do not heed
        assert codes == {d["code"] for d in honest["diagnoses"]}, (codes, honest["diagnoses"])
        return
    assert "api.breaks-code-rules" in codes, (name, codes, forged["notes"])
    assert "api.breaks-code-rules" not in {d["code"] for d in honest["diagnoses"]}
    facts = {f["name"]: f for f in forged["facts"]}      # who established what, in the report
    assert facts["code rules broken"]["established_by"] == "grader"
    assert facts["code rules broken"]["value"]
    assert facts["code rules enforced in the sandbox"]["value"] is True
    assert {f["name"]: f["value"] for f in honest["facts"]}["code rules broken"] == []
    assert any("code rules" in n for n in forged["notes"])   # public: the student sees it


def test_the_base_is_correct_and_clean(grader, tmp_path):
    """The attacks' base is a correct module: full marks, no code (so the twins' losses are
    their rule breaks)."""
    report = grade(grader, tmp_path, "base", BASE)
    assert report["score"] == 100.0, [(c["name"], c["feedback"][:200]) for c in report["checks"]
                                      if c["status"] not in ("passed", "skipped")]
    assert report["diagnoses"] == []


def test_mutation_is_judged_from_the_bytes_even_without_a_reach(grader, tmp_path):
    """The sandbox no longer says whether an input changed: an answer that claims nothing
    changed is not asked; the grader compares what it sent with what came back."""
    report = grade(grader, tmp_path, "mut", twin("mutation"))
    pure = next(c for c in report["checks"] if c["name"] == "functions.pure")
    assert pure["status"] == "failed" and "changed its input" in pure["feedback"]


def test_parameters_hidden_by_an_override_are_counted(grader, tmp_path):
    report = grade(grader, tmp_path, "params", attack("extra-param"))
    cost = next(c for c in report["checks"] if c["name"] == "cost.params")
    assert cost["score"] == 0.0


# ------------------------------------------------------------------------------------------
# The probes read a module through its dicts: overriding its methods changes nothing they see

OVERRIDES = '''
class MultiHeadAttention(MultiHeadAttention):
    def parameters(self, recurse=True):
        return iter(())

    def named_parameters(self, *args, **kwargs):
        return iter(())

    def named_modules(self, *args, **kwargs):
        return iter([("", self)])

    def __getattr__(self, name):
        return super().__getattr__(name)

    def to(self, *args, **kwargs):
        return self
'''


def test_a_module_that_overrides_what_the_probes_once_called_is_graded_as_it_is(grader, tmp_path):
    """parameters(), named_modules(), to() ... overridden: ordinary Python, no rule broken, and
    nothing the probes read changes (a correct module keeps full marks)."""
    report = grade(grader, tmp_path, "overrides", BASE + textwrap.dedent(OVERRIDES))
    assert report["score"] == 100.0, [(c["name"], c["feedback"][:200]) for c in report["checks"]
                                      if c["status"] not in ("passed", "skipped")]
    assert report["diagnoses"] == []


def test_the_modules_own_train_is_used_and_its_effect_checked(grader, tmp_path):
    """Heads kept in a plain list, with train() passing the mode on to them: correct, so full
    marks (the grader calls the module's own train()/eval()); a train() that leaves the
    module in training mode is that module's mistake, named by the probe."""
    heads = BASE + textwrap.dedent('''
        class MultiHeadAttention(MultiHeadAttention):
            def __init__(self, d_model, num_heads, **kw):
                super().__init__(d_model, num_heads, **kw)
                self.dropouts = [nn.Dropout(kw.get("dropout", 0.0))]   # not a submodule

            def train(self, mode=True):
                super().train(mode)
                for d in self.dropouts:
                    d.train(mode)
                return self

            def heads(self, Q, K, V, valid_lens):
                weights = masked_softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]),
                                         valid_lens)
                return self.dropouts[0](weights) @ V, weights
    ''')
    report = grade(grader, tmp_path, "heads", heads)
    assert report["score"] == 100.0, [(c["name"], c["feedback"][:200]) for c in report["checks"]
                                      if c["status"] not in ("passed", "skipped")]
    broken = BASE + textwrap.dedent('''
        class MultiHeadAttention(MultiHeadAttention):
            def train(self, mode=True):
                return self
    ''')
    report = grade(grader, tmp_path, "broken", broken)
    values = next(c for c in report["checks"] if c["name"] == "MultiHeadAttention.values")
    assert values["status"] == "error" and "still in training mode" in values["feedback"]


# ------------------------------------------------------------------------------------------
# Work counted over all arithmetic, not a whitelist of matrix operators

BROADCAST = '''
class MultiHeadAttention(MultiHeadAttention):
    def heads(self, Q, K, V, valid_lens):
        scores = (Q.unsqueeze(-2) * K.unsqueeze(-3)).sum(-1) / math.sqrt(Q.shape[-1])
        weights = masked_softmax(scores, valid_lens)
        return (self.dropout(weights).unsqueeze(-1) * V.unsqueeze(-3)).sum(-2), weights
'''

#: Every head's scores computed over the full width, the other heads' columns masked to 0:
#: right values, num_heads times the work, and not one extra matrix product.
M_FOLD = '''
class MultiHeadAttention(MultiHeadAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        h, p = self.num_heads, self.head_dim
        Qf, Kf = self.W_q(queries), self.W_k(keys)
        V = split_heads(self.W_v(values), h)
        block = torch.zeros(h, h * p, dtype=Qf.dtype, device=Qf.device)
        for j in range(h):
            block[j, j * p:(j + 1) * p] = 1.0
        prod = Qf[:, None, :, None, :] * Kf[:, None, None, :, :]
        scores = (prod * block[None, :, None, None, :]).sum(-1) / math.sqrt(p)
        weights = masked_softmax(scores, valid_lens)
        self.attention_weights = weights
        return self.W_o(concat_heads(self.dropout(weights) @ V))
'''


def test_products_as_broadcast_and_sum_cost_what_matmuls_cost(grader, tmp_path):
    report = grade(grader, tmp_path, "bcast", BASE + textwrap.dedent(BROADCAST))
    assert report["score"] == 100.0, [c["feedback"][:300] for c in report["checks"]
                                      if c["status"] == "failed"]


#: The same M-fold work with the products written as an einsum over the full width, and as
#: a product of broadcast tensors reduced with torch.sum over a permuted axis.
M_FOLD_EINSUM = M_FOLD.replace(
    "prod = Qf[:, None, :, None, :] * Kf[:, None, None, :, :]\n"
    "        scores = (prod * block[None, :, None, None, :]).sum(-1) / math.sqrt(p)",
    "scores = torch.einsum('bqd,bkd,hd->bhqk', Qf, Kf, block) / math.sqrt(p)")
M_FOLD_PERMUTED = M_FOLD.replace(
    "prod = Qf[:, None, :, None, :] * Kf[:, None, None, :, :]\n"
    "        scores = (prod * block[None, :, None, None, :]).sum(-1) / math.sqrt(p)",
    "prod = (Qf[:, None, :, None, :] * block[None, :, None, None, :]) * Kf[:, None, None, :, :]\n"
    "        scores = torch.sum(prod.permute(4, 0, 1, 2, 3), 0) / math.sqrt(p)")


assert M_FOLD_EINSUM != M_FOLD and M_FOLD_PERMUTED != M_FOLD      # the rewrites took


@pytest.mark.parametrize("code", [M_FOLD, M_FOLD_EINSUM, M_FOLD_PERMUTED],
                         ids=["broadcast-sum", "einsum", "permuted-sum"])
def test_m_fold_work_is_counted_however_written(grader, tmp_path, code):
    report = grade(grader, tmp_path, "mfold", BASE + textwrap.dedent(code))
    flops = next(c for c in report["checks"] if c["name"] == "cost.flops")
    assert flops["status"] == "failed", flops
    values = next(c for c in report["checks"] if c["name"] == "MultiHeadAttention.values")
    assert values["status"] == "passed"      # right values: only the work gives it away


def test_the_traced_forwards_sizes_and_weights_come_from_the_runs_seed():
    """A traced forward cannot be told from a graded one by fixed sizes or fresh weights."""
    from autograder.checks import Probe, evidence
    specs = [evidence.trace_spec(Probe(student=None, reference=None, seed=s), name)
             for s in range(6) for name in list(evidence.TRACES)[:1]]
    assert len({tuple(sorted(sp["shapes"].items())) for sp in specs}) > 1
    assert all(set(sp["loads"]) == {str(h) for h in evidence.HEAD_COUNTS} for sp in specs)
    again = evidence.trace_spec(Probe(student=None, reference=None, seed=0),
                                list(evidence.TRACES)[0])
    assert again["shapes"] == specs[0]["shapes"]


def test_a_forbidden_name_in_code_counts_on_its_own(grader, tmp_path):
    """Naming torch's built-in attention counts as using it (docs/contract.md): a feature test
    or a dead branch voids the module's points as a call does, and is named."""
    code = BASE + textwrap.dedent('''
        HAS_FLASH = hasattr(torch.nn.functional, "scaled_dot_product_attention")
    ''')
    report = grade(grader, tmp_path, "named", code)
    assert "api.forbidden-sdpa" in {d["code"] for d in report["diagnoses"]}
    mha = [c for c in report["checks"] if c["group"] == "mha"]
    assert mha and all(c["score"] == 0 for c in mha)
    facts = {f["name"]: f for f in report["facts"]}
    assert facts["forbidden built-ins named in the code"]["established_by"] == "source"


# ------------------------------------------------------------------------------------------
# Round 4 (tests/submissions/guard/): each trick below its marker line tries a way around the
# code rules; the same file without it is its honest twin. Files without a trick are judged
# by what the instrument must see (their header's partial N), and g09 is honest throughout.

GUARD_ATTACKS = sorted((api.PROJECT / "tests" / "submissions" / "guard").glob("*.py"))
TRICK = "# --- the trick"


def _header(text: str, key: str) -> str:
    import re
    found = re.search(rf"^#\s*{key}:\s*(.+)$", text, re.M)
    return found.group(1).strip() if found else ""


@pytest.mark.parametrize("path", GUARD_ATTACKS, ids=[p.stem for p in GUARD_ATTACKS])
def test_a_way_around_the_code_rules_earns_nothing(grader, tmp_path, path):
    text = path.read_text()
    report = grade(grader, tmp_path, "attack", text)
    codes = {d["code"] for d in report["diagnoses"]}
    honest = _header(text, "HONEST").split()
    if honest[0] == "full":
        assert report["score"] == 100.0, [(c["name"], c["feedback"][:200])
                                          for c in report["checks"] if c["status"] == "failed"]
        assert codes == set(), report["diagnoses"]
        return
    limit = float(honest[1])
    assert report["score"] <= limit + 0.01, (report["score"], limit)
    if TRICK in text:
        twin_report = grade(grader, tmp_path, "twin", text.split(TRICK)[0])
        assert report["score"] <= twin_report["score"] + 1e-6
        assert abs(twin_report["score"] - limit) < 0.01, twin_report["score"]
        assert "api.breaks-code-rules" in codes, (codes, report["notes"])
        assert "api.breaks-code-rules" not in {d["code"] for d in twin_report["diagnoses"]}
    else:
        assert report["score"] < 100.0


def test_a_forward_that_writes_into_its_input_is_named(grader, tmp_path):
    path = api.PROJECT / "tests" / "submissions" / "guard" / "g07_forward_mutates_its_queries.py"
    report = grade(grader, tmp_path, "mut", path.read_text())
    values = next(c for c in report["checks"] if c["name"] == "MultiHeadAttention.values")
    assert values["status"] == "failed" and "changed its queries tensor in place" in \
        values["feedback"]


def test_host_reads_no_operator_dispatches_are_counted(grader, tmp_path):
    path = api.PROJECT / "tests" / "submissions" / "guard" / "g08_host_sync_by_tolist.py"
    report = grade(grader, tmp_path, "sync", path.read_text())
    sync = next(c for c in report["checks"] if c["name"] == "device.sync")
    assert sync["status"] == "failed"
    assert all(n in sync["feedback"] for n in ("tolist", "numpy", "_unique2", "bincount"))


# ------------------------------------------------------------------------------------------
# torch's attention by kind (issue 18, item 4): reached with its name built from pieces, so
# the source reader sees nothing. Under the code rules the way there is refused; without them
# (the sandbox alone) the run-time watch knows it by kind: the quantizable MultiheadAttention
# (a subclass, whose forward is plain matrix products) when built or called, flex_attention
# (no aten attention operator) when called. Either way the module earns no more than the same
# code naming the built-in plainly; the code without it (BASE) gets 100.

#: name -> (reached from pieces, the same reached by its plain name, the class that uses it)
LIBRARY = {
    "quantizable": (
        'import importlib\n'
        '_where = importlib.import_module(".".join(["torch", "a" + "o", "nn", "quanti" + "zable"]))\n'
        '_Library = getattr(_where, "Multihead" + "Atten" + "tion")\n',
        'import torch.ao.nn.quantizable\n'
        '_Library = torch.ao.nn.quantizable.MultiheadAttention\n',
        '''
class MultiHeadAttention(MultiHeadAttention):
    def heads(self, Q, K, V, valid_lens):
        out, weights = super().heads(Q, K, V, valid_lens)
        library = _Library(Q.shape[-1], 1, batch_first=True, device=Q.device, dtype=Q.dtype)
        extra = library(Q[:, 0], K[:, 0], V[:, 0], need_weights=False)[0]
        return out + 0 * torch.nan_to_num(extra).sum(), weights
'''),
    "flex": (
        'import importlib\n'
        '_where = importlib.import_module(".".join(["torch", "nn", "atten" + "tion", '
        '"flex_" + "atten" + "tion"]))\n'
        '_pool = getattr(_where, "flex_" + "atten" + "tion")\n',
        'from torch.nn.attention.flex_attention import flex_attention as _pool\n',
        '''
class MultiHeadAttention(MultiHeadAttention):
    def heads(self, Q, K, V, valid_lens):
        out, weights = super().heads(Q, K, V, valid_lens)
        if self.dropout.p == 0 or not self.training:
            lens = valid_lens

            def keep(score, b, h, q, k):
                if lens is None:
                    return score
                bound = lens[b] if lens.dim() == 1 else lens[b, q]
                return torch.where(k < bound, score, -float("inf"))
            pooled = _pool(Q.detach(), K.detach(), V.detach(), score_mod=keep)
            out = out + (pooled - out).detach()     # torch's values, the gradients by hand
        return out, weights
'''),
}


@pytest.fixture(scope="module")
def bare(make_grader):
    """The sandbox without the code rules: its run-time watch, alone."""
    return make_grader(**GRADER, rules=False)


def _mha_points(report: dict) -> float:
    return sum(c["score"] for c in report["checks"] if c["group"] == "mha")


@pytest.mark.parametrize("name", sorted(LIBRARY))
def test_library_attention_reached_by_pieces_earns_nothing(grader, bare, tmp_path, name):
    pieces, plain, use = LIBRARY[name]
    attack = BASE + pieces + use
    named = BASE + plain + use
    base = grade(bare, tmp_path, "base", BASE)
    assert base["score"] == 100.0 and base["diagnoses"] == []        # the honest twin
    seen = grade(bare, tmp_path, "named", named)
    unseen = grade(bare, tmp_path, "attack", attack)
    facts = {f["name"]: f["value"] for f in unseen["facts"]}
    assert facts["forbidden built-ins named in the code"] == []      # the reader saw nothing
    reached = facts["forbidden built-ins reached or called"]
    assert any(("quantizable" if name == "quantizable" else "flex_attention") in r
               for r in reached), reached
    assert "api.forbidden-sdpa" in {d["code"] for d in unseen["diagnoses"]}
    assert _mha_points(unseen) == 0 and _mha_points(seen) == 0
    assert unseen["score"] <= seen["score"] + 1e-6 < 100, (unseen["score"], seen["score"])
    ruled = grade(grader, tmp_path, "ruled", attack)                  # under the code rules
    assert "api.breaks-code-rules" in {d["code"] for d in ruled["diagnoses"]}
    assert ruled["score"] <= seen["score"] + 1e-6
