"""Grading a class: batch over a mixed folder, resuming after kill -9, same seed same
scores, the class report, and the Dask executor against the local one."""
from __future__ import annotations

import base64
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder import bench
from autograder.cli import main

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = (ROOT / "solutions" / "mha.py").read_text(encoding="utf-8")
GRADED = {"correct", "buggy", "hostile", "malformed", "erin"}     # each gets a result
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def class_dir(tmp_path_factory) -> Path:
    """A flat folder of files and one folder per student, good, bad and hostile."""
    d = tmp_path_factory.mktemp("class")
    (d / "correct.py").write_text(REFERENCE)
    (d / "buggy.py").write_text(bench.VARIANTS["pool.no-scale"](bench.reference_source()))
    (d / "hostile.py").write_text("import os\nos._exit(1)\n")
    (d / "malformed.ipynb").write_text('{"cells": [')
    (d / "erin").mkdir()                                  # a GitHub Classroom clone
    (d / "erin" / "mha.py").write_text(REFERENCE)
    (d / "erin" / "README.md").write_text("my submission\n")
    (d / "frank").mkdir()                                 # two notebooks: which one to grade?
    for name in ("a.ipynb", "b.ipynb"):
        (d / "frank" / name).write_text('{"cells": []}')
    (d / "notes.txt").write_text("not a submission\n")
    return d


def results(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (out / "results").glob("*.json")}


@pytest.fixture(scope="module")
def graded(class_dir, tmp_path_factory) -> tuple[Path, int]:
    out = tmp_path_factory.mktemp("out") / "graded"
    status = main(["batch", str(class_dir), "--output", str(out), "--seed", "7",
                   "--workers", "2"])
    return out, status


def test_mixed_folder_gets_a_result_each(graded):
    """Do correct, buggy, hostile and malformed submissions all get a result, and is the
    folder the grader cannot pick a file in recorded as a failure (exit status 1)?"""
    out, status = graded
    found = results(out)
    assert set(found) == GRADED
    assert status == 1                                    # frank could not be graded
    assert "several candidates" in json.loads((out / "failures" / "frank.json").read_text())["error"]
    assert found["correct"]["score"] == found["correct"]["max_score"] > 0
    assert found["erin"]["score"] == found["correct"]["score"]
    assert 0 < found["buggy"]["score"] < found["buggy"]["max_score"]
    assert found["hostile"]["score"] == 0 and found["malformed"]["score"] == 0
    assert any("not a valid notebook" in n for n in found["malformed"]["notes"])
    assert json.loads((out / "batch.json").read_text())["seed"] == 7
    rows = (out / "grades.csv").read_text().splitlines()
    assert rows[0].startswith("student,assignment,score,max_score,status")
    assert sorted(r.split(",")[0] for r in rows[1:]) == sorted(GRADED | {"frank"})
    assert sum(",grader-failed," in r for r in rows) == 1


def test_rerun_grades_nothing_twice(graded, class_dir, capsys):
    """Does a second run over a finished folder grade nothing and change no result?"""
    out, _ = graded
    before = results(out)
    main(["batch", str(class_dir), "--output", str(out)])
    assert "0 graded now, 5 already graded" in capsys.readouterr().err
    assert results(out) == before


