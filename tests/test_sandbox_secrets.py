"""No secret in a sandbox (issue 21, 5): a course's secret kept where nbgrader and Jupyter
read configuration (here: the interpreter's own ``etc/jupyter``) is not visible to a
submission that looks everywhere configuration lives; the sandbox's root binds folders
Python needs, never its whole prefix, and only a few files of /etc."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from autograder import api
from autograder.sandbox import spawn

ROOT = Path(__file__).resolve().parent.parent
ATTACK = ROOT / "tests" / "submissions" / "attacks" / "secrets_course_config.py"
MARKER = "MHA-PLANTED-SECRET-7f3a"
sys.path.insert(0, str(ROOT / "autograder" / "sandbox"))
import jail  # noqa: E402


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A course config with a secret in <prefix>/etc/jupyter (where nbgrader reads it), and
    another where $JUPYTER_CONFIG_DIR points; removed afterwards."""
    folder = Path(sys.prefix) / "etc" / "jupyter"
    made = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "nbgrader_config.py"
        if config.exists():
            pytest.skip(f"{config} exists already: not overwritten")
        config.write_text(f"c.TrustedGrades.variant_secret = {MARKER!r}\n")
    except OSError as e:
        pytest.skip(f"cannot plant a config in {folder}: {e}")
    own = tmp_path / "jupyter-config"
    own.mkdir()
    (own / "nbgrader_config.py").write_text(f"c.TrustedGrades.variant_secret = {MARKER!r}\n")
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(own))
    try:
        yield config
    finally:
        config.unlink()
        if made:
            shutil.rmtree(folder, ignore_errors=True)


def test_the_configuration_places_are_hidden(planted):
    """Are the prefix's etc/jupyter and $JUPYTER_CONFIG_DIR among the places hidden?"""
    places = spawn.config_places()
    assert str(planted.parent.resolve()) in places
    assert os.path.realpath(os.environ["JUPYTER_CONFIG_DIR"]) in places


def test_the_root_binds_no_whole_prefix_and_little_of_etc():
    """Does the sandbox's root bind the folders on Python's path, not its prefix, and only
    the listed files of /etc?"""
    paths = jail.runtime_paths([])
    assert "/etc" not in paths
    if os.path.realpath(sys.prefix) not in jail.SYSTEM:
        assert os.path.realpath(sys.prefix) not in paths
    files = jail.runtime_files(paths, [])
    assert all(f in jail.ETC for f in files) and "/etc/shadow" not in files


def test_a_submission_that_looks_everywhere_finds_no_secret(planted):
    """Graded through the grader, does the attack read no configuration and see no secret?"""
    # without the code rules, which would refuse its file reads before the sandbox is tried
    grader = api.Grader(seed=3, device="cpu", rules=False)
    try:
        report = grader.grade(ATTACK)
    finally:
        grader.close()
    text = " ".join(r.feedback for r in report.results) + " ".join(report.notes)
    assert MARKER not in text
    assert "read 0 config files; secrets seen: []" in text, text[:600]
    assert report.score == 0
