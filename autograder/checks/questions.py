"""Checks of the notebook's numeric questions (section 7), against the student's own variant.

The student answers in a cell of functions that return plain numbers
(``key_matrix_shape()``, ``params_many_heads()``, ``params_one_head()``). The grader calls
them in the sandbox like any other part, reads plain data back, and compares it here with
the right answers of the student's variant (``autograder.variants``): the student's kernel
is never asked. The questions are the notebook's: a ``.py`` submission is not asked them
(``api.Grader`` leaves this group out for it), unless the rubric's ``policy.questions`` is
"every": then it is reported as not answering them (:func:`unanswered`), 0 points, so a
``.py`` and a notebook are graded out of the same total (the Gradescope bundle's
``--questions include``).
"""
from __future__ import annotations

from ..compare import CheckFailed
from ..model import CheckResult, Status
from ..sandbox.host import StudentError
from . import Probe, check

GROUP = "questions"
WHERE = "section 7 of mha.ipynb"


def answer(p: Probe, fn: str):
    """What the student's answer function returns, read through the sandbox."""
    result = p.student.probe("call", GROUP, fn=fn, args=[], kwargs={})
    if "raised" in result:
        info = result["raised"]
        if info.get("not_implemented"):
            raise StudentError(f"{fn}() is not answered yet: replace its `raise` line by `return` "
                               f"and your answer ({WHERE})", raised=info)
        if info.get("type") == "AttributeError":
            raise StudentError(f"the notebook defines no {fn}(); its answer cell in {WHERE} "
                               "defines it: run that cell, or restore it", raised=info)
        raise StudentError(f"{fn}() raised {info.get('type')}: {info.get('message')}", raised=info)
    return result["value"]


def unanswered(check, points: float) -> CheckResult:
    """The result of a question check for a ``.py`` upload, which cannot answer it."""
    return CheckResult(check.name, check.group, Status.ERROR, 0.0, points,
                       feedback=f"not answered: the numeric questions are asked in {WHERE}; "
                                "upload the notebook mha.ipynb to answer them",
                       hidden=check.hidden, part=check.part)


def _integer(value) -> bool:
    return type(value) is int or (type(value) is float and value.is_integer())


def expect_number(value, fn: str) -> int:
    if not _integer(value):
        raise CheckFailed(f"{fn}() returned {type(value).__name__} {str(value)[:40]}; return a "
                          "plain integer (no tensor, no string)")
    return int(value)


@check("questions.key_shape", part=GROUP, kind="question", group=GROUP)
def key_shape(p: Probe) -> None:
    """Question 1: the shape of one head's key matrix, d × d_h / M, for the student's sizes."""
    v = p.variant
    value = answer(p, "key_matrix_shape")
    if type(value) not in (tuple, list) or len(value) != 2:
        raise CheckFailed(f"key_matrix_shape() returned {str(value)[:60]}; return a tuple "
                          "(rows, columns) of two integers")
    got = tuple(expect_number(x, "key_matrix_shape") for x in value)
    if got != v.answers()["key_matrix_shape"]:
        raise CheckFailed(f"key_matrix_shape() returned {got}: not the shape of one head's key "
                          f"matrix for your sizes d={v.key_d}, d_h={v.key_d_total}, "
                          f"M={v.key_heads} ({WHERE}, question 1). The rule is in section 1.")


@check("questions.params", part=GROUP, kind="question", group=GROUP)
def params(p: Probe) -> None:
    """Question 2: parameters of M heads of width d/M and of one head of width d (both 3·d²)."""
    v = p.variant
    expected = v.answers()
    wrong = []
    for fn in ("params_many_heads", "params_one_head"):
        got = expect_number(answer(p, fn), fn)
        if got != expected[fn]:
            wrong.append(f"{fn}() returned {got}")
    if wrong:
        raise CheckFailed(f"{'; '.join(wrong)}: not the parameter count of the query, key and "
                          f"value matrices for your sizes d={v.param_d}, M={v.param_heads} "
                          f"({WHERE}, question 2). Count each head's matrices from section 1.")
