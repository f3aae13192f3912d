"""The student side of the assignment, generated from ``solutions/mha.py``.

``python -m assignments.build`` writes the student's stub module and public tests
(``assignments/stub/``) and the nbgrader source notebook (``assignments/source/mha/``);
``python -m assignments.build --check`` says whether the committed copies are up to date.
"""
