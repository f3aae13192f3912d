"""Run the public tests on your work and report their points to GitHub Classroom.

    python .github/classroom/grade.py

Grades ``mha.py``, or ``mha.ipynb`` where the notebook holds the work: the file in which
more of the graded functions are written (not a ``raise NotImplementedError`` stub), as
your instructor's ``batch`` chooses; ``mha.py`` when both hold as much. From a notebook it
takes the code of the solution cells (with the imports cell) as the module ``mha``. It
says which file it graded, runs ``pytest test_public.py`` on it (the tests you can run
yourself), prints one line per test with its points, and, inside GitHub Actions, hands the
result to the autograding reporter as this step's output ``result``: base64-encoded JSON
in the format of GitHub Classroom's test runners. Each public test is worth the points of
its public check in the course rubric (``points.json``). The hidden tests that decide the
final grade are not in this repository: your instructor runs them after the deadline.
"""
from __future__ import annotations

import ast
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from xml.etree import ElementTree as ET

REPO = Path(__file__).resolve().parents[2]
POINTS = Path(__file__).with_name("points.json")
TESTS = "test_public.py"
ANSWERS = "public_answers.json"     #: the reference's answers the tests use (data)
API = ("head_weight_shape", "project", "project_heads", "split_heads", "concat_heads",
       "masked_softmax", "attention_pool", "MultiHeadAttention")     #: the graded names
TIMEOUT = 900                       #: seconds for the whole public suite
MESSAGE_LIMIT = 2000


def notebook_code(path: Path) -> str:
    """The module a notebook's work makes: its imports cell and solution cells (nbgrader's
    metadata), or, in a notebook without it, every code cell but the tests; IPython lines
    (``%``, ``!``) left out."""
    try:
        cells = [c for c in json.loads(path.read_text(encoding="utf-8")).get("cells", [])
                 if isinstance(c, dict) and c.get("cell_type") == "code"]
    except (OSError, ValueError, AttributeError):
        return ""

    def meta(cell):
        found = cell.get("metadata", {}).get("nbgrader", {})
        return found if isinstance(found, dict) else {}

    def text(cell):
        source = cell.get("source", "")
        return "".join(source) if isinstance(source, list) else str(source)

    graded = any(meta(c).get("solution") for c in cells)
    if graded:
        kept = [text(c) for c in cells if meta(c).get("solution") or meta(c).get("grade_id") == "imports"]
    else:
        kept = [text(c) for c in cells if not text(c).lstrip().startswith(("assert", "run_check"))]
    return "\n\n".join("\n".join("" if line.lstrip().startswith(("%", "!")) else line
                                  for line in code.splitlines()) for code in kept) + "\n"


def implemented(code: str) -> int:
    """How many graded names the code defines with a body that is not the stub's ``raise
    NotImplementedError``; the class counts once any of its methods is written."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return 0

    def stub(function):
        return any(isinstance(s, ast.Raise) and s.exc is not None and getattr(
            s.exc.func if isinstance(s.exc, ast.Call) else s.exc, "id", None) == "NotImplementedError"
            for s in function.body)
    written = {}                            # the last definition of a name is the one that counts
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in API:
            written[node.name] = not stub(node)
        elif isinstance(node, ast.ClassDef) and node.name in API:
            written[node.name] = any(isinstance(m, ast.FunctionDef) and not stub(m) for m in node.body)
    return sum(written.values())


def choose() -> tuple[str, str | None, str]:
    """(the file graded, the notebook's code when it is the notebook, why)."""
    module, notebook = REPO / "mha.py", REPO / "mha.ipynb"
    module_code = module.read_text(encoding="utf-8", errors="replace") if module.is_file() else ""
    notebook_text = notebook_code(notebook) if notebook.is_file() else ""
    work = {"mha.py": implemented(module_code), "mha.ipynb": implemented(notebook_text)}
    if work["mha.ipynb"] > work["mha.py"]:
        return "mha.ipynb", notebook_text, (
            f"mha.ipynb holds the work ({work['mha.ipynb']} of {len(API)} functions written, "
            f"{work['mha.py']} in mha.py)")
    why = (f"{work['mha.py']} of {len(API)} functions written" if not notebook.is_file() else
           f"{work['mha.py']} of {len(API)} functions written, {work['mha.ipynb']} in mha.ipynb")
    return "mha.py", None, why


def run_tests(notebook: str | None = None) -> dict[str, dict]:
    """{test: {"status": "pass" | "fail" | "error", "message", "time"}}, from pytest's JUnit XML;
    on ``notebook`` (its code as mha.py, in a folder of its own) where given, else on mha.py."""
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "public.xml"
        where = REPO
        if notebook is not None:
            where = Path(tmp) / "notebook"
            where.mkdir()
            (where / "mha.py").write_text(notebook, encoding="utf-8")
            for name in (TESTS, ANSWERS):
                if (REPO / name).is_file():
                    shutil.copy(REPO / name, where / name)
        try:
            subprocess.run([sys.executable, "-m", "pytest", TESTS, "-q", "-p", "no:cacheprovider",
                            f"--junitxml={xml}"], cwd=where, timeout=TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            print(f"the public tests took longer than {TIMEOUT} s and were stopped")
            return {}
        if not xml.is_file():
            return {}
        root = ET.parse(xml).getroot()
    outcomes = {}
    for case in root.iter("testcase"):
        problem = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        status = "pass" if problem is None else "fail" if problem.tag != "error" else "error"
        message = "" if problem is None else problem.get("message") or (problem.text or "")
        outcomes[case.get("name", "")] = {"status": status, "message": message[:MESSAGE_LIMIT],
                                          "time": float(case.get("time") or 0)}
    return outcomes


def runner_result(points: dict[str, float], outcomes: dict[str, dict]) -> dict:
    """The result of one runner, as GitHub Classroom's autograding reporter reads it."""
    missing = {"status": "error", "time": 0.0,
               "message": "did not run: pytest stopped before this test (see the log above)"}
    tests = []
    for test, worth in points.items():
        outcome = outcomes.get(test, missing)
        tests.append({"name": test.removeprefix("test_"), "status": outcome["status"],
                      "score": worth if outcome["status"] == "pass" else 0,
                      "message": outcome["message"], "test_code": f"pytest {TESTS}::{test}",
                      "filename": TESTS, "line_no": 0,
                      "execution_time": f"{outcome['time']:.2f}s"})
    statuses = {t["status"] for t in tests}
    status = "pass" if statuses <= {"pass"} else "error" if "error" in statuses else "fail"
    return {"version": 1, "status": status, "max_score": sum(points.values()), "tests": tests}


def main() -> int:
    points = json.loads(POINTS.read_text(encoding="utf-8"))
    graded, notebook, why = choose()
    print(f"Grading {graded}: {why}", flush=True)
    result = runner_result(points, run_tests(notebook))
    print()
    print(f"Graded {graded}: {why}")
    for test in result["tests"]:
        mark = "ok  " if test["status"] == "pass" else "FAIL"
        print(f"{mark} {test['name']:<28} {test['score']:>5g} / {points['test_' + test['name']]:g}")
    score = sum(test["score"] for test in result["tests"])
    print(f"Points {score:g}/{result['max_score']:g} (public tests only; hidden tests are graded later)")
    encoded = base64.b64encode(json.dumps(result).encode("utf-8")).decode("ascii")
    if os.environ.get("GITHUB_OUTPUT"):
        with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as f:
            f.write(f"result={encoded}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
