"""nbgrader integration: the student's notebook is never run; the autograder scores every
autograded cell from its sandboxed report on the notebook's sources.

In nbgrader's own ``autograde`` the student's cells run in a kernel as the user who grades,
so a student cell can patch the test cells' helpers, write that user's files (the grader's
``__pycache__``, a ``.pth``), or print whatever it can read into its own output, which the
feedback would keep. The course's config therefore installs ``autograde_preprocessors()``:

1. ``SealedNotebook`` takes the place of nbgrader's ``Execute``: no kernel starts, every
   output of the submission is cleared, and each autograded cell gets an error output, so a
   pipeline without ``TrustedGrades`` scores 0 rather than full marks (nbgrader gives a test
   cell without output all its points);
2. ``TrustedGrades`` (right before ``SaveAutoGrades``) has imported the whole grader and
   hashed its files before any submission is read; it grades the notebook's code in the
   autograder's sandbox (unprivileged, grader and course hidden) and writes each autograded
   cell's only outputs from that report: its feedback and its score, the cell's one
   ``execute_result``, which nbgrader's ``determine_grade`` reads as partial credit; each
   cell's points come from the gradebook, not from the submitted metadata. Written answers
   (markdown solution cells) stay for grading by hand. Student text holding nbgrader's
   markers (BEGIN/END SOLUTION, BEGIN/END HIDDEN TESTS) is neutralised, so feedback still
   generates and the text reads the same.

It refuses a notebook if the grader's files changed, if bytecode stands in for them
(``autograder.integrity``), if the pipeline still runs the notebook (``Execute``), or if an
autograded cell is not ours (its score would need a kernel). ``feedback_preprocessors()``
adds ``GraderOutputsOnly`` (outputs only on our cells, markers neutralised, the mark
schemes and their model answers cut unless ``GraderOutputsOnly.mark_schemes`` is set) and
nbgrader's ``ClearHiddenTests`` to the feedback.

A student's written answers and other Markdown or raw cells are rendered as HTML by
formgrader and by the feedback (nbconvert passes raw HTML and ``javascript:`` links through):
``TrustedGrades`` and ``GraderOutputsOnly`` keep each such cell only where its rendering
holds nothing but allowlisted HTML, and otherwise put the sanitised rendering in its place
(``writers.escape.written_answer``, nh3), so ``<img onerror=...>`` reaches neither page.
"""
from __future__ import annotations

import atexit
import copy
import os
import re
import sys
import tempfile
from pathlib import Path

import nbformat
from nbformat.v4 import new_output
from nbgrader import utils
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import (ClearHiddenTests, ClearMarkScheme, Execute, GetGrades,
                                    NbGraderPreprocessor, OverwriteCells, SaveAutoGrades)
from traitlets import Bool, Enum, Integer, List, Unicode

from . import integrity, parts, variants
from .writers import cells as cell_text
from .writers import escape

PROJECT = Path(__file__).resolve().parent.parent
_GRADERS: dict = {}
_LOADED: list = []
#: nbgrader's markers: in a student's text they would make nbgrader cut it, or fail.
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
#: Put after a marker's first letter: the text reads the same, nbgrader no longer sees it.
BREAK = "\u200b"
#: A course cell of more lines than this, not graded (the test cells' helpers), is shown in
#: the feedback as one line, so that the feedback opens with the student's work.
FOLD_LINES = 30
#: nbconvert configures this on every preprocessor of the feedback; declared here so that
#: traitlets does not warn that ours (and ClearHiddenTests) ignore it.
PRIORITY = ["text/html", "application/pdf", "text/latex", "image/svg+xml", "image/png",
            "image/jpeg", "text/plain"]
NOT_SCORED = ("not scored: the autograder (autograder.nbgrader_plugin.TrustedGrades) did not "
              "grade this notebook")


class ForeignTestCell(Exception):
    """An autograded cell the autograder does not grade: its score would be the kernel's."""


class UnsealedPipeline(Exception):
    """The autograde pipeline still runs the student's notebook in a kernel."""


