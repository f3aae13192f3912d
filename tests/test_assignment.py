"""Are the student's files right: up to date, a working stub, public tests that tell, a sound notebook?"""
import base64
import contextlib
import copy
import importlib.util
import inspect
import io
import re
import shutil
import sys

import nbformat
import pytest
import torch

import solutions.mha as reference
from assignments import build, narrative, public_checks
from autograder import public, scoring

ROOT = build.ROOT
API = list(reference.__all__)
SECTION = build.sections()                          # API name -> its notebook section
#: the kit's tests: one per public check (test_<api>_<aspect>) -> the check
TESTS = {public.test_name(c): c for c in public.check_points(scoring.load_rubric())}
POINTER = re.compile(r"implement ([\w.]+): see section (\d+) \(([\w -]+)\) of mha\.ipynb")


@pytest.fixture(scope="module")
def notebook():
    return nbformat.read(ROOT / build.NOTEBOOK, as_version=4)


@pytest.fixture(scope="module")
def stub():
    spec = importlib.util.spec_from_file_location("assignments_stub_mha", ROOT / build.STUB)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nbgrader_meta(cell):
    return cell.metadata.get("nbgrader", {})


def cells_by_grade_id(nb):
    return {nbgrader_meta(cell)["grade_id"]: cell for cell in nb.cells if "grade_id" in nbgrader_meta(cell)}


def run_code_cells(nb):
    """Exec every code cell in order in one namespace, as a kernel would; returns what they printed."""
    namespace, printed = {"__name__": "mha_notebook"}, io.StringIO()
    with contextlib.redirect_stdout(printed):
        for cell in nb.cells:
            if cell.cell_type == "code":
                exec(compile(cell.source, f"<cell {cell.id}>", "exec"), namespace)
    return printed.getvalue()


# ---------------------------------------------------------------------------------------------
# The build.

def test_generated_files_are_up_to_date(capsys):
    """Are the committed stub, public tests and notebook what `python -m assignments.build` writes?"""
    assert build.main(["--check"]) == 0, capsys.readouterr().err


def test_check_names_the_stale_file_and_the_fix(tmp_path, capsys):
    """Does --check exit 1 naming a stale or missing file and the command that regenerates it?"""
    assert build.main([], root=tmp_path) == 0
    assert build.main(["--check"], root=tmp_path) == 0
    # a picture drawn by another matplotlib is not stale; a picture gone is
    nb = nbformat.read(tmp_path / build.NOTEBOOK, as_version=4)
    nb.cells[0].attachments["block_diagram.svg"]["image/svg+xml"] = base64.b64encode(b"<svg/>").decode()
    nbformat.write(nb, tmp_path / build.NOTEBOOK)
    assert build.main(["--check"], root=tmp_path) == 0
    del nb.cells[0]["attachments"]
    nbformat.write(nb, tmp_path / build.NOTEBOOK)
    assert build.main(["--check"], root=tmp_path) == 1
    (tmp_path / build.STUB).write_text("# edited by hand\n")
    (tmp_path / build.NOTEBOOK).unlink()
    capsys.readouterr()
    assert build.main(["--check"], root=tmp_path) == 1
    err = capsys.readouterr().err
    for path in (build.STUB, build.NOTEBOOK):
        assert f"{path} is out of date" in err
    assert str(build.PUBLIC_TESTS) not in err
    assert "python -m assignments.build" in err


# ---------------------------------------------------------------------------------------------
# The stub.

def calls_with_valid_arguments(module):
    """One call of every API name (and of forward) with arguments that fit the SPEC."""
    X = torch.zeros(2, 3, 4)
    model = object.__new__(module.MultiHeadAttention)
    torch.nn.Module.__init__(model)                  # get past the stub's __init__ to reach forward
    return {"head_weight_shape": lambda: module.head_weight_shape(4, 4, 2),
            "project": lambda: module.project(X, torch.zeros(4, 2)),
            "project_heads": lambda: module.project_heads(X, torch.zeros(2, 4, 2)),
            "split_heads": lambda: module.split_heads(X, 2),
            "concat_heads": lambda: module.concat_heads(torch.zeros(2, 2, 3, 2)),
            "masked_softmax": lambda: module.masked_softmax(X, torch.tensor([1, 2])),
            "attention_pool": lambda: module.attention_pool(X, X, X),
            "MultiHeadAttention.__init__": lambda: module.MultiHeadAttention(4, 2),
            "MultiHeadAttention.forward": lambda: model(X, X, X)}