def _children(pid: int) -> set[int]:
    """The children of every thread of ``pid`` (a thread that ends while it is read, as the
    batch's threads do, has none left to give)."""
    found = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found |= {int(c) for c in (task / "children").read_text().split()}
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def test_killed_batch_resumes_with_one_complete_result_each(graded, class_dir, tmp_path,
                                                            capsys):
    """Killed with SIGKILL after its first result, does a rerun end with exactly one complete
    result per submission, no leftovers, no surviving zygote, and the same scores?"""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "autograder", "batch", str(class_dir), "--output", str(out),
               "--seed", "7", "--workers", "1"]
    proc = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not list((out / "results").glob("*.json")) and time.monotonic() < deadline:
        assert proc.poll() is None, "the batch ended before it could be killed"
        time.sleep(0.05)
    helpers = _children(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(results(out)) < len(GRADED)
    deadline = time.monotonic() + 20
    while any(Path(f"/proc/{p}").exists() for p in helpers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(Path(f"/proc/{p}/cmdline").exists() and "zygote" in
                   Path(f"/proc/{p}/cmdline").read_text() for p in helpers), "the zygote outlived the batch"
    assert main(["batch", str(class_dir), "--output", str(out)]) == 1    # the recorded seed
    assert re.search(r"[1-9]\d* already graded", capsys.readouterr().err)
    names = sorted(p.name for p in (out / "results").iterdir())
    assert names == sorted(f"{k}.json" for k in GRADED)          # no duplicates, no leftovers
    remote, local = results(out), results(graded[0])
    assert set(remote) == set(local)
    differ = {(key, field): (remote[key].get(field), local[key].get(field))
              for key in remote for field in set(remote[key]) | set(local[key])
              if remote[key].get(field) != local[key].get(field)}
    assert not differ, differ                      # same seed, same scores


def test_report_renders_with_real_pngs(graded, tmp_path):
    """Does the class report render one HTML page whose embedded images are real PNGs, the
    same as the PNG files written beside it?"""
    pytest.importorskip("matplotlib", reason="the report needs the 'report' extra")
    out, _ = graded
    status = main(["report", str(out), "--student", "correct", "--output", str(tmp_path)])
    assert status == 0
    page = (tmp_path / "index.html").read_text()
    embedded = [base64.b64decode(m) for m in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)]
    files = {p.name: p.read_bytes() for p in tmp_path.glob("*.png")}
    assert set(files) == {"scores.png", "checks.png", "parts.png", "diagnoses.png", "attention.png"}
    assert len(embedded) == 5 and set(embedded) == set(files.values())
    assert all(png.startswith(PNG) and b"IHDR" in png[:16] and png.endswith(b"IEND\xaeB`\x82")
               for png in embedded)
    assert "every head differs" in page and "Attention maps of correct" in page


def test_dask_executor_equals_local(graded, class_dir, tmp_path):
    """Does a local Dask cluster, over TLS with the course's certificates, give the same
    results as the local run, same folder and seed?"""
    distributed = pytest.importorskip("distributed", reason="the 'distributed' extra is not installed")
    import dask_certs
    out = tmp_path / "dask"
    certs = dask_certs.make(tmp_path / "certs")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True,
                                  protocol="tls://", host="127.0.0.1",
                                  security=dask_certs.security(certs),
                                  dashboard_address=":0", silence_logs=40) as cluster:
        assert cluster.scheduler_address.startswith("tls://")
        status = main(["batch", str(class_dir), "--output", str(out), "--seed", "7",
                       "--executor", "dask", "--scheduler", cluster.scheduler_address,
                       "--tls-ca-file", certs["ca"], "--tls-cert", certs["cert"],
                       "--tls-key", certs["key"]])
    assert status == 1                                    # frank, as locally
    remote, local = results(out), results(graded[0])
    assert set(remote) == set(local)
    differ = {(key, field): (remote[key].get(field), local[key].get(field))
              for key in remote for field in set(remote[key]) | set(local[key])
              if remote[key].get(field) != local[key].get(field)}
    assert not differ, differ


def test_usage_errors(tmp_path, class_dir, graded):
    """Are a missing folder, a changed seed and dask without a scheduler usage errors (2)?"""
    assert main(["batch", str(tmp_path / "nope"), "--output", str(tmp_path / "o")]) == 2
    assert main(["batch", str(class_dir), "--output", str(graded[0]), "--seed", "8"]) == 2
    assert main(["batch", str(class_dir), "--output", str(tmp_path / "o"),
                 "--executor", "dask"]) == 2


def test_discover_layouts(tmp_path):
    """Are nbgrader trees, flat folders and per-student folders found, in a stable order,
    with colliding stems kept apart and OUT skipped?"""
    from autograder.roster import discover
    for student in ("bob", "alice"):
        (tmp_path / "course" / "submitted" / student / "mha").mkdir(parents=True)
        (tmp_path / "course" / "submitted" / student / "other").mkdir()
    jobs = discover(tmp_path / "course", assignment="mha")
    assert [(j.key, j.student, j.assignment) for j in jobs] == [("mha/alice", "alice", "mha"),
                                                                ("mha/bob", "bob", "mha")]
    assert len(discover(tmp_path / "course" / "submitted")) == 4
    flat = tmp_path / "flat"
    flat.mkdir()
    for name in ("amy.py", "amy.ipynb", "ben.py", ".hidden.py", "readme.md"):
        (flat / name).write_text("")
    (flat / "out").mkdir()
    keys = [j.key for j in discover(flat, exclude=[flat / "out"])]
    assert keys == ["amy.ipynb", "amy.py", "ben"]


def test_identical_submissions_are_graded_once(tmp_path):
    """Do two students with the same code share one grading, and is a grader failure on
    another recorded without stopping the batch?"""
    from autograder import batch

    class Recorder:
        seen: list = []

        def __init__(self, options):
            self.options = options

        def run(self, tasks):
            for t in tasks:
                Recorder.seen.append(t.job.student)
                yield t, ({"error": "boom"} if t.job.student == "cy" else
                          {"report": {"score": 1.0, "max_score": 2.0, "checks": [], "diagnoses": []}})

        def close(self):
            pass
    for student, code in (("ann", "x = 1\n"), ("bo", "x = 1\n"), ("cy", "x = 2\n")):
        folder = tmp_path / "submitted" / student / "mha"
        folder.mkdir(parents=True)
        (folder / "mha.py").write_text(code)
    summary = batch.run(tmp_path, tmp_path / "out", seed=3, executor=Recorder)
    assert sorted(Recorder.seen) == ["ann", "cy"] and summary.graded == 2
    assert list(summary.failures) == ["mha/cy"]
    assert (tmp_path / "out" / "results" / "mha" / "bo.json").exists()
    assert (tmp_path / "out" / "failures" / "mha" / "cy.json").exists()
