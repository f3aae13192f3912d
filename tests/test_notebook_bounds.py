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