def test_stub_raises_a_pointer_for_every_api_name(stub):
    """Does every API name of the stub raise NotImplementedError pointing to its notebook section?"""
    calls = calls_with_valid_arguments(stub)
    assert {name.split(".")[0] for name in calls} == set(API)
    for owner, call in calls.items():
        with pytest.raises(NotImplementedError) as raised:
            call()
        match = POINTER.fullmatch(str(raised.value))
        assert match, f"{owner}: {raised.value}"
        section = SECTION[owner.split(".")[0]]
        assert match.groups() == (owner, str(section.number), section.short)


def test_stub_keeps_the_reference_api(stub):
    """Does the stub have the reference's names, signatures and docstrings, and only the regions replaced?"""
    assert stub.__all__ == API
    for name in API:
        ours, theirs = getattr(stub, name), getattr(reference, name)
        pairs = [(ours, theirs)] + [(getattr(ours, m), getattr(theirs, m)) for m in ("__init__", "forward")
                                    if inspect.isclass(theirs)]
        for a, b in pairs:
            assert (str(inspect.signature(a)), a.__doc__) == (str(inspect.signature(b)), b.__doc__), name
    source = (ROOT / build.STUB).read_text()
    assert "BEGIN SOLUTION" not in source and "END SOLUTION" not in source
    assert "        self.attention_weights: Tensor | None = None\n" in source


# ---------------------------------------------------------------------------------------------
# The public tests, run as a student runs them: plain pytest in a folder with mha.py.

class Outcomes:
    """A pytest plugin that keeps each test's outcome and failure text."""

    def __init__(self):
        self.results = {}

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            self.results[report.nodeid.split("::")[-1]] = (report.outcome, report.longreprtext)


def run_public_tests(folder, mha_source, answers=True):
    """Run pytest in-process in ``folder`` holding mha.py, test_public.py and (``answers``)
    public_answers.json; {test: (outcome, text)}."""
    folder.mkdir()
    (folder / "mha.py").write_text(mha_source)
    shutil.copy(ROOT / build.PUBLIC_TESTS, folder)
    if answers:
        shutil.copy(ROOT / build.ANSWERS, folder)
    outcomes, path = Outcomes(), list(sys.path)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")     # seconds of start-up, nothing the tests use
            pytest.main([str(folder), "-q", "-p", "no:cacheprovider", f"--rootdir={folder}"], plugins=[outcomes])
    finally:
        sys.path[:] = path
        for name in ("mha", "test_public"):
            sys.modules.pop(name, None)
    return outcomes.results


def test_public_tests_pass_on_the_reference(tmp_path):
    """Do all public tests pass on the reference solution, one per public check?"""
    results = run_public_tests(tmp_path / "reference", (ROOT / build.SOLUTION).read_text())
    assert results == {test: ("passed", "") for test in TESTS}
    assert {public.api_of(c) for c in TESTS.values()} == set(API)


def test_public_tests_fail_on_the_stub_once_per_check_readably(tmp_path):
    """On the stub, does each public test fail, saying which function is not implemented yet and where to look?"""
    results = run_public_tests(tmp_path / "stub", (ROOT / build.STUB).read_text())
    assert sorted(results) == sorted(TESTS)
    for test, check in TESTS.items():
        name = public.api_of(check)
        outcome, text = results[test]
        section = SECTION[name]
        assert outcome == "failed"
        assert f"AssertionError: {name} is not implemented yet: implement {name}" in text, text
        assert f"see section {section.number} ({section.short}) of mha.ipynb" in text, text


def test_public_tests_fail_on_their_own_when_functions_are_missing(tmp_path):
    """If mha.py defines only head_weight_shape, do its tests pass and each other test say what is missing?"""
    results = run_public_tests(tmp_path / "partial", "import numbers\n\n\n" +
                               inspect.getsource(reference.head_weight_shape))
    assert results.pop("test_head_weight_shape_values") == ("passed", "")
    assert results.pop("test_head_weight_shape_raises") == ("passed", "")
    assert len(results) == len(TESTS) - 2
    for test, (outcome, text) in results.items():
        name = public.api_of(TESTS[test])
        assert outcome == "failed" and f"{name} is missing: define {name}" in text, text


