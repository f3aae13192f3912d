"""The structure checks and diagnoses (SPEC items 3, 4 and 5): distinct heads, cost parity,
device and precision.

The fixtures are the reference with one change each, kept as patches in structure_fixtures.py
and written to a temporary folder (their docstrings say which change). Grading goes through
``Grader``; one grader serves the module.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from autograder import scoring
from autograder.api import Grader
from autograder.checks import Probe
from autograder.checks import evidence_device as evd
from autograder.checks import structure
from autograder.compare import CheckFailed

import structure_fixtures

HERE = Path(__file__).resolve().parent
SOLUTION = HERE.parent / "solutions" / "mha.py"
SHARED = next((p for p in (Path("/work/shared"), HERE.parent.parent / "shared")
               if (p / "catalog" / "mutants").is_dir()), None)
STRUCTURE_CHECKS = {"MultiHeadAttention.distinct", "MultiHeadAttention.init", "cost.params",
                    "cost.flops", "cost.parallel", "device.meta", "device.sync",
                    "precision.autocast", "device.cuda"}
CODES = {"heads.shared-weights", "heads.tiled-block", "heads.unused-block",
         "heads.identical-init", "cost.python-loop-over-heads", "cost.extra-params",
         "device.hardcoded-cpu", "device.host-sync", "api.forbidden-sdpa", "proj.qkv-aliased",
         "mask.fp16-overflow", "dtype.forces-float32"}


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """own(name) -> the path of the structure fixture ``name``, written from its patch."""
    folder = tmp_path_factory.mktemp("structure")
    return lambda name: structure_fixtures.write(name, folder)


@pytest.fixture(scope="module")
def grade(make_grader):
    """grade(path) -> Report, through one CPU grader (its zygote takes seconds to start)."""
    grader = make_grader(seed=1, device="cpu")
    reports = {}

    def run(path, *, stand_in_cuda=False):
        key = (str(path), stand_in_cuda)
        if key not in reports:
            grader.has_cuda = stand_in_cuda           # the CPU stand-in of the GPU path
            try:
                reports[key] = grader.grade(path)
            finally:
                grader.has_cuda = False
        return reports[key]
    return run


def by_name(report) -> dict:
    return {r.name: r for r in report.results}


def lost(report) -> set[str]:
    return {r.name for r in report.results if r.status.value in ("failed", "error")}


def codes(report) -> set[str]:
    return {d.code for d in report.diagnoses}


# --------------------------------------------------------------------------------------
# The reference and correct, unusual submissions

def test_rubric_totals_100_with_the_structure_checks():
    """Do the default rubric's points add up to exactly 100 (the notebook's numeric questions
    aside), structure checks included?"""
    rubric = scoring.load_rubric()
    assert sum(v for name, v in rubric.points.items() if not name.startswith("questions.")) == 100
    assert STRUCTURE_CHECKS <= {name for name, pts in rubric.points.items() if pts > 0}


@pytest.mark.parametrize("name", ["mha"] + sorted(n for n in structure_fixtures.PATCHES
                                                 if n.startswith("correct_")) + ["broadcast_scores"])
def test_correct_code_gets_full_marks_and_no_diagnosis(grade, own, name):
    """Is correct code (the reference, einsum + torch.where, chunk/stack, a broadcast product)
    given every point, with device.cuda skipped and re-scaled, and diagnosed with nothing?"""
    report = grade(SOLUTION if name == "mha" else own(name))
    assert report.score == pytest.approx(100.0)
    assert by_name(report)["device.cuda"].status.value == "skipped"
    assert "skipped: the grading machine has no CUDA device" in by_name(report)["device.cuda"].feedback
    assert any("rescale" in note for note in report.notes)
    assert not report.diagnoses, [d.code for d in report.diagnoses]


def test_per_head_loop_loses_only_the_parallel_check(grade, own):
    """Does a correct per-head Python loop lose cost.parallel alone, with the counts measured?"""
    report = grade(own("loop_correct"))
    assert lost(report) == {"cost.parallel"}
    feedback = by_name(report)["cost.parallel"].feedback
    counts = re.search(r"dispatches ([\d, ]+) matmul/softmax kernels", feedback).group(1)
    assert len(set(counts.split(", "))) == 4                  # one count per head count, growing
    reference = re.search(r"the reference: ([\d, ]+)\)", feedback).group(1)
    assert "Python loop" in feedback and len(set(reference.split(", "))) == 1
    assert codes(report) == {"cost.python-loop-over-heads"}


# --------------------------------------------------------------------------------------
# Shared heads, written seven ways

SHARED_VARIANTS = {"shared_expand": "heads.shared-weights", "shared_modulelist": "heads.shared-weights",
                   "shared_tied": "heads.shared-weights", "shared_param": "heads.shared-weights",
                   "shared_einsum_block": "heads.tiled-block",
                   "shared_project_heads": "heads.tiled-block", "shared_mean_block": "heads.tiled-block"}


@pytest.mark.parametrize("name", sorted(SHARED_VARIANTS))
def test_shared_weight_variants_are_caught(grade, own, name):
    """Does each way of sharing one head's weights lose the distinct-heads points and get
    the right heads.* code, with feedback that explains M identical heads are one head?"""
    report = grade(own(name))
    assert by_name(report)["MultiHeadAttention.distinct"].score == 0
    assert SHARED_VARIANTS[name] in codes(report)
    assert not codes(report) & {"heads.unused-block", "heads.identical-init", "proj.qkv-aliased"}
    message = next(d.message for d in report.diagnoses if d.code == SHARED_VARIANTS[name])
    assert "one head repeated" in message


def test_shared_heads_feedback_reports_counts_and_consequence(grade, own):
    """Does cost.params report the measured counts and say what shared heads cost?"""
    feedback = by_name(grade(own("shared_expand")))["cost.params"].feedback
    assert "1024, 640, 448, 352" in feedback and "one head repeated" in feedback
    feedback = by_name(grade(own("shared_einsum_block")))["MultiHeadAttention.distinct"].feedback
    assert "identical" in feedback and "one head repeated 4 times" in feedback


# --------------------------------------------------------------------------------------
# The other structure mistakes, written unlike the catalogue's

OTHERS = {  # fixture: (code, checks lost; None: value checks fail too, not compared)
    "identical_init_copy": ("heads.identical-init", {"MultiHeadAttention.init"}),
    "tied_at_first_forward": ("heads.identical-init", {"MultiHeadAttention.init"}),
    "extra_param_per_head": ("cost.extra-params", {"cost.params"}),
    "host_sync_guard": ("device.host-sync", {"device.sync"}),
    "cpu_ones_mask": ("device.hardcoded-cpu", {"device.meta"}),
    "fill_minus_1e5": ("mask.fp16-overflow", {"precision.autocast"}),
    "unused_query_blocks": ("heads.unused-block", None),
    "qk_aliased": ("proj.qkv-aliased", None),
    "softmax_dtype_float32": ("dtype.forces-float32", None),
    "sdpa_in_forward": ("api.forbidden-sdpa", None),
}


@pytest.mark.parametrize("name", sorted(OTHERS))
def test_structure_mistakes_are_diagnosed_alone(grade, own, name):
    """Is each mistake diagnosed with its code only, and (where values are right) does it
    lose exactly the check that sees it?"""
    code, expected_lost = OTHERS[name]
    report = grade(own(name))
    assert codes(report) & CODES == {code}
    assert report.score < 100
    if expected_lost is not None:
        assert lost(report) == expected_lost


def test_heads_tied_at_the_first_forward_are_judged_as_used(grade, own):
    """Heads made identical by the module's first training-mode forward (round 2's a2_07: as
    built they differ, so a look right after construction sees nothing) lose the distinct-heads
    point as heads identical at construction do, named with when; the same first-forward
    code that keeps the heads distinct (a lazy rescale) keeps every point."""
    tied, twin = grade(own("tied_at_first_forward")), grade(own("correct_rescaled_at_first_forward"))
    at_init = grade(own("identical_init_copy"))
    assert twin.score == pytest.approx(100.0) and not twin.diagnoses
    assert tied.score < twin.score and tied.score <= at_init.score
    assert by_name(tied)["MultiHeadAttention.init"].score == 0
    assert "after its first forward" in by_name(tied)["MultiHeadAttention.init"].feedback
    assert "right after construction" in by_name(at_init)["MultiHeadAttention.init"].feedback


@pytest.mark.skipif(not hasattr(torch.ops.aten, "_safe_softmax"),
                    reason="torch < 2.5's own scaled_dot_product_attention gives NaN for a row "
                           "with no key left, so there mask.zero-len-nan is the truth")
def test_built_in_attention_is_charged_for_itself_only(grade, own):
    """Is a module that pools with F.scaled_dot_product_attention charged api.forbidden-sdpa
    and nothing else (the sandbox's stand-in answers as torch would, 0 for an empty row)?"""
    assert codes(grade(own("sdpa_key_mask"))) == {"api.forbidden-sdpa"}


def test_the_sandboxes_stand_in_for_built_in_attention_answers_as_torch_does():
    """Does the stand-in the sandbox puts in place of torch's attention kernel give what
    torch's own F.scaled_dot_product_attention gives (unreplaced, outside a sandbox), with no
    mask, boolean and additive masks, a row with no key left, and is_causal?"""
    import subprocess
    import sys
    import textwrap

    from autograder.sandbox import spawn
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(spawn.SANDBOX_DIR)!r})
        import torch
        from worker import _noted_attention
        gen = torch.Generator().manual_seed(3)
        q, k, v = (torch.randn(2, 3, 4, 5, generator=gen, dtype=torch.float64) for _ in range(3))
        keep = torch.rand(2, 1, 4, 4, generator=gen) > 0.4
        keep[0, 0, 1] = False                                    # a row with no key left
        cases = {{"none": {{}}, "bool": {{"attn_mask": keep | torch.eye(4, dtype=torch.bool)}},
                 "empty-row": {{"attn_mask": keep}},
                 "additive": {{"attn_mask": torch.randn(2, 1, 4, 4, generator=gen,
                                                       dtype=torch.float64)}},
                 "causal": {{"is_causal": True}}}}
        for name, kwargs in cases.items():
            expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)
            same = torch.allclose(_noted_attention(q, k, v, **kwargs), expected, equal_nan=True)
            print(name, same)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["none", "True", "bool", "True", "empty-row", "True",
                                  "additive", "True", "causal", "True"], out.stderr[-2000:]


