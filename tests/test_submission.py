"""Bad input: each gets a clear message and a result (score 0, exit 0), never a traceback."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile

import pytest

from autograder import api, submission

ROOT = api.PROJECT
GOOD = "def head_weight_shape(d, d_total, num_heads):\n    return (d, d_total // num_heads)\n"


def notebook(*cells) -> str:
    return json.dumps({"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def code(source, cell_id="c1", kind="code"):
    return {"cell_type": kind, "id": cell_id, "metadata": {}, "source": source,
            **({"outputs": [], "execution_count": None} if kind == "code" else {})}


@pytest.mark.parametrize("data, expected", [
    (b"def f(:\n    pass\n", "syntax error in mha.py, line 1"),
    (b"x = 1\ns = 'caf\xe9'\n", "not valid UTF-8 text (byte 0xE9 at offset 14, line 2)"),
    (b"", "is empty: it defines none of the API names"),
    (b"x = 1\x00\n", "null bytes"),
    (b"#" * (3 << 20), "larger than 2 MiB"),
])
def test_a_broken_py_file_is_a_problem_with_a_message(tmp_path, data, expected):
    path = tmp_path / "mha.py"
    path.write_bytes(data)
    sub = submission.load(path)
    assert expected in sub.problem


def test_bad_utf8_in_a_comment_is_graded_with_a_note(tmp_path):
    """Python imports a file whose only bad byte is in a comment, so it is graded, but told."""
    path = tmp_path / "mha.py"
    path.write_bytes(GOOD.encode() + b"# caf\xe9\n")
    sub = submission.load(path)
    assert sub.problem is None
    assert any("byte 0xE9 at offset" in n and "save the file as UTF-8" in n for n in sub.notes)


def test_a_notebook_that_is_not_json(tmp_path):
    path = tmp_path / "mha.ipynb"
    path.write_text("{not json")
    assert "not a valid notebook" in submission.load(path).problem


def test_notebook_cells_that_are_wrong_are_named(tmp_path):
    """Duplicate ids, unknown cell types, non-cells and code in markdown: notes, and the
    rest of the notebook is still graded."""
    path = tmp_path / "mha.ipynb"
    path.write_text(notebook(code(GOOD, "a"), code("x = 1\n", "a"), {"cell_type": "weird"}, 5,
                             code("def project(H, W):\n    return H @ W\n", "m", "markdown")))
    sub = submission.load(path)
    assert sub.problem is None and b"def head_weight_shape" in sub.source
    text = " | ".join(sub.notes)
    for expected in ("same id 'a'", "unknown cell type 'weird'", "not a notebook cell",
                     "markdown cell that holds code"):
        assert expected in text


def test_a_grade_id_cannot_inject_code(tmp_path):
    cell = dict(code(GOOD), metadata={"nbgrader": {"solution": True,
                                                    "grade_id": "x\nimport os; os._exit(3)"}})
    path = tmp_path / "mha.ipynb"
    path.write_text(notebook(cell))
    source = submission.load(path).source
    assert b"\nimport os" not in source and source.startswith(b"# --- x?import os")


def test_a_symlink_leaving_the_folder_is_not_read(tmp_path):
    folder = tmp_path / "student"
    folder.mkdir()
    (folder / "mha.py").symlink_to(ROOT / "solutions" / "mha.py")
    sub = submission.load(folder)
    assert "symbolic link to a file outside" in sub.problem and sub.source == b""


def test_a_symlink_beside_a_real_file_is_noted(tmp_path):
    folder = tmp_path / "student"
    folder.mkdir()
    (folder / "mha.py").write_text(GOOD)
    (folder / "helper.py").symlink_to("/etc/passwd")
    sub = submission.load(folder)
    assert sub.problem is None and any("helper.py was not read" in n for n in sub.notes)


def test_a_zip_with_traversal_entries(tmp_path):
    """../ and absolute entries are skipped with a note; the rest is graded."""
    path = tmp_path / "submission.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("../../evil.py", "x = 1")
        z.writestr("/abs.py", "x = 1")
        z.writestr("hw/mha.py", GOOD)
    sub = submission.load(path)
    assert sub.problem is None and sub.source == GOOD.encode()
    assert sub.name == "submission.zip:hw/mha.py"
    assert sum("points outside the archive" in n for n in sub.notes) == 2
    assert not (tmp_path.parent / "evil.py").exists()


def test_a_tar_with_links_and_traversal(tmp_path):
    path = tmp_path / "submission.tar.gz"
    with tarfile.open(path, "w:gz") as t:
        for name, data in (("../escape.py", b"x = 1"), ("mha.py", GOOD.encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("solution.py")
        link.type, link.linkname = tarfile.SYMTYPE, str(ROOT / "solutions" / "mha.py")
        t.addfile(link)
    sub = submission.load(path)
    assert sub.problem is None and sub.source == GOOD.encode()
    text = " | ".join(sub.notes)
    assert "points outside" in text and "links and special files are not accepted" in text


def test_a_broken_archive(tmp_path):
    path = tmp_path / "submission.zip"
    path.write_bytes(b"PK\x03\x04 not really")
    assert "not a valid zip archive" in submission.load(path).problem


def test_an_archive_bomb_is_refused(tmp_path):
    path = tmp_path / "bomb.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for i in range(3):
            z.writestr(f"big{i}.bin", b"\0" * (100 << 20))
        z.writestr("mha.py", GOOD)
    assert "holds too much" in submission.load(path).problem


def test_bad_inputs_get_a_report_through_the_cli(tmp_path):
    """Exit 0, valid JSON, score 0 and the message on every check: for a .py Python refuses,
    and for an archive whose only file tries to leave it."""
    bad = tmp_path / "mha.py"
    bad.write_bytes(b"x = 1\n\xff\xfe\n")
    archive = tmp_path / "escape.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("../mha.py", GOOD)
    for path, message in ((bad, "not valid UTF-8"), (archive, "holds no .py or .ipynb")):
        proc = subprocess.run([sys.executable, "-m", "autograder", "grade", str(path),
                               "--format", "json"], cwd=ROOT, capture_output=True, timeout=300,
                              env=dict(os.environ))
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        report = json.loads(proc.stdout)
        assert report["score"] == 0 and report["max_score"] > 0
        assert message in report["notes"][0]
        assert all(c["status"] in ("error", "failed") for c in report["checks"]
                   if c["status"] != "skipped")


def test_only_lines_that_begin_a_statement_are_taken_for_magics(tmp_path):
    """A line that begins with % inside a statement (the modulo continuing the line above,
    as a real correct file wrote its error message) or inside a string is Python and kept;
    %matplotlib, !pip and an indented %time are still left out with a note. (Before, the
    continuation was dropped and the whole notebook failed with a syntax error: 0 points.)"""
    python = ('def head_weight_shape(d, d_total, num_heads):\n'
              '    if d_total % num_heads:\n'
              '        raise ValueError("d_total=%d num_heads=%d"\n'
              '                         % (d_total, num_heads))\n'
              '    doc = """\n% kept\n!kept\n"""\n'
              '    return (d, d_total // num_heads)\n')
    path = tmp_path / "mha.ipynb"
    path.write_text(notebook(code(python, "a")))
    sub = submission.load(path)
    assert sub.problem is None and not sub.notes
    assert b"% (d_total, num_heads))" in sub.source and b"% kept" in sub.source
    magics = "%matplotlib inline\n!pip install torch\ndef f():\n    %time g()\n    return 1\n"
    path.write_text(notebook(code(python, "a"), code(magics, "b")))
    sub = submission.load(path)
    assert sub.problem is None
    assert any("dropped 3 IPython magic" in n for n in sub.notes), sub.notes
    assert b"%matplotlib" not in sub.source and b"% (d_total, num_heads))" in sub.source
