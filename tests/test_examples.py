"""The demo's example submissions (autograder/examples.py): patches of the reference that still
apply, once each, and grade as the demo shows them; and the patch engine every fixture uses."""
from __future__ import annotations

import ast

import pytest

from autograder import demo, examples

#: what `python -m autograder demo` shows for each example: score and mistakes found
DEMO = {"split_no_transpose": (94.0, {"split.no-transpose"}),
        "d2l_masked_softmax": (87.0, {"mask.zero-len-uniform", "api.mutates-input",
                                      "mask.fp16-overflow"}),
        "shared_heads": (55.0, {"heads.shared-weights"}),
        "syntax_error": (0.0, set())}


#: the options of this module's `grader` (tests/conftest.py)
GRADER = {"seed": 2024}


def test_the_demo_grades_every_example():
    """Does the demo name every example, and no example the demo does not grade?"""
    assert {e for _, e in demo.EXAMPLES if isinstance(e, str)} == set(examples.EXAMPLES) == set(DEMO)


@pytest.mark.parametrize("name", sorted(examples.EXAMPLES))
def test_every_patch_applies_exactly_once(name):
    """Is each old text of each example in the reference exactly once, and does the example
    differ from the reference only by its patches (no solution marker left, its own docstring)?"""
    reference = examples.REFERENCE.read_text(encoding="utf-8")
    _, replacements = examples.EXAMPLES[name]
    for old, _new in replacements:
        assert reference.count(old) == 1, old
    text = examples.source(name)
    assert "### BEGIN SOLUTION" not in text and "### END SOLUTION" not in text
    assert text.startswith('"""Example submission: ')
    if name == "syntax_error":
        with pytest.raises(SyntaxError):
            ast.parse(text)
    else:
        ast.parse(text)


@pytest.mark.parametrize("name", sorted(DEMO))
def test_each_example_grades_as_the_demo_shows(grader, tmp_path, name):
    """The score and the mistakes the demo prints for each example."""
    report = grader.grade(examples.write(name, tmp_path))
    score, codes = DEMO[name]
    assert (report.score, {d.code for d in report.diagnoses}) == (score, codes)


def test_a_patch_that_no_longer_applies_is_named():
    """The engine refuses an old text that is missing or found twice, naming the fixture and
    the text, instead of changing nothing or too much."""
    text = "a = 1\nb = 1\n"
    assert examples.patch("ok", text, [("a = 1", "a = 2")]) == "a = 2\nb = 1\n"
    with pytest.raises(examples.PatchError, match=r"^fixture x: .*'c = 1'.* 0 times, not once"):
        examples.patch("fixture x", text, [("c = 1", "c = 2")])
    with pytest.raises(examples.PatchError, match=r"^fixture y: .*' = 1'.* 2 times, not once"):
        examples.patch("fixture y", text, [(" = 1", " = 2")])
    # applied in turn: the second old text is looked for in the first's result
    with pytest.raises(examples.PatchError, match="0 times"):
        examples.patch("fixture z", text, [("a = 1", "a = 2"), ("a = 1", "a = 3")])


def test_the_demo_says_which_example_no_longer_applies(monkeypatch):
    """A stale example is one line of the demo's output naming it, and the rest still run."""
    from io import StringIO
    from types import SimpleNamespace
    stale = dict(examples.EXAMPLES, shared_heads=("stale", [("no such text", "")]))
    monkeypatch.setattr(examples, "EXAMPLES", stale)
    report = SimpleNamespace(score=100.0, max_score=100.0, results=[], notes=[], diagnoses=[])
    out = StringIO()
    demo.run(SimpleNamespace(seed=0, grade=lambda path: report), out=out)
    text = out.getvalue()
    assert "example 'all heads share one set of weights' no longer applies to the reference" in text
    assert "'no such text' 0 times" in text
    assert text.count("mistakes found") == len(demo.EXAMPLES) - 1


def test_the_test_fixtures_use_the_same_engine(monkeypatch):
    """mistakes.py, structure_fixtures.py (and fair_fixtures.py through it) refuse an old text
    found twice, naming the fixture, where mistakes.py once replaced every occurrence."""
    import mistakes
    import structure_fixtures
    twice = [("torch.", "torch.")]                       # in the reference many times
    monkeypatch.setitem(mistakes.MISTAKES, "x.twice", twice)
    with pytest.raises(examples.PatchError, match=r"^fixture x\.twice \(tests/mistakes\.py\): .* times, not once"):
        mistakes.source("x.twice")
    with pytest.raises(examples.PatchError, match=r"^fixture y: .*'torch\.' \d+ times, not once"):
        structure_fixtures.patched("y", "a description", twice)