@pytest.mark.parametrize("call", [
    "torch.ops.aten.scaled_dot_product_attention(Q, K, V, attn_mask=weights > 0)",
    "torch._C._nn.scaled_dot_product_attention(Q, K, V, attn_mask=weights > 0)",
    "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(Q, K, V)[0]",
])
def test_built_in_attention_is_seen_however_it_is_reached(grade, tmp_path, call):
    """Is the forbidden kernel noticed when the module reaches it past torch.nn.functional
    (the operator table, the C binding, an internal kernel), and do the module's points go?"""
    source = structure_fixtures.source("sdpa_in_forward")
    original = "nn.functional.scaled_dot_product_attention(Q, K, V, attn_mask=weights > 0)"
    assert original in source
    path = tmp_path / "mha.py"
    path.write_text(source.replace(original, call))
    report = grade(path)
    said = {d.code: d.message for d in report.diagnoses}
    assert "scaled_dot_product" in said["api.forbidden-sdpa"]
    assert by_name(report)["MultiHeadAttention.builtin"].status.value == "failed"
    assert all(r.score == 0 for r in report.results if r.group == "mha")


@pytest.mark.parametrize("compute", [
    lambda a, b, bias: a[0] @ b[0],                                  # mm
    lambda a, b, bias: a @ b,                                        # bmm
    lambda a, b, bias: a.unsqueeze(1) @ b.unsqueeze(1).expand(-1, 3, -1, -1),  # 4-d matmul
    lambda a, b, bias: torch.einsum("bnk,bkm->bnm", a, b),
    lambda a, b, bias: torch.nn.functional.linear(a, b[0].T, bias),  # addmm
    lambda a, b, bias: torch.baddbmm(torch.zeros(2, 4, 6, dtype=a.dtype), a, b),
    lambda a, b, bias: (a.unsqueeze(-1) * b.unsqueeze(1)).sum(-2),   # no product: 0 FLOPs
])
def test_the_traced_flops_are_those_torch_counts(compute):
    """Does the one traced forward count the FLOPs torch.utils.flop_counter would?"""
    from torch.utils.flop_counter import FlopCounterMode

    from autograder.sandbox import probes
    a, b = torch.randn(2, 4, 5, dtype=torch.float64), torch.randn(2, 5, 6, dtype=torch.float64)
    bias = torch.randn(6, dtype=torch.float64)
    with torch.no_grad():
        counter = FlopCounterMode(display=False)
        with counter:
            compute(a, b, bias)
        trace = probes.OpTrace("cpu")
        with trace:
            compute(a, b, bias)
    assert trace.flops == counter.get_total_flops()