def neutralise(text: str, markers=MARKERS) -> str:
    """The text with every nbgrader marker broken by an invisible character."""
    for marker in markers:
        while marker in text:
            text = text.replace(marker, marker[0] + BREAK + marker[1:])
    return text


def is_course_cell(cell) -> bool:
    """A locked cell of the course: after nbgrader's sanitizing (OverwriteCells) its source
    is the course's own, so its markers are the instructor's (hidden tests to cut)."""
    meta = cell.metadata.get("nbgrader", {})
    return bool(meta.get("grade_id")) and utils.is_locked(cell)


def neutralise_student_text(nb) -> int:
    """Neutralise the markers in every cell that is not the course's; returns how many."""
    changed = 0
    for cell in nb.cells:
        if not is_course_cell(cell):
            text = neutralise(cell.source)
            changed += text != cell.source
            cell.source = text
    return changed


def sanitise_student_cells(nb) -> int:
    """Every Markdown or raw cell that is not the course's, safe for nbconvert's HTML (see
    the module's docstring); returns how many were changed."""
    changed = 0
    for cell in nb.cells:
        if is_course_cell(cell) or cell.cell_type not in ("markdown", "raw"):
            continue
        safe = escape.written_answer(cell.source, cell.get("attachments")) \
            if cell.cell_type == "markdown" else escape.html(cell.source)
        changed += safe != cell.source
        cell.source = safe
    return changed


def clear_mark_schemes(nb) -> int:
    """The course's mark scheme regions (the written questions' model answers and rubrics)
    cut, as nbgrader's ClearMarkScheme cuts them from the release; returns how many."""
    cut = ClearMarkScheme(enforce_metadata=False, check_attachment_leakage=False)
    return sum(bool(cut._remove_mark_scheme_region(cell)) for cell in nb.cells
               if is_course_cell(cell))


def is_test_cell(cell) -> bool:
    """An autograded code cell (nbgrader scores it from its outputs)."""
    return cell.cell_type == "code" and utils.is_grade(cell) and not utils.is_solution(cell)


def clear_outputs(nb) -> None:
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None


class SealedNotebook(NbGraderPreprocessor):
    """In the place of nbgrader's Execute: runs nothing, clears every output, and scores
    every autograded cell 0 until TrustedGrades writes its score (fail closed)."""

    def preprocess(self, nb, resources):
        clear_outputs(nb)
        for cell in nb.cells:
            if is_test_cell(cell):
                cell.outputs = [new_output("error", ename="NotScored", evalue=NOT_SCORED,
                                           traceback=[NOT_SCORED])]
        return nb, resources


