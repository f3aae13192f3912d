"""What nbgrader renders of a student's notebook is safe (issue 21, 1; issue 20, 4): HTML in
a written answer or any other Markdown cell of theirs is sanitised before formgrader and
the feedback render it, and the mark schemes (model answers, rubrics) stay out of the
feedback unless the instructor asks for them. nbconvert renders as formgrader does."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbgrader")
pytest.importorskip("nh3")

from nbconvert import HTMLExporter  # noqa: E402

from autograder import nbgrader_plugin as plugin  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "assignments" / "source" / "mha" / "mha.ipynb"
HOSTILE = ("<img src=x onerror=\"alert('xss')\">\n\n![](https://tracker.example/p.gif)\n\n"
           "[click](javascript:alert(1)) and $x < y$ **bold**")


def submitted() -> "nbformat.NotebookNode":
    """The course's notebook as autograde leaves it, with hostile written answers."""
    nb = nbformat.read(SOURCE, as_version=4)
    tasks = [i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("task")]
    assert len(tasks) == 3
    for i in tasks:                                    # "write your answer in the cell below"
        assert nb.cells[i + 1].cell_type == "markdown"
        nb.cells[i + 1].source = HOSTILE
    nb.cells.append(nbformat.v4.new_markdown_cell(HOSTILE))      # a cell of their own
    nb.cells.append(nbformat.v4.new_raw_cell("<script>alert(2)</script><b>raw</b>",
                                             metadata={"raw_mimetype": "text/html"}))
    return nb


def html(nb) -> str:
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    return body


def test_hostile_html_is_live_without_the_plugin():
    """The attack is real: nbconvert renders the written answer's HTML as it is."""
    page = html(submitted())
    assert "onerror=" in page and "javascript:alert(1)" in page


def test_formgraders_notebook_holds_no_live_html():
    """After TrustedGrades' sanitising (what formgrader then renders), is no event handler,
    script, javascript: link or outside image left, and the answer's text still there?"""
    nb = submitted()
    assert plugin.sanitise_student_cells(nb) == 5       # 3 answers, 1 cell, 1 raw
    page = html(nb)
    for bad in ("onerror=", "javascript:alert", "tracker.example", "<script>alert(2)"):
        assert bad not in page, bad
    assert "<strong>bold</strong>" in page and "raw" in page
    assert plugin.sanitise_student_cells(nb) == 0          # already safe: left as it is


def test_an_ordinary_answer_is_left_as_written():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        "Each head has its own $W_j^q$, so the scores differ; see [docs](https://pytorch.org).")])
    before = copy.deepcopy(nb)
    assert plugin.sanitise_student_cells(nb) == 0 and nb == before


@pytest.mark.parametrize("show", [False, True])
def test_mark_schemes_only_on_request(show):
    """Does the feedback's GraderOutputsOnly cut the model answers and rubrics, unless
    c.GraderOutputsOnly.mark_schemes is set; and sanitise the student's HTML either way?"""
    nb = submitted()
    assert "Model answer" in "\n".join(c.source for c in nb.cells)
    nb, _ = plugin.GraderOutputsOnly(mark_schemes=show).preprocess(nb, {})
    text = "\n".join(c.source for c in nb.cells)
    assert ("Model answer" in text) == show and ("BEGIN MARK SCHEME" in text) == show
    assert "(a)** Why does each head need its own projection" in text    # the question stays
    assert "onerror" not in html(nb)


def test_feedback_contents_name_the_written_questions_by_their_prompts():
    """Does the feedback page's contents list name each written question by its prompt
    ("Written question (a) Why does each head ...") rather than nbgrader's bare "Task"?"""
    from traitlets.config import Config
    nb, _ = plugin.GraderOutputsOnly().preprocess(submitted(), {})
    labels = [c.metadata.get("autograder_label") for c in nb.cells
              if c.metadata.get("nbgrader", {}).get("task")]
    assert [label.split(" Why")[0].split(" All")[0].split(" What")[0] for label in labels] == [
        "Written question (a)", "Written question (b)", "Written question (c)"]
    import nbgrader
    for cell in nb.cells:                   # what nbgrader's GetGrades puts there
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") or meta.get("task"):
            meta["score"] = 0
            meta.setdefault("points", 0)
    c = Config()
    plugin.feedback_template(c)
    c.HTMLExporter.extra_template_paths = [str(Path(nbgrader.__file__).parent / "server_extensions"
                                               / "formgrader" / "static" / "node_modules"
                                               / "bootstrap" / "dist" / "css")]  # as nbgrader adds it
    page, _ = HTMLExporter(config=c).from_notebook_node(nb, resources={"nbgrader": {
        "notebook": "mha", "score": 0, "max_score": 110, "late_penalty": 0}})
    assert ">Task<" not in page
    assert "Written question (a) Why does each head need its own projection matrices" in page
    assert all(label in page for label in labels)
    assert plugin.task_label("**(d)** <b>x</b> & y") == "Written question (d) bx/b y"
