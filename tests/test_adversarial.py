"""Submissions that attack the grader: each ends as its header says, and changes nothing.

Every file starts with three lines, as in ``../shared/catalog/adversarial/``:
``# ATTACK:`` what it tries, ``# HONEST: 0 | full`` what its work deserves, ``# EXPECT:``.
Ours are in ``tests/submissions/attacks/``; the shared catalogue is graded too when the
checkout sits next to ``../shared`` (skipped otherwise), in-process with one Grader, and
once more through the command line, as a course would run it.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder import api
from sandbox_users import sandbox_processes

ROOT = api.PROJECT
ATTACKS = sorted((ROOT / "tests" / "submissions" / "attacks").glob("*.py"))
CATALOGUE = ROOT.parent / "shared" / "catalog" / "adversarial"
CATALOGUED = sorted(CATALOGUE.glob("*.py")) if CATALOGUE.is_dir() else []
#: The second round (``round2/``): attacks written against the grader's design; headers may
#: say ``partial N`` (the trick may earn no more than N of 100).
ROUND2 = sorted((CATALOGUE / "round2").glob("*.py")) if (CATALOGUE / "round2").is_dir() else []
#: The third round (``round3/``): attacks on the facts the grader establishes, and honest files
#: a guessing reader would punish (``HONEST: full``).
ROUND3 = sorted((CATALOGUE / "round3").glob("*.py")) if (CATALOGUE / "round3").is_dir() else []
#: Our own honest files with round 3's ideas (seeding at the top, a __main__ self-test), so
#: that a checkout without ../shared grades them too.
HONEST_IDIOMS = [ROOT / "tests" / "submissions" / "attacks" / f"{name}.py"
                 for name in ("honest_seeded_notebook", "honest_main_block")]
MARKERS = ("ATTACK_ESCAPE_MARKER", "ATTACK_SIDE_MARKER", "ADVERSARIAL_a17_UNPICKLED.txt")


def honest(path: Path) -> str:
    """"0", "full" or "partial" (then ``partial_limit`` gives N)."""
    head = path.read_bytes()[:4000].decode("utf-8", "replace")
    found = re.search(r"^#\s*HONEST:\s*(\S+)", head, re.M)
    return found.group(1).lower() if found else "0"


def partial_limit(path: Path) -> float:
    head = path.read_bytes()[:4000].decode("utf-8", "replace")
    found = re.search(r"^#\s*HONEST:\s*partial\s+([0-9.]+)", head, re.M)
    return float(found.group(1))


def protected_digest() -> str:
    """The files an attack would most like to change: the reference, the rubric, the sandbox,
    these fixtures. (integrity.digest() covers all of autograder/ and is what the grader
    itself checks; here a narrower set keeps the test stable while others edit the tree.)"""
    h = hashlib.sha256()
    files = [*sorted((ROOT / "solutions").rglob("*.py")), ROOT / "autograder" / "rubric.toml",
             *(ROOT / "autograder" / "sandbox" / f"{name}.py"
               for name in ("host", "jail", "protocol", "results", "worker", "zygote")), *ATTACKS]
    for path in files:
        h.update(str(path).encode() + path.read_bytes())
    return h.hexdigest()


def markers() -> list[str]:
    places = [ROOT, ROOT / "solutions", ROOT / "autograder", Path.cwd(), Path("/tmp"),
              Path("/var/tmp"), Path("/dev/shm"), Path("/"), Path("/etc"), Path.home()]
    return [str(p / m) for p in places for m in MARKERS if (p / m).exists()]


#: the options of this module's `grader` (tests/conftest.py)
GRADER = {"seed": 4321, "timeouts": {"import": 10.0, "probe": 8.0, "group": 16.0, "submission": 60.0}}


@pytest.fixture(scope="module")
def bare(make_grader):
    """A grader without the code rules: the sandbox's isolation and the boundary's checks,
    tried alone (defence in depth: each layer must hold by itself)."""
    return make_grader(**GRADER, rules=False)


@pytest.fixture(scope="module")
def reference(grader):
    report = grader.grade(ROOT / "solutions" / "mha.py")
    assert report.score == report.max_score
    return report


def check_report(report, path: Path, reference) -> None:
    """Score as the header says; same max_score and skips as a correct submission."""
    assert report.max_score == pytest.approx(reference.max_score)
    if honest(path) == "full":
        assert report.score == pytest.approx(report.max_score), [
            (r.name, r.feedback) for r in report.results if r.score < r.max_score]
    elif honest(path) == "partial":
        assert report.score <= partial_limit(path) * report.max_score / 100 + 1e-6, \
            [(r.name, r.score) for r in report.results if r.score]
    else:
        assert report.score == 0, [(r.name, r.score) for r in report.results if r.score]
    skipped = {r.name for r in report.results if r.status.value == "skipped"}
    assert skipped <= {r.name for r in reference.results if r.status.value == "skipped"}
    text = json.dumps(report.to_dict())
    assert len(text) < 200_000
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", "".join(r.feedback for r in report.results))


def grade_safely(grader, path: Path, reference, limit: float):
    before_files = protected_digest()
    start = time.monotonic()
    report = grader.grade(path)
    assert time.monotonic() - start < limit
    check_report(report, path, reference)
    assert protected_digest() == before_files
    assert markers() == []
    grader.answers.close()       # the reference's own sandbox, held from one submission to the next
    deadline = time.monotonic() + 5
    while sandbox_processes(grader.zygote) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not sandbox_processes(grader.zygote), "a process of the sandbox outlived it"
    return report


#: attacks that run into a time limit (20-25 s each): in the full suite, out of the fast loop
WAITS_OUT = {"sigterm_daemon", "a06_sleep_forever_in_forward"}


def _params(paths) -> list:
    return [pytest.param(p, id=p.stem, marks=[pytest.mark.slow] if p.stem in WAITS_OUT else [])
            for p in paths]


@pytest.mark.parametrize("path", _params(ATTACKS))
def test_our_attacks(grader, reference, path):
    """Does each of our attacks end as its header says, leaving nothing behind?"""
    grade_safely(grader, path, reference, limit=90)


@pytest.mark.slow
@pytest.mark.parametrize("path", ATTACKS, ids=[p.stem for p in ATTACKS])
def test_our_attacks_without_the_code_rules(bare, reference, path):
    """Without the code rules (which refuse most of these before they act), does the sandbox
    alone still end each attack as its header says?"""
    grade_safely(bare, path, reference, limit=90)


def test_reading_proc_finds_nothing(bare, reference):
    """Is /proc snooping answered with nothing to delegate to (not-implemented errors), by the
    sandbox alone?"""
    report = grade_safely(bare, ROOT / "tests/submissions/attacks/proc_snoop.py", reference, 60)
    assert any("not implemented" in r.feedback for r in report.results)


def test_a_patched_probe_module_is_caught(bare, grader, reference):
    """Forged probe answers of the wrong form are errors that name it, by the boundary alone;
    under the code rules the patch is refused where it stands."""
    report = grade_safely(bare, ROOT / "tests/submissions/attacks/patch_probes.py", reference,
                          60)
    assert any("wrong form" in r.feedback for r in report.results)
    report = grade_safely(grader, ROOT / "tests/submissions/attacks/patch_probes.py", reference,
                          60)
    assert "api.breaks-code-rules" in {d.code for d in report.diagnoses}


@pytest.mark.skipif(not CATALOGUED, reason=f"no shared catalogue at {CATALOGUE}")
@pytest.mark.parametrize("path", _params(CATALOGUED))
def test_the_shared_catalogue(grader, reference, path):
    """Does each file of ../shared/catalog/adversarial end as its header says?"""
    grade_safely(grader, path, reference, limit=120)


@pytest.mark.skipif(not ROUND2, reason=f"no second-round catalogue at {CATALOGUE / 'round2'}")
@pytest.mark.parametrize("path", ROUND2, ids=[p.stem for p in ROUND2])
def test_the_shared_second_round(grader, reference, path):
    """Does each file of ../shared/catalog/adversarial/round2 earn no more than its header
    allows, crash nothing and leave nothing behind?"""
    grade_safely(grader, path, reference, limit=120)


@pytest.mark.skipif(not ROUND3, reason=f"no third-round catalogue at {CATALOGUE / 'round3'}")
@pytest.mark.parametrize("path", ROUND3, ids=[p.stem for p in ROUND3])
def test_the_shared_third_round(grader, reference, path):
    """Does each file of ../shared/catalog/adversarial/round3 earn no more than its header
    allows (the honest ones: full marks and no code), crash nothing and leave nothing behind?"""
    report = grade_safely(grader, path, reference, limit=120)
    if honest(path) == "full":
        assert not report.diagnoses, [d.code for d in report.diagnoses]


@pytest.mark.parametrize("path", HONEST_IDIOMS, ids=[p.stem for p in HONEST_IDIOMS])
def test_honest_idioms_get_full_marks_and_no_code(grader, reference, path):
    """Seeding every generator at the top, a self-test under __main__ that imports traceback
    and touches sys.path: ordinary code, full marks, no code, no rule broken."""
    report = grade_safely(grader, path, reference, limit=60)
    assert report.score == report.max_score
    assert not report.diagnoses, [(d.code, d.message) for d in report.diagnoses]


#: The ordinary idioms of issue 18 (item 2), all in one correct module built from the reference:
#: seeding at the top, a __main__ self-test that imports traceback and touches sys.path, train()
#: and eval() overridden (passing the mode on), reset_parameters() with torch.nn.init.
IDIOMS = [
    ("from torch import Tensor, nn\n",
     "from torch import Tensor, nn\nimport random\n\nimport numpy as np\n\n"
     "random.seed(0)\nnp.random.seed(0)\ntorch.manual_seed(0)\n"
     "torch.random.manual_seed(0)\n"),
    ("        self.dropout = nn.Dropout(dropout)\n",
     "        self.dropout = nn.Dropout(dropout)\n        self.reset_parameters()\n"),
    ("    def forward(self, queries: Tensor,",
     """    def reset_parameters(self) -> None:
        for layer in (self.W_q, self.W_k, self.W_v, self.W_o):
            nn.init.xavier_uniform_(layer.weight)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)

    def train(self, mode: bool = True):
        super().train(mode)
        self.dropout.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def forward(self, queries: Tensor,"""),
]
MAIN_BLOCK = '''

if __name__ == "__main__":
    import sys
    import traceback

    sys.path.insert(0, ".")
    try:
        m = MultiHeadAttention(8, 2).eval()
        x = torch.randn(2, 3, 8)
        print(m(x, x, x, torch.tensor([1, 3])).shape)
    except Exception:
        traceback.print_exc()
'''


def test_a_correct_module_with_every_ordinary_idiom_gets_full_marks(grader, reference, tmp_path):
    import structure_fixtures
    text = structure_fixtures.patched("idioms", "CORRECT, with the ordinary idioms: seeding, "
                                      "a __main__ self-test, train()/eval() and "
                                      "reset_parameters() overridden.", IDIOMS) + MAIN_BLOCK
    path = tmp_path / "mha.py"
    path.write_text(text)
    report = grader.grade(path)
    assert report.score == report.max_score == pytest.approx(reference.max_score), [
        (r.name, r.feedback[:200]) for r in report.results if r.score < r.max_score]
    assert not report.diagnoses, [(d.code, d.message) for d in report.diagnoses]
    facts = {f.name: f.value for f in report.facts}
    assert facts["code rules broken"] == []


def run_cli(path: Path, output: Path) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", str(path),
                           "--format", "json", "--output", str(output)],
                          cwd=ROOT, capture_output=True, timeout=400, stdin=subprocess.DEVNULL)
    return proc.returncode, proc.stderr.decode("utf-8", "replace")[-2000:]


@pytest.mark.slow
@pytest.mark.skipif(not CATALOGUED, reason=f"no shared catalogue at {CATALOGUE}")
def test_the_shared_catalogue_through_the_cli(tmp_path, reference):
    """`python -m autograder grade FILE --format json` per catalogue file: exit 0, valid
    JSON, the score its header allows, and the grader's files unchanged."""
    before = protected_digest()
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        runs = dict(zip(CATALOGUED, pool.map(lambda p: run_cli(p, tmp_path / f"{p.stem}.json"),
                                              CATALOGUED)))
    for path, (code, stderr) in runs.items():
        assert code == 0, f"{path.name}: exit {code}\n{stderr}"
        result = json.loads((tmp_path / f"{path.stem}.json").read_text())
        assert result["max_score"] == pytest.approx(reference.max_score), path.name
        if honest(path) == "full":
            assert result["score"] == pytest.approx(result["max_score"]), path.name
        else:
            assert result["score"] == 0, (path.name, [c["name"] for c in result["checks"]
                                                      if c["score"]])
    assert protected_digest() == before
    assert markers() == []