class TrustedGrades(NbGraderPreprocessor):
    """Scores the autograded cells from the autograder's report on the notebook's code."""

    seed = Integer(0, help="The autograder's seed (its random inputs). Fixed, so that "
                   "`python -m autograder audit` and `grade --seed` reproduce the scores."
                   ).tag(config=True)
    rubric = Unicode("", help="A rubric TOML file; empty: autograder/rubric.toml. The "
                     "notebook's cell points come from the default rubric at build time; "
                     "another rubric changes only how a part's fraction is computed."
                     ).tag(config=True)
    device = Enum(["auto", "cpu", "cuda"], "auto", help="Where the autograder runs the "
                  "submission: auto takes CUDA when there is one.").tag(config=True)
    variant_secret = Unicode("", help="The course's secret for per-student variants "
                             "(autograder.variants): each student is graded against their own "
                             "numbers and hidden inputs. Empty: everyone gets the default "
                             "variant and `seed`. Never released.").tag(config=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # Built before any submission is read: the whole grader is loaded now, and its
        # files (bytecode checked) hashed; both are compared again before each score.
        load_whole_grader()
        self._files = integrity.digest()

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        self._refuse_unsealed()
        clear_outputs(nb)                      # nothing the submission brought is kept
        maxima = self._maxima(nb, info)
        if maxima:
            self._check_files()
            self.log.info("TrustedGrades: grading %s of %s in the autograder's sandbox",
                          info["notebook"], info["student"])
            variant = variants.derive(info["student"], self.variant_secret) \
                if self.variant_secret else None
            grader = self._grader()
            report = grade_notebook(nb, f"{info['notebook']}.ipynb", grader, variant)
            write_outputs(nb, report, maxima, grader.rubric.points)
        else:
            self.log.info("TrustedGrades: no autograded cell of the autograder in %s",
                          info["notebook"])
        if neutralise_student_text(nb):
            self.log.info("TrustedGrades: nbgrader markers in %s's text neutralised",
                          info["student"])
        if sanitise_student_cells(nb):
            self.log.info("TrustedGrades: HTML in %s's Markdown sanitised (formgrader shows it)",
                          info["student"])
        return nb, resources

    def _refuse_unsealed(self) -> None:
        running = [type(p).__name__ for p in getattr(self.parent, "_preprocessors", [])
                   if isinstance(p, Execute) and p.enabled]
        if running:
            raise UnsealedPipeline(
                "this course's autograde pipeline runs the student's notebook in a kernel "
                f"({', '.join(running)}), as the user who grades; set "
                "c.Autograde.autograde_preprocessors = plugin.autograde_preprocessors() in "
                "nbgrader_config.py (see assignments/nbgrader_config.py)")

    def _check_files(self) -> None:
        if integrity.digest() != self._files:
            raise integrity.TamperedError(
                "the autograder's or the reference's files changed during autograding; no "
                "score is saved. Restore the files (git checkout) and autograde again with "
                "--force")

    def _maxima(self, nb, info) -> dict[str, float]:
        """Points of our autograded cells, from the gradebook; metadata made to agree."""
        maxima = {}
        foreign = []
        with Gradebook(info["db_url"]) as gb:
            for cell in nb.cells:
                grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
                if parts.cell_part(grade_id) is None or cell.cell_type != "code":
                    if is_test_cell(cell):
                        foreign.append(grade_id or "(no grade_id)")
                    continue
                try:
                    graded = gb.find_graded_cell(grade_id, info["notebook"], info["assignment"])
                except MissingEntry:
                    continue
                maxima[grade_id] = float(graded.max_score)
                cell.metadata.nbgrader.update(grade=True, solution=False, locked=True,
                                              points=maxima[grade_id])
        if foreign:
            raise ForeignTestCell(
                f"autograded cell(s) {', '.join(foreign)} of {info['notebook']} are not the "
                "autograder's: their score would need the student's notebook run in a kernel, "
                "which this course does not do; remove them, or regenerate the notebook with "
                "`python -m assignments.build`")
        return maxima

    def _grader(self):
        root = Path(CourseDirectory(config=self.config).root or os.getcwd()).resolve()
        return shared_grader(self.seed, self.rubric, self.device, hide=course_hidden(root))


def load_whole_grader() -> None:
    """Import every module of the grader and the reference, once per process, and check
    that each was loaded from this project's sources (not planted bytecode, not a module
    put first on the path)."""
    if not _LOADED:
        _LOADED.append(integrity.load_grader())
    elsewhere = integrity.loaded_from_elsewhere()
    if elsewhere:
        raise integrity.TamperedError("grader modules not loaded from the project's sources: "
                                      + ", ".join(elsewhere))


def shared_grader(seed: int, rubric: str, device: str, hide=()):
    """One Grader per setting for the whole nbgrader run (starting one costs seconds)."""
    key = (seed, rubric or None, device, tuple(hide))
    if key not in _GRADERS:
        from .api import Grader
        grader = Grader(seed=seed, rubric=rubric or None, device=device, hide=hide)
        atexit.register(grader.close)
        _GRADERS[key] = grader
    return _GRADERS[key]


def course_hidden(course: Path) -> list[str]:
    """What the sandbox hides of a course: its folder (where that holds neither the
    interpreter nor the grader) and, whatever the folder, its nbgrader_config.py (which may
    hold the variant secret)."""
    config = course / "nbgrader_config.py"
    return hideable([course]) + ([str(config)] if config.exists() else [])


def hideable(folders) -> list[str]:
    """The folders the sandbox may hide: none that holds the interpreter or the grader."""
    needed = [Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), PROJECT]
    return [str(f) for f in folders
            if not any(n == f or f in n.parents for n in needed)]