WRONG_SPLIT = ("\n\ndef split_heads(X, num_heads):          # the mistake: reshape without the transpose\n"
               "    if X.shape[-1] % num_heads:\n"
               "        raise ValueError('num_heads does not divide the width')\n"
               "    return X.reshape(X.shape[0], num_heads, X.shape[1], -1)\n")


def test_public_failures_say_what_was_expected_and_what_came_back(tmp_path):
    """For a wrong split_heads (no transpose), does the failure name the call, the expected and the actual values?"""
    wrong = (ROOT / build.SOLUTION).read_text() + WRONG_SPLIT
    outcome, text = run_public_tests(tmp_path / "wrong", wrong)["test_split_heads_values"]
    assert outcome == "failed"
    assert "split_heads(X = [[[0, 1, 2, 3], [4, 5, 6, 7]]], num_heads=2): wrong values" in text
    assert "expected [[[[0.0, 1.0], [4.0, 5.0]], [[2.0, 3.0], [6.0, 7.0]]]]" in text
    assert "got      [[[[0.0, 1.0], [2.0, 3.0]], [[4.0, 5.0], [6.0, 7.0]]]]" in text


def test_a_wrong_part_fails_only_its_own_tests(tmp_path):
    """With a wrong split_heads, does only test_split_heads_values fail, the module's tests
    passing with the reference's recorded answers for split_heads (error carried forward, as
    the grader gives it); and without those answers, does the module fail?"""
    wrong = (ROOT / build.SOLUTION).read_text() + WRONG_SPLIT
    results = run_public_tests(tmp_path / "wrong", wrong)
    assert {t for t, (outcome, _) in results.items() if outcome != "passed"} == {"test_split_heads_values"}
    results = run_public_tests(tmp_path / "no-answers", wrong, answers=False)
    failed = {t for t, (outcome, _) in results.items() if outcome != "passed"}
    assert {"test_split_heads_values", "test_MultiHeadAttention_values",
            "test_MultiHeadAttention_masked"} <= failed


def test_a_missing_part_is_answered_for_the_function_built_on_it(tmp_path):
    """With masked_softmax left out of mha.py, does attention_pool (built on it) still pass
    on the recorded calls, while masked_softmax's own tests say it is missing?"""
    text = (ROOT / build.SOLUTION).read_text()
    source = inspect.getsource(reference.masked_softmax)
    results = run_public_tests(tmp_path / "partial", text.replace(source, ""))
    assert results["test_attention_pool_values"] == ("passed", "")
    assert results["test_attention_pool_masked"] == ("passed", "")
    assert results["test_masked_softmax_values"][0] == "failed"


# ---------------------------------------------------------------------------------------------
# The notebook.

def test_notebook_is_valid_nbformat_with_unique_ids(notebook):
    """Is the notebook valid nbformat 4, with unique cell ids and nbgrader grade_ids?"""
    nbformat.validate(notebook)
    assert notebook.nbformat == 4
    ids = [cell.id for cell in notebook.cells]
    grade_ids = [nbgrader_meta(cell)["grade_id"] for cell in notebook.cells if nbgrader_meta(cell)]
    assert len(set(ids)) == len(ids) and len(set(grade_ids)) == len(grade_ids)


def test_graded_cells_are_the_reference_definitions_in_teaching_order(notebook):
    """Is each graded code cell one API definition, verbatim from solutions/mha.py, in section order?"""
    graded = [cell for cell in notebook.cells if nbgrader_meta(cell).get("solution") and cell.cell_type == "code"
              and nbgrader_meta(cell)["grade_id"] != narrative.NUMERIC_GRADE_ID]
    order = [item.api for section in narrative.SECTIONS for item in section.items]
    assert [nbgrader_meta(cell)["grade_id"] for cell in graded] == order
    assert sorted(order) == sorted(API)
    for cell in graded:
        name = nbgrader_meta(cell)["grade_id"]
        assert cell.source == inspect.getsource(getattr(reference, name)).rstrip(), name
        assert cell.source.count("### BEGIN SOLUTION") == cell.source.count("### END SOLUTION") >= 1
        assert nbgrader_meta(cell) == {"grade": False, "grade_id": name, "locked": False, "schema_version": 3,
                                       "solution": True, "task": False}


