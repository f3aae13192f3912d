"""Generate the student's files from the reference, so that the three never drift apart.

    python -m assignments.build            # (re)write the generated files
    python -m assignments.build --check    # write nothing; exit 1 if one is stale

Sources (the only files an instructor edits):

* ``solutions/mha.py``: the code; its ``### BEGIN SOLUTION`` … ``### END SOLUTION`` regions
  are what students write;
* ``assignments/public_checks.py``: the public checks, one ``check_<api>_<aspect>`` per
  public check ``<api>.<aspect>`` of the autograder;
* ``assignments/narrative.py``: the notebook's text, sections, numeric and written questions;
* ``assignments/figures.py``: the notebook's figures (embedded as SVG) and its drawing helper;
* ``autograder/rubric.toml``: the points of the hidden test cells (``autograder.parts``).

Generated files:

* ``assignments/stub/mha.py``: the reference with each solution region replaced by
  ``raise NotImplementedError("<pointer to the notebook section>")``;
* ``assignments/stub/test_public.py``: the public checks plus one pytest test per check,
  each worth that check's rubric points; a function built on other parts
  (``autograder.parts.BUILT_ON``) is tested with those parts answering with the reference's
  answers, as the autograder's error carried forward grades it;
* ``assignments/stub/public_answers.json``: those answers, data only: each call the public
  checks of a built-on function make to its parts when run on the reference, with the
  reference's answer (recorded by running the checks on the reference);
* ``assignments/source/mha/mha.ipynb``: the nbgrader source notebook: the narrative, one
  graded cell per API name (verbatim from the reference, markers included), each followed
  by its public test cell and its hidden test cell; the numeric questions' answer cell and
  its hidden test cell; the written questions as manually graded task cells, each with a
  model answer and a rubric in a mark scheme region, and an answer cell under it. Its
  numbers are those of the default variant (``autograder.variants``); ``release`` gives a
  student's own. A hidden test cell holds the rest of its part's rubric points; the
  autograder scores both cells of a part (``autograder/nbgrader_plugin.py``).
"""
from __future__ import annotations

import argparse
import ast
import base64
import functools
import inspect
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbformat import v4

from autograder import checks as registry
from autograder import parts, public, scoring, source_facts, variants

from . import narrative

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = Path("solutions/mha.py")
CHECKS = Path("assignments/public_checks.py")
STUB = Path("assignments/stub/mha.py")
PUBLIC_TESTS = Path("assignments/stub/test_public.py")
ANSWERS = Path("assignments/stub/public_answers.json")
NOTEBOOK = Path("assignments/source/mha") / narrative.NOTEBOOK_NAME
#: The notebook's own setup cells (imports, test helpers), which the grader's source reader
#: trusts wherever they arrive unchanged (``autograder.source_facts``), shipped with it.
TRUSTED = Path("autograder/released_cells.json")
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


class BuildError(Exception):
    """The sources do not fit together: the message says what to fix, and where."""


@dataclass(frozen=True)
class Region:
    """One student-written region of the reference: lines ``begin..end`` (0-based, markers included)."""

    owner: str          # the function it belongs to: "split_heads", "MultiHeadAttention.__init__"
    begin: int
    end: int
    indent: str


@dataclass(frozen=True)
class Reference:
    """What the build takes from ``solutions/mha.py``."""

    lines: list[str]                # the file, line by line, with line ends
    docstring: tuple[int, int]      # its module docstring: lines [start, stop), 0-based
    notation: str                   # the docstring's "Notation ..." paragraphs, for the stub
    imports: str                    # its import statements, less ``from __future__``
    api: list[str]                  # ``__all__``, in order
    definitions: dict[str, str]     # API name -> its definition, verbatim
    regions: list[Region]


