"""nbgrader configuration of the course whose root is this folder (``assignments/``).

Run nbgrader from here, e.g. ``cd assignments && nbgrader generate_assignment mha``.
The source notebook ``source/mha/mha.ipynb`` is generated: edit ``solutions/mha.py``,
``assignments/public_checks.py`` or ``assignments/narrative.py``, then run
``python -m assignments.build`` from the repository root.
"""
import os
import sys
import warnings

c = get_config()  # noqa: F821 -- nbgrader defines get_config when it loads this file

c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "mha"
# The one assignment is "mha" (source/mha/). Name it on the command line
# (nbgrader generate_assignment mha): nbgrader refuses a command whose assignment is
# given both there and in CourseDirectory.assignment_id.

# The graded cells carry the reference between "### BEGIN SOLUTION" and "### END SOLUTION";
# generate_assignment replaces each such region with the stub below, and a written answer
# cell (all of it the model answer) with the text stub.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Autograding never runs the student's notebook: nbgrader's kernel would run the student's
# cells as the user who grades, able to write the grader's files or print what it can read.
# plugin.autograde_preprocessors() puts SealedNotebook in the place of nbgrader's Execute (no
# kernel; every output cleared; each autograded cell scores 0 until the autograder scores it)
# and TrustedGrades before SaveAutoGrades: it grades the notebook's code in the autograder's
# sandbox (autograder/nbgrader_plugin.py) and writes each test cell's score and feedback from
# that report. The autograder must be importable here: installed (pip install -e REPO), or
# this is REPO/assignments. It is imported now, before nbgrader reads any submission, and
# loads its modules from source only (never a __pycache__ file: autograder/__init__.py).
_repository = os.path.dirname(c.CourseDirectory.root)
if os.path.isdir(os.path.join(_repository, "autograder")):   # this checkout's grader, not
    sys.path.insert(0, _repository)                           # another one installed with -e
import autograder.nbgrader_plugin as plugin  # noqa: E402
c.Autograde.autograde_preprocessors = plugin.autograde_preprocessors()
c.TrustedGrades.seed = 0           # fixed: `python -m autograder audit .` reproduces the scores
c.TrustedGrades.device = "auto"    # the GPU checks run where there is one
# Per-student variants (autograder/variants.py): each student's numbers (worked examples,
# numeric questions) and hidden inputs derive from their id and this secret, so answers do
# not travel; autograde grades each student against their own (their seed replaces `seed`).
# The secret is the course's: put it here in the course's copy of this file (which nbgrader
# never releases; keep it out of anything students can read) or in $MHA_VARIANT_SECRET.
# Empty: variants are off, every student gets the numbers of the generic release.
# Give each student their own notebook: python -m autograder variant STUDENT --output DIR
# --course-config nbgrader_config.py (it writes what generate_assignment releases, with
# that student's numbers).
c.TrustedGrades.variant_secret = os.environ.get("MHA_VARIANT_SECRET", "")
# The course's locked cells are put back in each submission. The hidden test cells are released
# without their hidden tests, so nbgrader would warn "checksum has changed!" for each of them,
# for every student (nbgrader #1961); QuietOverwriteCells says it in one line instead. A test
# cell deleted from a submission comes back (and is scored), instead of scoring nothing.
c.Autograde.sanitize_preprocessors = plugin.sanitize_preprocessors()
c.OverwriteCells.add_missing_cells = True
# nbgrader's gradebook code trips SQLAlchemy 2's "not in session" warnings on every autograde
# (upstream; the grades are saved all the same, as tests/test_nbgrader.py checks).
warnings.filterwarnings("ignore", message="Object of type <Submitted", module="nbgrader")
# Feedback: outputs only on the autograded cells (the autograder's feedback), the hidden
# tests' source cut, nbgrader's markers in the student's text neutralised, the helper cell
# folded to one line.
c.GenerateFeedback.preprocessors = plugin.feedback_preprocessors()
plugin.feedback_template(c)        # nbgrader's page, each autograded cell named in its contents
# Manual grading: each written question is a "manually graded task" whose model answer and
# rubric sit in a mark scheme region: cut from the release, back in the autograded notebook
# (for the graders, in formgrader), and cut again from the students' feedback (feedback
# released early would hand them to late submitters). To show students how they were
# marked, once every submission is in:
#   c.GraderOutputsOnly.mark_schemes = True