def grade_notebook(nb, name: str, grader, variant=None):
    """The autograder's report on a notebook's code: its sources only, outputs dropped."""
    code = copy.deepcopy(nb)
    for cell in code.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    with tempfile.TemporaryDirectory(prefix="autograder-nbgrader-") as folder:
        path = Path(folder) / Path(name).name
        nbformat.write(code, path)
        with integrity.guard():
            return grader.grade(path, variant)


def write_outputs(nb, report, maxima: dict[str, float], points=None) -> dict[str, float]:
    """Replace each of our cells' outputs with its feedback and score (``points``: the
    rubric's, see ``parts.cell_scores``); returns the scores."""
    scores = parts.cell_scores(report, maxima, points)
    ours = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") in scores]
    order = list(dict.fromkeys(parts.cell_part(c.metadata.nbgrader.grade_id)[0] for c in ours))
    placed = parts.diagnosis_parts(report, order)
    for index, cell in enumerate(ours):
        grade_id = cell.metadata.nbgrader.grade_id
        part, public = parts.cell_part(grade_id)
        # A part's diagnoses go in its last cell: the hidden one, after the public one.
        last_of_part = not any(parts.cell_part(c.metadata.nbgrader.grade_id)[0] == part
                               for c in ours[index + 1:])
        diagnoses = placed.get(part, []) if last_of_part else []
        text = cell_text.render(report, part=part, public=public, score=scores[grade_id],
                                points=maxima[grade_id], diagnoses=diagnoses, notes=index == 0)
        cell.outputs = [new_output("stream", name="stdout", text=text),
                        new_output("execute_result", data={"text/plain": repr(scores[grade_id])},
                                   execution_count=cell.get("execution_count"))]
    return scores


class QuietOverwriteCells(OverwriteCells):
    """nbgrader's OverwriteCells without its nine false alarms per student. A hidden test cell
    is released with its hidden tests cut, so its checksum never matches the course's
    (nbgrader #1961) and OverwriteCells warns "checksum has changed!" while putting the cell
    back. A cell handed in exactly as released is put back with one line for the notebook;
    any other change to a locked cell is still a warning."""

    def preprocess(self, nb, resources):
        self._restored = []
        nb, resources = super().preprocess(nb, resources)
        if self._restored:
            self.log.info("%d locked cells put back from the course, as expected: they are "
                          "released without their hidden tests or mark schemes (nbgrader "
                          "#1961)", len(self._restored))
        return nb, resources

    def preprocess_cell(self, cell, resources, cell_index):
        self._handed_in = cell.source
        return super().preprocess_cell(cell, resources, cell_index)

    def report_change(self, name, attr, old, new):
        if attr == "checksum" and self._as_released(name):
            self._restored.append(name)
            return
        super().report_change(name, attr, old, new)

    def _as_released(self, grade_id: str) -> bool:
        """Whether the handed-in source is the course's cell with its hidden tests (or, for a
        written question, its mark scheme) cut, as generate_assignment released it."""
        try:
            source = self.gradebook.find_source_cell(grade_id, self.notebook_id,
                                                     self.assignment_id).source
        except MissingEntry:
            return False
        hidden = nbformat.v4.new_code_cell(source)
        scheme = nbformat.v4.new_markdown_cell(source)
        cut = [hidden] if ClearHiddenTests(enforce_metadata=False)._remove_hidden_test_region(
            hidden) else []
        if ClearMarkScheme(enforce_metadata=False)._remove_mark_scheme_region(scheme):
            cut.append(scheme)
        return any(cell.source == self._handed_in for cell in cut)


