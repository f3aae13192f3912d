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


@pytest.fixture(scope="module")
def grader():
    g = api.Grader(seed=4321)
    g.timeouts.update({"import": 10.0, "probe": 8.0, "group": 16.0, "submission": 60.0})
    yield g
    g.close()


@pytest.fixture(scope="module")
def bare():
    """A grader without the code rules: the sandbox's isolation and the boundary's checks,
    tried alone (defence in depth: each layer must hold by itself)."""
    g = api.Grader(seed=4321, rules=False)
    g.timeouts.update({"import": 10.0, "probe": 8.0, "group": 16.0, "submission": 60.0})
    yield g
    g.close()


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