def test_each_graded_cell_is_followed_by_its_public_test_cell(notebook):
    """Does a locked, autograded test cell running check_<name> follow each graded cell?"""
    cells = notebook.cells
    for index, cell in enumerate(cells):
        name = nbgrader_meta(cell).get("grade_id")
        if name not in API:
            continue
        test = cells[index + 1]
        meta = nbgrader_meta(test)
        assert (meta["grade_id"], meta["grade"], meta["locked"], meta["solution"]) == (f"test_{name}", True, True, False)
        assert meta["points"] > 0
        functions = [build.check_function(c) for c in TESTS.values() if public.api_of(c) == name]
        for function in functions:
            assert inspect.getsource(getattr(public_checks, function)).rstrip() in test.source
        assert test.source.rstrip().endswith(f"run_checks([{', '.join(functions)}], globals())")


def test_public_test_file_holds_the_same_checks():
    """Does test_public.py run the very checks of the notebook, one test per public check?"""
    source = (ROOT / build.PUBLIC_TESTS).read_text()
    for test, check in TESTS.items():
        function = build.check_function(check)
        assert inspect.getsource(getattr(public_checks, function)) in source
        assert f"def {test}():" in source and f"run_check({function}, api)" in source


def test_notebook_runs_top_to_bottom_with_the_solutions(notebook):
    """Does the source notebook run top to bottom, every public test cell passing?"""
    printed = run_code_cells(notebook)
    for check in TESTS.values():
        assert f"{build.check_function(check)}: the public tests pass." in printed


def test_notebook_has_three_manually_graded_written_questions(notebook):
    """Are there three written questions, each a locked nbgrader task whose mark scheme holds a
    model answer and a rubric of criteria with points that add up to the task's points, and
    an answer cell under it?"""
    cells = notebook.cells
    tasks = [i for i, cell in enumerate(cells) if nbgrader_meta(cell).get("task")]
    assert [nbgrader_meta(cells[i])["grade_id"] for i in tasks] == [q.grade_id for q in narrative.QUESTIONS]
    for i, question in zip(tasks, narrative.QUESTIONS):
        meta, source = nbgrader_meta(cells[i]), cells[i].source
        assert (meta["grade"], meta["solution"], meta["locked"]) == (False, False, True)
        assert meta["points"] == question.points == sum(p for p, _ in question.rubric) > 0
        assert len(question.rubric) >= 2
        scheme = source[source.index("### BEGIN MARK SCHEME"):source.index("### END MARK SCHEME")]
        assert "**Model answer.**" in scheme and question.answer in scheme
        for points, criterion in question.rubric:
            assert f"- **{build._plural(points)}:** {criterion}" in scheme
        assert question.prompt in source[:source.index("### BEGIN MARK SCHEME")]
        answer = cells[i + 1]
        assert answer.cell_type == "markdown" and "nbgrader" not in answer.metadata
        assert "YOUR ANSWER HERE" in answer.source
    prompts = " ".join(q.prompt for q in narrative.QUESTIONS)
    for topic in ("own projection matrices", "specialise", "share one set"):
        assert topic in prompts


def test_notebook_teaches_the_source_material_in_order(notebook):
    """Does the narrative walk through shape rules, projection (row and vector form), split,
    pooling, concat, the module, the numeric and the written questions, in order, with the
    course's material stated precisely (cost parity, specialisation)?"""
    headings = [cell.source.splitlines()[0] for cell in notebook.cells
                if cell.cell_type == "markdown" and cell.source.startswith("## ")]
    assert headings == ["## 1. Shape rules", "## 2. Projection", "## 3. Per-head split", "## 4. Pooling",
                        "## 5. Concat", "## 6. The module", "## 7. Numbers to check", "## 8. Written questions"]
    released = " ".join(" ".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown"
                                 and not nbgrader_meta(cell).get("task")).split())
    for material in ("Q^{[j]} = H W_j^q", r"d \times d_\text{total}/M", "Cost parity", "p_q h = p_k h = p_v h = p_o",
                     # the vector form and its link to the row form and to nn.Linear
                     r"h_i = f\big(W_i^{(q)} q,\; W_i^{(k)} k,\; W_i^{(v)} v\big) \in \mathbb{R}^{p_v}",
                     r"W_i^{(q)} \in \mathbb{R}^{p_q \times d_q}", r"W_i^q = \big(W_i^{(q)}\big)^\top",
                     "shape `(out, in)`", "additive or scaled dot-product",
                     # cost parity, precisely: products match, the softmax does not
                     r"$M \cdot n_q n_k$ entries instead of $n_q n_k$",
                     # specialisation, in the released text, honestly
                     "own subspace and its own similarity", "Different initial values give different gradients",
                     "Nothing forces diversity", "identical forever", "shared one set",
                     # the module section matches the parts it asks for
                     "`attention_pool` returns `weights @ V` already"):
        assert material in released, material
    assert "drift towards complementary" not in notebook_text(notebook)
    assert "The FLOPs match too" not in notebook_text(notebook)