def test_device_feedback_names_cause_and_fix(grade, own):
    """Do the device and precision checks say what happened and how to fix it?"""
    meta = by_name(grade(own("cpu_ones_mask")))["device.meta"].feedback
    assert "meta" in meta and "device=scores.device" in meta
    sync = by_name(grade(own("host_sync_guard")))["device.sync"].feedback
    assert "_local_scalar_dense" in sync
    autocast = by_name(grade(own("fill_minus_1e5")))["precision.autocast"].feedback
    assert "float16" in autocast and "finfo" in autocast


# --------------------------------------------------------------------------------------
# The GPU path

def test_cuda_check_runs_on_the_cpu_stand_in(grade, own):
    """With the grader told it has CUDA but running on the CPU, does device.cuda run its
    whole pipeline: pass for the reference, fail for a float16 overflow?"""
    assert by_name(grade(SOLUTION, stand_in_cuda=True))["device.cuda"].status.value == "passed"
    result = by_name(grade(own("fill_minus_1e5"), stand_in_cuda=True))["device.cuda"]
    assert result.status.value == "failed" and "autocast-float16" in result.feedback


def test_a_submission_cannot_turn_the_cuda_check_into_skipped(monkeypatch):
    """If the grader has CUDA but the submission's process says it has none (e.g. it patched
    torch.cuda.is_available), does device.cuda fail rather than skip?"""
    monkeypatch.setattr(evd, "cuda_runs", lambda p: ({"unavailable": True}, {}, {}))
    probe = Probe(student=None, reference=None, seed=0, has_cuda=True, device="cuda")
    with pytest.raises(CheckFailed, match="could not use the GPU"):
        structure.device_cuda(probe)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; this machine has none")
