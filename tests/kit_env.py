"""Run pytest on a student kit as a student would: in its own folder, outside the project,
with the project's packages not importable (the kit must need only torch, numpy, pytest)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

PROJECT_PACKAGES = ("autograder", "solutions", "assignments")
BLOCKER = f'''import sys


class _ProjectBlocker:
    """The project is installed here (editable); a student's machine does not have it."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {PROJECT_PACKAGES!r}:
            raise ImportError(f"{{name}} is not installed on a student's machine")
        return None


sys.meta_path.insert(0, _ProjectBlocker())
'''


def student_env(tmp: Path) -> dict:
    """An environment whose Python cannot import the project (a sitecustomize blocks it)."""
    site = tmp / "student-site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST"))}
    env["PYTHONPATH"] = str(site)
    return env


def run_pytest(kit: Path, tmp: Path, timeout=600) -> tuple[dict[str, tuple[str, str]], str]:
    """({test name: (outcome, message)}, pytest's output) of plain ``pytest`` in ``kit``."""
    xml = tmp / "junit.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"--junitxml={xml}"], cwd=kit, env=student_env(tmp),
                          capture_output=True, text=True, timeout=timeout)
    outcomes = {}
    if xml.is_file():
        for case in ET.parse(xml).getroot().iter("testcase"):
            problem = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
            outcomes[case.get("name")] = (("passed", "") if problem is None else
                                          (problem.tag, problem.get("message") or ""))
    return outcomes, done.stdout + done.stderr
