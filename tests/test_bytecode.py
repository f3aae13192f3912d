"""Bytecode planted in the sandbox's own ``__pycache__`` never runs: the zygote (and every
sandbox forked from it) loads its modules from their sources, and writes no bytecode."""
from __future__ import annotations

import importlib.util
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

from autograder import api

ROOT = api.PROJECT


def test_a_planted_pyc_in_the_sandbox_folder_is_never_loaded(tmp_path):
    copy = tmp_path / "project"
    shutil.copytree(ROOT / "autograder", copy / "autograder",
                    ignore=shutil.ignore_patterns("__pycache__"))
    marker = tmp_path / "PLANTED_BYTECODE_RAN"
    sandbox = copy / "autograder" / "sandbox"
    forged = tmp_path / "probes.py"
    forged.write_text((sandbox / "probes.py").read_text()
                      + f"\nopen({str(marker)!r}, 'w').write('ran')\n")
    cached = Path(importlib.util.cache_from_source(str(sandbox / "probes.py")))
    cached.parent.mkdir(exist_ok=True)
    # hash-based and never checked: the one a plain import would load whatever the source says
    py_compile.compile(str(forged), cfile=str(cached), dfile=str(sandbox / "probes.py"),
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    script = (f"import sys; sys.path.insert(0, {str(copy)!r})\n"
              "from autograder.sandbox import spawn\n"
              "z = spawn.Zygote(hide=[], memory_bytes=0)\n"
              "z.wait_ready(120)\n"
              "z.close()\n"
              "print('ready')\n")
    done = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True,
                          timeout=180)
    assert "ready" in done.stdout, done.stderr[-2000:]
    assert not marker.exists(), "the zygote ran the planted bytecode"
    # and it wrote none of its own next to the sources
    assert sorted(p.name for p in cached.parent.iterdir()) == [cached.name]
    # the same file *is* what a plain import loads: the plant is real
    plain = subprocess.run([sys.executable, "-I", "-c",
                            f"import sys; sys.path.insert(0, {str(sandbox)!r}); import probes"],
                           capture_output=True, text=True, timeout=120)
    assert marker.exists(), plain.stderr[-2000:]