def read_reference(text: str) -> Reference:
    """Parse the reference solution and check that every API name is defined."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    first = tree.body[0]
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)):
        raise BuildError(f"{SOLUTION} must start with a module docstring")
    paragraphs = ast.get_docstring(tree).split("\n\n")
    start = next((i for i, par in enumerate(paragraphs) if par.startswith("Notation")), len(paragraphs))
    imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
               and getattr(node, "module", None) != "__future__"]
    api = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
               and any(getattr(target, "id", None) == "__all__" for target in node.targets))
    definitions = {node.name: _definition(lines, node)
                   for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    if list(definitions) != list(api):
        raise BuildError(f"{SOLUTION} defines {list(definitions)} but __all__ lists {api}: "
                         "they must be the same names, in the same order")
    return Reference(lines=lines, docstring=(first.lineno - 1, first.end_lineno),
                     notation="\n\n".join(paragraphs[start:]),
                     imports="".join(lines[imports[0].lineno - 1:imports[-1].end_lineno]).rstrip("\n"),
                     api=api, definitions=definitions,
                     regions=_regions(lines, tree, skip=range(first.lineno - 1, first.end_lineno)))


def _definition(lines: list[str], node: ast.AST) -> str:
    """The source of a top-level definition: decorators, and the indented comments after
    its last statement (ast ends it there, before a trailing ``### END SOLUTION``)."""
    start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    stop = node.end_lineno
    while stop < len(lines) and (not lines[stop].strip() or lines[stop][0] in " \t"):
        stop += 1
    return "".join(lines[start:stop]).rstrip()


def _regions(lines: list[str], tree: ast.Module, skip: range) -> list[Region]:
    """The solution regions, each with the innermost function that holds it; ``skip``: the docstring."""
    functions = []                                    # (qualified name, first line, last line), 1-based
    for top in tree.body:
        inner = top.body if isinstance(top, ast.ClassDef) else [top]
        functions += [(f"{top.name}.{f.name}" if f is not top else f.name, f.lineno, f.end_lineno)
                      for f in inner if isinstance(f, ast.FunctionDef)]
    regions, begin = [], None
    for number, line in enumerate(lines):
        if number in skip:
            continue
        marker = line.strip()
        if marker == BEGIN and begin is None:
            begin = number
        elif marker == END and begin is not None:
            owners = [name for name, first, last in functions if first <= begin + 1 <= last]
            if not owners:
                raise BuildError(f"{SOLUTION}:{begin + 1}: a solution region outside any function")
            indent = lines[begin][:len(lines[begin]) - len(lines[begin].lstrip())]
            regions.append(Region(owners[-1], begin, number, indent))
            begin = None
        elif BEGIN in line or END in line:
            raise BuildError(f"{SOLUTION}:{number + 1}: unbalanced or misplaced solution marker")
    if begin is not None:
        raise BuildError(f"{SOLUTION}:{begin + 1}: {BEGIN} without {END}")
    return regions


def sections() -> dict[str, narrative.Section]:
    """API name -> the notebook section that teaches it."""
    return {item.api: section for section in narrative.SECTIONS for item in section.items}


def pointer(owner: str) -> str:
    """The stub's message for a region of ``owner``."""
    section = sections()[owner.split(".")[0]]
    return (f"implement {owner}: see section {section.number} ({section.short}) "
            f"of {narrative.NOTEBOOK_NAME}")


def stub_module(ref: Reference) -> str:
    """The reference with its docstring replaced and every solution region turned into a raise."""
    lines = list(ref.lines)
    for region in reversed(ref.regions):
        lines[region.begin:region.end + 1] = [
            f'{region.indent}raise NotImplementedError("{pointer(region.owner)}")\n']
    start, stop = ref.docstring
    lines[start:stop] = [narrative.STUB_DOCSTRING.format(notation=ref.notation) + "\n"]
    return "".join(lines)


@dataclass(frozen=True)
class Checks:
    """What the build takes from ``assignments/public_checks.py``."""

    helpers: str                    # everything between the docstring and the first check
    checks: dict[str, str]          # public check name ("split_heads.values") -> its function's source
    questions: dict[str, str]       # public check name -> the function's docstring

    def of(self, api: str) -> list[str]:
        """The public checks of one API name, in the registry's order."""
        return [name for name in self.checks if public.api_of(name) == api]


def check_function(name: str) -> str:
    """The function of ``assignments/public_checks.py`` for a public check: ``split_heads.values``
    -> ``check_split_heads_values``."""
    return "check_" + name.replace(".", "_")


def read_checks(text: str) -> Checks:
    """Split the public checks into the helpers and one check function per public check of
    the autograder (``hidden=False``), in the registry's order."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    checks = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("check_")]
    if not checks:
        raise BuildError(f"{CHECKS} has no check_<api>_<aspect> functions")
    if any(not isinstance(node, ast.FunctionDef) or not node.name.startswith("check_")
           for node in tree.body if node.lineno >= checks[0].lineno):
        raise BuildError(f"{CHECKS}: put the helpers first; only check_<api>_<aspect> functions may follow the first check")
    names = {check_function(c.name): c.name for c in registry.load_all().values() if not c.hidden}
    found = {node.name: node for node in checks}
    unknown = sorted(set(found) - set(names))
    missing = sorted(set(names) - set(found))
    if unknown or missing:
        raise BuildError(f"{CHECKS} must have one function per public check of the autograder "
                         f"(check_<api>_<aspect> for <api>.<aspect>, hidden=False)"
                         + (f"; no public check for {', '.join(unknown)}" if unknown else "")
                         + (f"; missing {', '.join(missing)}" if missing else ""))
    order = [function for function in names if function in found]
    start = tree.body[0].end_lineno if ast.get_docstring(tree) is not None else 0
    return Checks(helpers="".join(lines[start:checks[0].lineno - 1]).strip("\n"),
                  checks={names[f]: "".join(lines[found[f].lineno - 1:found[f].end_lineno]).rstrip("\n")
                          for f in order},
                  questions={names[f]: ast.get_docstring(found[f]) for f in order})


TEST_HARNESS = """

# The pytest tests: one per public check of the autograder, each worth that check's points.
# A function built on other parts is tested with those parts answering these tests' calls
# with the reference's answers (data in public_answers.json, recorded from the reference on
# these very calls), so that a test fails only for its own function's mistakes, as the
# autograder's error carried forward grades it. A call not recorded there (a function that
# calls a part with other inputs) runs your own part.

BUILT_ON = {built_on!r}
ANSWERS = Path(__file__).with_name("public_answers.json")


@contextlib.contextmanager
def student_api(name):
    \"\"\"The names defined by the mha.py next to this file, the parts ``name`` is built on
    answering with the reference's answers while the test runs.\"\"\"
    __tracebackhide__ = True
    try:
        import mha
    except Exception as error:
        raise AssertionError(f"mha.py could not be imported: {{type(error).__name__}}: {{error}}") from None
    saved = {{}}
    for part in BUILT_ON.get(name, ()):
        saved[part] = vars(mha).get(part, MISSING)
        setattr(mha, part, answering(part, saved[part], recorded_answers().get(part, [])))
    try:
        yield vars(mha)
    finally:
        for part, own in saved.items():
            if own is MISSING:
                delattr(mha, part)
            else:
                setattr(mha, part, own)


MISSING = object()


def answering(name, own, answers):
    \"\"\"``own`` (a part of mha.py), answering the recorded calls with the reference's answers.\"\"\"
    def part(*args, **kwargs):
        given = call_arguments(own, args, kwargs)
        for arguments, answer in answers:
            if same_arguments(given, arguments):
                return tuple(a.clone() for a in answer) if isinstance(answer, tuple) else answer.clone()
        if own is MISSING:
            raise NameError(f"name {{name!r}} is not defined")
        return own(*args, **kwargs)
    return part


def call_arguments(own, args, kwargs):
    \"\"\"The arguments of a call, in order, defaults filled in where ``own``'s signature has them.\"\"\"
    try:
        bound = inspect.signature(own).bind(*args, **kwargs)
        bound.apply_defaults()
        return list(bound.arguments.values())
    except (TypeError, ValueError):
        return list(args) + list(kwargs.values())


def same_arguments(given, recorded):
    if len(given) > len(recorded) or any(r is not None for r in recorded[len(given):]):
        return False
    for a, b in zip(given, recorded):
        if isinstance(b, torch.Tensor):
            if not (isinstance(a, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
                    and a.device.type == "cpu"):
                return False
            same = torch.allclose(a.detach(), b, rtol=1e-7, atol=1e-9) if b.is_floating_point() \\
                else torch.equal(a, b)
            if not same:
                return False
        elif b is None:
            if a is not None:
                return False
        elif not (type(a) is type(b) and a == b):
            return False
    return True


@functools.lru_cache(maxsize=None)
def recorded_answers():
    \"\"\"{{part: [(arguments, answer), ...]}} from public_answers.json.\"\"\"
    if not ANSWERS.is_file():
        return {{}}
    data = json.loads(ANSWERS.read_text(encoding="utf-8"))
    return {{part: [([decode(a) for a in arguments], decode(answer)) for arguments, answer in calls]
            for part, calls in data["calls"].items()}}


def decode(value):
    if isinstance(value, dict) and "tuple" in value:
        return tuple(decode(v) for v in value["tuple"])
    if isinstance(value, dict) and "dtype" in value:
        return torch.tensor(value["values"], dtype=getattr(torch, value["dtype"])).reshape(value["shape"])
    return value
"""


def public_tests(checks: Checks, order: list[str]) -> str:
    """The student's ``test_public.py``: the checks, then one pytest test per public check
    (in the order of the API names ``order``)."""
    names = [name for api in order for name in checks.of(api)]
    tests = "".join(f'\n\ndef {public.test_name(name)}():\n    """{checks.questions[name]}"""\n'
                    f"    with student_api({public.api_of(name)!r}) as api:\n"
                    f"        run_check({check_function(name)}, api)\n" for name in names)
    body = "\n\n\n".join([checks.helpers] + [checks.checks[name] for name in names])
    imports = "import contextlib\nimport functools\nimport json\nfrom pathlib import Path\n"
    return (f"{narrative.PUBLIC_TESTS_DOCSTRING}\n{imports}{body}\n"
            f"{TEST_HARNESS.format(built_on=dict(parts.BUILT_ON))}{tests}")


def reference_answers(checks: Checks) -> str:
    """``public_answers.json``: for each part that another is built on (``parts.BUILT_ON``),
    the calls the public checks of those other parts make to it when run on the reference,
    each with the reference's answer. Data only: inputs and outputs, no code."""
    import importlib.util
    import torch
    spec = importlib.util.spec_from_file_location("_mha_reference_for_answers", ROOT / SOLUTION)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    namespace: dict = {}
    exec(compile((ROOT / CHECKS).read_text(encoding="utf-8"), str(CHECKS), "exec"), namespace)
    calls: dict[str, list] = {}

    def recorder(part, function):
        signature = inspect.signature(function)

        def record(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            answer = function(*args, **kwargs)
            entry = [[_encode(a) for a in bound.arguments.values()], _encode(answer)]
            if entry not in calls.setdefault(part, []):
                calls[part].append(entry)
            return answer
        return record

    with torch.random.fork_rng():
        for name in checks.checks:
            api = public.api_of(name)
            originals = {part: getattr(module, part) for part in parts.BUILT_ON.get(api, ())}
            for part, function in originals.items():
                setattr(module, part, recorder(part, function))
            try:
                namespace[check_function(name)](getattr(module, api))
            except Exception as error:
                raise BuildError(f"{CHECKS}: {check_function(name)} fails on {SOLUTION}: "
                                 f"{type(error).__name__}: {error}") from None
            finally:
                for part, function in originals.items():
                    setattr(module, part, function)
    data = {"about": "The reference's answers to the calls the public tests of a function make "
                     "to the parts it is built on (test_public.py); generated by "
                     "python -m assignments.build.",
            "calls": {part: calls[part] for part in sorted(calls)}}
    return json.dumps(data, separators=(",", ":")) + "\n"


def _encode(value):
    import torch
    if isinstance(value, tuple):
        return {"tuple": [_encode(v) for v in value]}
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return {"dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape),
                "values": value.reshape(-1).tolist()}
    if value is None or type(value) in (int, bool, str):
        return value
    raise BuildError(f"a call of the public checks passes a {type(value).__name__}, which "
                     "public_answers.json cannot hold")


def _meta(grade_id: str, *, solution=False, grade=False, locked=False, task=False,
          points=None) -> dict:
    """nbgrader cell metadata, schema 3."""
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3,
            "solution": solution, "task": task}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def _markdown(cell_id: str, text: str, **nbgrader) -> nbformat.NotebookNode:
    metadata = _meta(cell_id, **nbgrader) if nbgrader else {}
    return v4.new_markdown_cell(text, id=cell_id, metadata=metadata)


def _code(grade_id: str, source: str, **nbgrader) -> nbformat.NotebookNode:
    return v4.new_code_cell(source, id=grade_id, metadata=_meta(grade_id, **nbgrader))


HIDDEN_TEST = """\
# Hidden tests of {what}: {points}.
{begin}
# The autograder grades this part after you submit, outside this notebook's kernel:
# nbgrader's autograde step runs autograder.nbgrader_plugin.TrustedGrades (nbgrader_config.py),
# which replaces this cell's output with the score and feedback of these checks (rubric points):
{checks}
# Run in a kernel, this cell proves nothing, so it scores nothing; `nbgrader validate` passes it.
None if __import__("os").environ.get("NBGRADER_EXECUTION") == "validate" else 0.0
{end}"""

WHAT = {parts.CONVENTIONS: "the conventions (inputs unchanged, cost parity, any device and dtype)",
        parts.QUESTIONS: "the numeric questions of section 7 (against your own numbers)"}


def _whole(n: float):
    """``n`` as an int where it is one, so nbgrader shows "6", not "6.0"."""
    return int(n) if float(n).is_integer() else n


def _plural(n: float) -> str:
    return f"{n:g} point{'s' if n != 1 else ''}"


def hidden_test(part: str, public_points: int, rubric: scoring.Rubric) -> nbformat.NotebookNode:
    """The hidden test cell of a part: the rest of the part's rubric points, scored by the
    autograder (its region lists the checks; generate_assignment removes it)."""
    total = parts.points(rubric).get(part, 0)
    if total <= public_points:
        raise BuildError(f"the rubric gives {part} {_plural(total)}, not more than the "
                         f"{_plural(public_points)} of its public test cell in assignments/narrative.py")
    points = (f"{_plural(total - public_points)} of its {total:g} (the public test cell above "
              f"holds the other {public_points})" if public_points else _plural(total))
    listed = "\n".join(f"#   {name} ({value:g})" for name, value in rubric.points.items()
                       if value > 0 and parts.part_of(name) == part)
    source = HIDDEN_TEST.format(what=WHAT.get(part, part), points=points, begin=HIDDEN_BEGIN,
                                end=HIDDEN_END, checks=listed)
    hidden = total - public_points
    return _code(parts.HIDDEN + part, source, grade=True, locked=True,
                 points=int(hidden) if float(hidden).is_integer() else hidden)


#: The figures embedded as attachments: the cell they belong to, the file name, the drawing.
FIGURES = {"block": ("block_diagram.svg", "block_diagram"), "split": ("split_diagram.svg", "split_diagram")}
SPLIT_CAPTION = r"""![Figure 2](attachment:split_diagram.svg)

*Figure 2.* `split_heads` on one batch element with $n = 3$, $M = 3$, $p = 2$: the numbers
follow each entry. Head $j$ keeps every position, and only its own columns
$[\,jp, (j+1)p\,)$; `concat_heads` (section 5) is the way back."""


def _attach(cell, figure: str, draw: bool) -> None:
    """Embed a figure of ``assignments.figures`` as the cell's SVG attachment (base64).
    ``draw`` False leaves the data empty: ``--check`` compares everything but the pictures'
    bytes, which depend on the matplotlib version (their source is ``figures.py``)."""
    name, function = FIGURES[figure]
    cell.attachments = {name: {"image/svg+xml": _drawing(function) if draw else ""}}


@functools.lru_cache(maxsize=None)
def _drawing(function: str) -> str:
    """A fixed figure's SVG, base64: drawn once per process (every variant has the same
    figures, so ``variant`` with many students draws each once)."""
    try:
        from . import figures
    except ImportError as e:                          # pragma: no cover - matplotlib missing
        raise BuildError(f"drawing the notebook's figures needs matplotlib: {e}") from None
    return base64.b64encode(getattr(figures, function)().encode()).decode()


def _helper_source(function) -> str:
    """A helper of ``assignments.figures``, verbatim, for a notebook cell."""
    return inspect.getsource(function).rstrip()


def _task(question: narrative.Question) -> str:
    """A written question's task cell: the prompt, then its model answer and rubric in a mark
    scheme region (nbgrader cuts it from the release and puts it back for the graders)."""
    criteria = "\n".join(f"- **{_plural(points)}:** {text}" for points, text in question.rubric)
    return (f"{question.prompt}\n\n*{_plural(question.points)}, graded by hand; write your "
            f"answer in the cell below.*\n\n### BEGIN MARK SCHEME\n**Model answer.** "
            f"{question.answer}\n\n**Rubric ({_plural(question.points)}).**\n\n{criteria}\n"
            "### END MARK SCHEME")


def notebook(ref: Reference, checks: Checks, variant=variants.DEFAULT, *,
             figures: bool = True) -> nbformat.NotebookNode:
    """The nbgrader source notebook of a variant: narrative, figures, graded cells, public and
    hidden tests, numeric questions, written questions with their mark schemes."""
    rubric = scoring.load_rubric()
    values = variant.values()

    def text(source: str) -> str:
        try:
            return narrative.render(source, values)
        except KeyError as e:
            raise BuildError(f"assignments/narrative.py: {e.args[0]}") from None

    helpers = "# Helpers for the public test cells. Run this cell; do not edit it.\n\n" + checks.helpers
    from . import figures as drawings
    cells = [_markdown("title", text(narrative.TITLE)), _markdown("setup", narrative.IMPORTS_TEXT),
             _code("imports", ref.imports, locked=True), _code("test_helpers", helpers, locked=True),
             _code("figure_helpers", narrative.HEADS_HELPER + _helper_source(drawings.show_heads),
                   locked=True)]
    _attach(cells[0], "block", figures)
    for cell in cells[-2:]:
        cell.metadata["jupyter"] = {"source_hidden": True}
    public_points = public.points(rubric)        # one definition of public: autograder.public
    for section in narrative.SECTIONS:
        body = f"## {section.number}. {section.title}\n\n{text(section.text)}"
        cells.append(_markdown(f"section-{section.number}",
                               body + (f"\n\n{SPLIT_CAPTION}" if section.figure else "")))
        if section.figure:
            _attach(cells[-1], section.figure, figures)
        for item in section.items:
            cell_points = _whole(public_points[item.api])
            points = f"{_plural(cell_points)} of {parts.points(rubric)[item.api]:g}"
            names = checks.of(item.api)
            test = (f"# Public tests of {item.api} ({points}); hidden tests check more.\n"
                    + "\n\n\n".join(checks.checks[name] for name in names)
                    + f"\n\n\nrun_checks([{', '.join(check_function(n) for n in names)}], globals())")
            cells += [_markdown(f"task-{item.api}", text(item.text)),
                      _code(item.api, ref.definitions[item.api], solution=True),
                      _code(f"test_{item.api}", test, grade=True, locked=True, points=cell_points)]
            if parts.points(rubric).get(item.api, 0) > cell_points:     # else every check is public
                cells.append(hidden_test(item.api, cell_points, rubric))
    cells += [_markdown("figure-heads", narrative.HEADS_FIGURE),
              _code("show_heads", narrative.HEADS_CALL, locked=True)]
    cells.append(hidden_test(parts.CONVENTIONS, 0, rubric))
    number, title, intro = narrative.NUMERIC_SECTION
    cells += [_markdown(f"section-{number}", f"## {number}. {title}\n\n{text(intro)}"),
              _code(narrative.NUMERIC_GRADE_ID, text(narrative.NUMERIC_CELL), solution=True),
              hidden_test(parts.QUESTIONS, 0, rubric)]
    number, title, intro = narrative.QUESTIONS_SECTION
    cells.append(_markdown(f"section-{number}", f"## {number}. {title}\n\n{intro}"))
    for question in narrative.QUESTIONS:
        points = question.points
        cells += [_markdown(question.grade_id, _task(question), task=True, locked=True,
                            points=int(points) if float(points).is_integer() else points),
                  _markdown(f"{question.grade_id}-answer", narrative.ANSWER_CELL)]
    nb = v4.new_notebook(cells=cells, metadata={"kernelspec": KERNELSPEC,
                                                "language_info": {"name": "python"}})
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution") is not True and (
                "BEGIN SOLUTION" in cell.source or "END SOLUTION" in cell.source):
            raise BuildError(f"cell {cell.id} mentions a solution marker outside a solution cell; "
                             "nbgrader would refuse the notebook")
    nbformat.validate(nb)
    return nb


#: What nbgrader's generate_assignment does to the source notebook, less what needs a course
#: (the gradebook, header and footer); the stubs are the course's (nbgrader_config.py).
CODE_STUB = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
TEXT_STUB = "YOUR ANSWER HERE"


def release(variant=variants.DEFAULT) -> nbformat.NotebookNode:
    """The released notebook of one variant: what ``nbgrader generate_assignment`` gives a
    student, with that student's numbers (``python -m autograder variant STUDENT``)."""
    from nbgrader.preprocessors import (CheckCellMetadata, ClearHiddenTests, ClearMarkScheme,
                                        ClearOutput, ClearSolutions, ComputeChecksums, LockCells)
    ref = read_reference((ROOT / SOLUTION).read_text(encoding="utf-8"))
    checks = read_checks((ROOT / CHECKS).read_text(encoding="utf-8"))
    nb = notebook(ref, checks, variant)
    steps = [LockCells(), ClearSolutions(code_stub=CODE_STUB, text_stub=TEXT_STUB), ClearOutput(),
             CheckCellMetadata(), ComputeChecksums(), ClearHiddenTests(), ClearMarkScheme(),
             ComputeChecksums(), CheckCellMetadata()]
    resources = {"nbgrader": {"notebook": Path(narrative.NOTEBOOK_NAME).stem, "assignment": "mha"}}
    for step in steps:
        nb, resources = step.preprocess(nb, resources)
    nb.metadata["mha_variant"] = {"student": variant.student}
    return nb


def generate(*, figures: bool = True) -> dict[Path, str]:
    """Every generated file's path (relative to the repository) and text, from the sources;
    ``figures`` False leaves the pictures' bytes out (what ``--check`` compares)."""
    ref = read_reference((ROOT / SOLUTION).read_text(encoding="utf-8"))
    checks = read_checks((ROOT / CHECKS).read_text(encoding="utf-8"))
    order = [item.api for section in narrative.SECTIONS for item in section.items]
    for what, names in (("sections of assignments/narrative.py", order),
                        (f"check_<api>_<aspect> functions of {CHECKS}",
                         list(dict.fromkeys(public.api_of(n) for n in checks.checks)))):
        if sorted(names) != sorted(ref.api):
            raise BuildError(f"the {what} cover {sorted(names)}, but {SOLUTION} has {sorted(ref.api)}")
    text = nbformat.writes(notebook(ref, checks, figures=figures)) + "\n"
    return {STUB: stub_module(ref),
            PUBLIC_TESTS: public_tests(checks, order),
            ANSWERS: reference_answers(checks),
            NOTEBOOK: text,
            TRUSTED: json.dumps(source_facts.cells_of_notebook(text), indent=1,
                                sort_keys=True) + "\n"}


def comparable(path: Path, text: str) -> str:
    """What ``--check`` compares: the text, less the notebook's pictures' bytes (drawn from
    ``assignments/figures.py``, they differ between matplotlib versions)."""
    if path == ANSWERS:
        return _rounded_answers(text)
    if path != NOTEBOOK:
        return text
    try:
        nb = json.loads(text)
        for cell in nb.get("cells", []):
            for bundle in cell.get("attachments", {}).values():
                for mime in bundle:
                    bundle[mime] = ""
        return json.dumps(nb, sort_keys=True)
    except (ValueError, AttributeError):
        return text


def _rounded_answers(text: str) -> str:
    """The answers with every float to 9 significant digits: the last digits of a float64
    product may differ between CPUs and BLAS builds, what the tests match to 1e-7 may not."""
    def rounded(value):
        if isinstance(value, float):
            return float(f"{value:.9g}")
        if isinstance(value, list):
            return [rounded(v) for v in value]
        if isinstance(value, dict):
            return {k: rounded(v) for k, v in value.items()}
        return value
    try:
        return json.dumps(rounded(json.loads(text)), sort_keys=True)
    except ValueError:
        return text


def stale_files(outputs: dict[Path, str], root: Path) -> list[Path]:
    """The generated files under ``root`` that are missing or differ from ``outputs``."""
    return [path for path, text in outputs.items()
            if not (root / path).is_file()
            or comparable(path, (root / path).read_text(encoding="utf-8")) != comparable(path, text)]


def main(argv: list[str] | None = None, *, root: Path = ROOT) -> int:
    """Write the generated files under ``root``, or with --check only compare them; exit status."""
    parser = argparse.ArgumentParser(prog="python -m assignments.build", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a generated file is missing or out of date")
    args = parser.parse_args(argv)
    try:
        outputs = generate(figures=not args.check)
    except BuildError as error:
        print(f"assignments.build: {error}", file=sys.stderr)
        return 1
    stale = stale_files(outputs, root)
    if args.check:
        for path in stale:
            print(f"{path} is out of date with {SOLUTION}, {CHECKS}, assignments/narrative.py "
                  "and assignments/figures.py; regenerate it with: python -m assignments.build",
                  file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(outputs[path], encoding="utf-8", newline="\n")
        print(f"wrote {path}")
    if not stale:
        print("the generated files are up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