def notebook_text(nb) -> str:
    return " ".join(cell.source for cell in nb.cells)


def test_notebook_shows_its_figures(notebook):
    """Do the title and the split section carry figures 1 and 2 as SVG attachments drawn by
    assignments/figures.py, and does a locked cell define the show_heads helper verbatim and
    another call it on the student's module (outside the autograder)?"""
    from assignments import figures
    cells = {cell.id: cell for cell in notebook.cells}
    for cell_id, name in (("title", "block_diagram.svg"), ("section-3", "split_diagram.svg")):
        assert f"(attachment:{name})" in cells[cell_id].source
        svg = base64.b64decode(cells[cell_id].attachments[name]["image/svg+xml"]).decode()
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    helper = cells["figure_helpers"]
    assert inspect.getsource(figures.show_heads).rstrip() in helper.source
    assert nbgrader_meta(helper)["locked"] and not nbgrader_meta(helper)["grade"]
    call = cells["show_heads"].source
    assert 'if __name__ == "__main__":' in call and "show_heads(MultiHeadAttention" in call


def test_show_heads_draws_distinct_heads_above_identical_shared_ones(capsys):
    """Does the notebook's helper draw 2 × M maps of the student's module: the top row (its
    own heads) different from one another, the bottom row (one shared set) identical; and
    for an unfinished module print why and draw nothing?"""
    pytest.importorskip("matplotlib")
    from assignments import figures
    fig = figures.show_heads(reference.MultiHeadAttention, d_model=16, num_heads=4, n=6)
    maps = [ax.get_images()[0].get_array() for ax in fig.axes if ax.get_images()]
    assert len(maps) == 8
    own, shared = maps[:4], maps[4:]
    assert all(abs(own[j] - own[0]).max() > 1e-3 for j in range(1, 4))
    assert all(abs(shared[j] - shared[0]).max() < 1e-12 for j in range(1, 4))
    assert abs(shared[0] - own[0]).max() < 1e-12                      # head 0 keeps its weights
    assert figures.show_heads(stub_class()) is None
    assert "cannot be drawn yet: NotImplementedError" in capsys.readouterr().out


def stub_class():
    spec = importlib.util.spec_from_file_location("assignments_stub_mha2", ROOT / build.STUB)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MultiHeadAttention


def test_nbgrader_releases_stubs_that_fail_readably(notebook):
    """Does nbgrader accept the metadata and release stubs whose test cells say what is not implemented yet?"""
    pytest.importorskip("nbgrader")
    from nbgrader.nbgraderformat import MetadataValidator
    from nbgrader.preprocessors import ClearSolutions

    MetadataValidator().validate_nb(notebook)
    release, _ = ClearSolutions().preprocess(copy.deepcopy(notebook), {})
    cells = cells_by_grade_id(release)
    assert all(cells[name].source.count("raise NotImplementedError()") >= 1 for name in API)
    assert cells[narrative.NUMERIC_GRADE_ID].source.count("raise NotImplementedError()") == 3
    namespace = {"__name__": "mha_release"}
    for cell in release.cells:
        if cell.cell_type != "code":
            continue
        code = compile(cell.source, f"<cell {cell.id}>", "exec")
        name = cell.id[len("test_"):]
        if cell.id == f"test_{name}" and name in API:
            with pytest.raises(AssertionError, match=f"^{name} is not implemented yet: replace"):
                exec(code, namespace)
        else:
            exec(code, namespace)