class GraderOutputsOnly(NbGraderPreprocessor):
    """Feedback: outputs only on our autograded cells (TrustedGrades wrote them), none on any
    other cell, whatever the autograded notebook holds; the markers in the student's text
    neutralised, so ClearHiddenTests after it cuts only the course's hidden tests; the long
    helper cell folded to one line; the mark schemes cut unless asked for; the students'
    Markdown sanitised."""

    display_data_priority = List(PRIORITY).tag(config=True)
    mark_schemes = Bool(False, help="Show the written questions' mark schemes (their model "
                        "answers and rubrics) in the students' feedback. Off by default: "
                        "feedback released before the deadline would hand them to late "
                        "submitters.").tag(config=True)

    def preprocess(self, nb, resources):
        for cell in nb.cells:
            ours = is_course_cell(cell) and parts.cell_part(cell.metadata.nbgrader.grade_id)
            if cell.cell_type == "code" and not ours:
                cell.outputs, cell.execution_count = [], None
            if ours:
                cell.metadata["autograder_label"] = cell_label(*ours)
            elif cell.cell_type == "markdown" and cell.get("metadata", {}).get(
                    "nbgrader", {}).get("task"):
                cell.metadata["autograder_label"] = task_label(cell.source)
            if (cell.cell_type == "code" and is_course_cell(cell) and not utils.is_grade(cell)
                    and cell.source.count("\n") >= FOLD_LINES):
                cell.source = (f"# {cell.metadata.nbgrader.grade_id}: the course's "
                               f"{cell.source.count(chr(10)) + 1} lines, as released (not shown)")
        neutralise_student_text(nb)
        sanitise_student_cells(nb)
        if not self.mark_schemes:
            clear_mark_schemes(nb)
        return nb, resources


def cell_label(part: str, public: bool) -> str:
    """The name of one of our cells in the feedback's contents."""
    if part == parts.CONVENTIONS:
        return "Hidden tests: the conventions"
    return f"{'Public' if public else 'Hidden'} tests: {part}"


def task_label(source: str) -> str:
    """A written question's name in the feedback's contents: "Written question" and the
    first line of its prompt ("(a) Why does each head need ...?"), as plain text (no
    Markdown emphasis, no character HTML would read as markup), at most 100 characters."""
    first = next((line for line in source.splitlines() if line.strip()), "")
    title = " ".join(re.sub(r"\*\*|__|[`<>&\"']", "", first).split())
    if len(title) > 100:
        title = title[:99].rstrip() + "…"
    return f"Written question {title}" if title else "Written question"


#: The feedback page: nbgrader's, with our cells named in its contents (templates/).
TEMPLATES = Path(__file__).resolve().parent / "templates"


def feedback_template(c) -> None:
    """Point nbgrader's feedback at the course's page (autograder/templates/mha_feedback)."""
    import nbgrader
    upstream = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"
    c.HTMLExporter.template_name = "mha_feedback"
    c.HTMLExporter.template_file = "mha_index.html.j2"
    c.HTMLExporter.extra_template_basedirs = [str(upstream), str(TEMPLATES)]


class FeedbackClearHiddenTests(ClearHiddenTests):
    """nbgrader's ClearHiddenTests, quiet about nbconvert's display_data_priority setting."""

    display_data_priority = List(PRIORITY).tag(config=True)


def sanitize_preprocessors() -> list:
    """nbgrader's sanitize preprocessors with QuietOverwriteCells for OverwriteCells."""
    from nbgrader.converters import Autograde
    default = list(Autograde.class_traits()["sanitize_preprocessors"].default())
    default[default.index(OverwriteCells)] = QuietOverwriteCells
    return default


def autograde_preprocessors() -> list:
    """nbgrader's autograde preprocessors with SealedNotebook in the place of Execute (the
    notebook is never run) and TrustedGrades right before SaveAutoGrades."""
    from nbgrader.converters import Autograde
    default = list(Autograde.class_traits()["autograde_preprocessors"].default())
    default[default.index(Execute)] = SealedNotebook
    at = default.index(SaveAutoGrades)
    return default[:at] + [TrustedGrades] + default[at:]


def feedback_preprocessors() -> list:
    """nbgrader's feedback preprocessors, then GraderOutputsOnly and ClearHiddenTests (the
    autograded notebook holds the hidden tests' source; the student's feedback must not)."""
    from nbgrader.converters import GenerateFeedback
    default = list(GenerateFeedback.class_traits()["preprocessors"].default())
    at = default.index(GetGrades) + 1
    return default[:at] + [GraderOutputsOnly, FeedbackClearHiddenTests] + default[at:]
