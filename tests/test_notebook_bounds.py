"""A notebook is bounded before it is parsed (issue 21, 8): 280,000 cells in 28 MiB used to
take 36 s to be refused; the cell count is read from the raw bytes first."""
from __future__ import annotations

import json
import time

from autograder import submission


def _notebook(path, cells: int) -> None:
    code = [{"cell_type": "code", "metadata": {}, "source": f"x = {i}\n", "outputs": [],
             "execution_count": None} for i in range(cells)]
    path.write_text(json.dumps({"cells": code, "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}))


def test_a_notebook_of_too_many_cells_is_refused_at_once(tmp_path):
    """Is a 28 MiB notebook of 280,000 cells refused in well under a second, with a message
    that says how many cells it has, the limit, and what to do?"""
    path = tmp_path / "mha.ipynb"
    _notebook(path, 280_000)
    assert path.stat().st_size > 25 << 20
    started = time.perf_counter()
    sub = submission.load(path)
    took = time.perf_counter() - started
    assert took < 3.0, took
    assert sub.source == b"" and "280,000 cells" in sub.problem and "2,000" in sub.problem
    assert "delete the others" in sub.problem


def test_a_quoted_cell_type_is_not_a_cell(tmp_path):
    """Does text that mentions "cell_type" inside a cell (escaped quotes) not count, so a
    normal notebook is read as before?"""
    path = tmp_path / "mha.ipynb"
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                     "source": "NOTE = '" + '"cell_type"' * 3000 + "'\ndef f():\n    return 1\n"}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))
    sub = submission.load(path)
    assert sub.problem is None and b"def f()" in sub.source


def _escaped_notebook(path, cells: int, source: str = "def f(:\n") -> None:
    """`cells` code cells whose "cell_type" key is written with a JSON escape
    ("cell\\u005ftype"): the same key once parsed, but not the bytes the first count looks for."""
    cell = json.dumps({"cell_type": "code", "metadata": {}, "source": source, "outputs": [],
                       "execution_count": None}).replace("cell_type", "cell\\u005ftype")
    path.write_text('{"cells": [' + ",".join([cell] * cells)
                    + '], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')


def test_an_escaped_cell_type_key_still_counts(tmp_path):
    """A notebook of 265,000 broken cells whose "cell_type" keys are escaped (the byte count
    sees none) is refused after parsing with the same message, counted exactly, and with no
    note per cell (it once gave a 56 MiB report)."""
    path = tmp_path / "mha.ipynb"
    _escaped_notebook(path, 265_000)
    assert path.stat().st_size < submission.MAX_NOTEBOOK_BYTES
    assert path.read_bytes().count(b'"cell_type"') == 0
    started = time.perf_counter()
    sub = submission.load(path)
    took = time.perf_counter() - started
    assert took < 10.0, took
    assert sub.source == b"" and "has 265,000 cells" in sub.problem and "2,000" in sub.problem
    assert "delete the others" in sub.problem and sub.notes == ()


def test_many_broken_cells_give_a_bounded_number_of_notes(tmp_path):
    """1,900 code cells that do not compile, under the cell limit: 50 notes naming cells, then
    one line saying how many more."""
    path = tmp_path / "mha.ipynb"
    _escaped_notebook(path, 1_900)
    sub = submission.load(path)
    assert "no code cell that could be graded" in sub.problem
    assert len(sub.notes) == submission.MAX_CELL_NOTES + 1, len(sub.notes)
    assert all("was left out" in n for n in sub.notes[:-1])
    assert sub.notes[-1] == "... and 1,850 more notes like these on other cells"
    assert sum(map(len, sub.notes)) < 50_000


def test_notes_on_odd_cells_say_how_many_more(tmp_path):
    """Cells of unknown types beyond the twentieth are counted in one line, not dropped
    silently."""
    path = tmp_path / "mha.ipynb"
    odd = [{"cell_type": "weird", "metadata": {}, "source": ""} for _ in range(30)]
    code = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
             "source": "def f():\n    return 1\n"}]
    path.write_text(json.dumps({"cells": odd + code, "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}))
    sub = submission.load(path)
    assert sub.problem is None and len(sub.notes) == 21
    assert sub.notes[-1] == "... and 10 more cells like these", sub.notes[-1]
