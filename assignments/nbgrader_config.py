"""nbgrader configuration of the course whose root is this folder (``assignments/``).

Run nbgrader from here, e.g. ``cd assignments && nbgrader generate_assignment mha``.
The source notebook ``source/mha/mha.ipynb`` is generated: edit ``solutions/mha.py``,
``assignments/public_checks.py`` or ``assignments/narrative.py``, then run
``python -m assignments.build`` from the repository root.
"""
import os

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

# The notebook imports torch and runs small examples: generous, but finite.
c.Execute.timeout = 120
