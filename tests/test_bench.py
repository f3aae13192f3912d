"""The benchmarks' own workings: the classes `bench` builds, and `sandbox_bench --profile`'s
account of where a submission's time goes. (Their figures are measured, never asserted.)"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from autograder import bench

ROOT = Path(__file__).resolve().parent.parent


def test_the_classic_class_is_half_correct_and_half_classic_bugs_or_the_stub():
    kinds = [bench.classic(i)[0] for i in range(2 * len(bench.BUGS))]
    assert kinds.count("correct") == len(bench.BUGS)
    assert set(kinds) - {"correct"} == set(bench.BUGS)
    assert bench.classic(0)[1] == bench.reference_source()


def test_the_realistic_class_cycles_through_every_real_style_file():
    files = sorted(bench.REALISTIC.glob("*.py"))
    pick = bench.realistic()
    drawn = [pick(i) for i in range(len(files))]
    correct = [f for f in files if f.read_text().split("\n", 1)[0].strip() in
               ("# CODES:", "# CODES: none")]
    assert [kind for kind, _ in drawn].count("correct") == len(correct) > 0
    assert [kind for kind, _ in drawn].count("mistaken") > len(files) // 2   # most have mistakes
    assert pick(len(files)) == drawn[0]                                     # in turn
    for _, code in drawn:                   # each a cell that is not the notebook's first
        assert "from __future__" not in code
        compile(code, "<cell>", "exec")


def test_profile_says_where_a_mistaken_submissions_time_goes(tmp_path):
    buggy = tmp_path / "split_bug.py"
    buggy.write_text(bench.VARIANTS["split.no-transpose"](bench.reference_source()))
    out = subprocess.run([sys.executable, "-m", "autograder.sandbox_bench", "--n", "2",
                          "--profile", "--submission", str(buggy)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300).stdout
    stages = out[out.index("the stages of one submission"):out.index("where one")]
    from autograder import api
    for stage in ("load the submission", "start the sandbox", "close the sandbox",
                  *(f.__name__ for f in api.STAGES)):
        assert stage in stages, stage
    table = out[out.index("where one submission's time goes"):]
    for label in ("stage: start the sandbox", "probe mha/mha (round trip)",
                  "check split_heads.values",
                  "diagnosis split.no-transpose", "the combinations"):
        assert label in table, label
    assert out.index("isolation alone") < out.index("the stages of one submission")
