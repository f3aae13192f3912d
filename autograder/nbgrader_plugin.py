"""nbgrader integration: the autograder, not the student's kernel, scores every autograded cell.

In ``nbgrader autograde`` the student's cells and the test cells run in one kernel, so a
student cell can patch anything the test cells rely on: the helpers, ``torch.allclose``,
``print``, ``sys.stdout``, the display hooks. Nothing that kernel prints can be trusted.
``TrustedGrades`` runs after nbgrader's ``Execute`` and before ``SaveAutoGrades``:

1. it grades the notebook's code (its sources, never its outputs) with the autograder, in
   the autograder's sandbox, outside the kernel;
2. it replaces the outputs of each autograded cell of ours (``autograder.parts``) with
   the feedback and score from that report, the score as the cell's one ``execute_result``,
   which is what nbgrader's ``determine_grade`` reads as partial credit. Whatever the
   kernel wrote there, a stderr line included (nbgrader zeroes a cell with any stderr, so
   a torch warning would zero a correct answer), is gone;
3. it takes each cell's points from the gradebook, not from the submitted metadata.

It refuses to score a notebook if the autograder's or the reference's files changed while
the kernel ran, or if the notebook has an autograded cell that is not ours (its score
would come from the kernel). Notebooks without any cell of ours pass through untouched.

``autograde_preprocessors()`` and ``feedback_preprocessors()`` give nbgrader's default
lists with ours added; the course's ``nbgrader_config.py`` installs them.
"""
from __future__ import annotations

import atexit
import copy
import os
import sys
import tempfile
from pathlib import Path

import nbformat
from nbformat.v4 import new_output
from nbgrader import utils
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import ClearHiddenTests, GetGrades, NbGraderPreprocessor, SaveAutoGrades
from traitlets import Enum, Integer, Unicode

from . import integrity, parts, variants
from .writers import cells as cell_text

PROJECT = Path(__file__).resolve().parent.parent
_GRADERS: dict = {}


class ForeignTestCell(Exception):
    """An autograded cell the autograder does not grade: its score would be the kernel's."""


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
        # nbgrader builds its preprocessors for each notebook before Execute runs the
        # student's code: this digest is from before the kernel could touch any file.
        self._files = integrity.digest()

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        maxima = self._maxima(nb, info)
        if not maxima:
            self.log.info("TrustedGrades: no autograded cell of the autograder in %s; left as is",
                          info["notebook"])
            return nb, resources
        if integrity.digest() != self._files:
            raise integrity.TamperedError(
                "the autograder's or the reference's files changed while the student's notebook "
                "ran; no score is saved for it. Restore the files (git checkout) and autograde "
                "again with --force")
        self.log.info("TrustedGrades: grading %s of %s outside the kernel", info["notebook"],
                      info["student"])
        variant = variants.derive(info["student"], self.variant_secret) if self.variant_secret else None
        report = grade_notebook(nb, f"{info['notebook']}.ipynb", self._grader(), variant)
        write_outputs(nb, report, maxima)
        return nb, resources

    def _maxima(self, nb, info) -> dict[str, float]:
        """Points of our autograded cells, from the gradebook; metadata made to agree."""
        maxima = {}
        foreign = []
        with Gradebook(info["db_url"]) as gb:
            for cell in nb.cells:
                grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
                is_test = cell.cell_type == "code" and utils.is_grade(cell) and \
                    not utils.is_solution(cell)
                if parts.cell_part(grade_id) is None or cell.cell_type != "code":
                    if is_test:
                        foreign.append(grade_id or "(no grade_id)")
                    continue
                try:
                    graded = gb.find_graded_cell(grade_id, info["notebook"], info["assignment"])
                except MissingEntry:
                    continue
                maxima[grade_id] = float(graded.max_score)
                cell.metadata.nbgrader.update(grade=True, solution=False, locked=True,
                                              points=maxima[grade_id])
        if maxima and foreign:
            raise ForeignTestCell(
                f"autograded cell(s) {', '.join(foreign)} of {info['notebook']} are not the "
                "autograder's, so their score would come from the student's kernel; remove "
                "them, or regenerate the notebook with `python -m assignments.build`")
        return maxima

    def _grader(self):
        root = Path(CourseDirectory(config=self.config).root or os.getcwd()).resolve()
        return shared_grader(self.seed, self.rubric, self.device, hide=hideable([root]))


def shared_grader(seed: int, rubric: str, device: str, hide=()):
    """One Grader per setting for the whole nbgrader run (starting one costs seconds)."""
    key = (seed, rubric or None, device, tuple(hide))
    if key not in _GRADERS:
        from .api import Grader
        grader = Grader(seed=seed, rubric=rubric or None, device=device, hide=hide)
        atexit.register(grader.close)
        _GRADERS[key] = grader
    return _GRADERS[key]


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


def write_outputs(nb, report, maxima: dict[str, float]) -> dict[str, float]:
    """Replace each of our cells' outputs with its feedback and score; returns the scores."""
    scores = parts.cell_scores(report, maxima)
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


def autograde_preprocessors() -> list:
    """nbgrader's autograde preprocessors, with TrustedGrades right before SaveAutoGrades."""
    from nbgrader.converters import Autograde
    default = list(Autograde.class_traits()["autograde_preprocessors"].default())
    at = default.index(SaveAutoGrades)
    return default[:at] + [TrustedGrades] + default[at:]


def feedback_preprocessors() -> list:
    """nbgrader's feedback preprocessors, with the hidden test regions cleared from the
    cells' source (the autograded notebook holds them; the student's feedback must not)."""
    from nbgrader.converters import GenerateFeedback
    default = list(GenerateFeedback.class_traits()["preprocessors"].default())
    at = default.index(GetGrades) + 1
    return default[:at] + [ClearHiddenTests] + default[at:]