def test_cuda_check_on_a_gpu(tmp_path):
    """On a GPU: does the reference pass device.cuda, and do a CPU-created mask, a float16
    overflow and a (batch, heads, n, n, p) broadcast fail it?"""
    grader = Grader(seed=1, device="cuda")
    try:
        assert by_name(grader.grade(SOLUTION))["device.cuda"].status.value == "passed"
        for name in ("cpu_ones_mask", "fill_minus_1e5", "broadcast_scores"):
            result = by_name(grader.grade(structure_fixtures.write(name, tmp_path)))["device.cuda"]
            assert result.status.value == "failed", (name, result.feedback)
    finally:
        grader.close()


# --------------------------------------------------------------------------------------
# The shared catalogue (skipped where it is absent)

def _mutants():
    if SHARED is None:
        return []
    return sorted((SHARED / "catalog" / "mutants").glob("*.py"))


def _code(path: Path) -> str:
    found = re.search(r"^# CODE: (\S+)", path.read_text(encoding="utf-8"), re.M)
    return found.group(1) if found else ""


@pytest.mark.skipif(SHARED is None, reason="the shared catalogue (/work/shared or ../shared) is absent")
@pytest.mark.parametrize("path", [p for p in _mutants() if _code(p) in CODES], ids=lambda p: p.stem)
def test_catalogue_mutant_is_diagnosed(grade, path):
    """Does each catalogue mutant of these codes lose points and get its code, and no other
    of these codes?"""
    report = grade(path)
    assert report.score < 100
    assert codes(report) & CODES == {_code(path)}


@pytest.mark.slow
@pytest.mark.skipif(SHARED is None, reason="the shared catalogue (/work/shared or ../shared) is absent")
@pytest.mark.parametrize("path", [p for p in _mutants() if _code(p) not in CODES], ids=lambda p: p.stem)
def test_other_catalogue_mutants_get_none_of_these_codes(grade, path):
    """Do the catalogue's other mutants stay free of these codes?"""
    assert not codes(grade(path)) & CODES


@pytest.mark.skipif(SHARED is None, reason="the shared catalogue (/work/shared or ../shared) is absent")
def test_codes_are_in_the_taxonomy():
    """Is every code these diagnoses use listed in TAXONOMY.md?"""
    taxonomy = (SHARED / "catalog" / "TAXONOMY.md").read_text(encoding="utf-8")
    assert all(f"`{code}`" in taxonomy for code in CODES)
