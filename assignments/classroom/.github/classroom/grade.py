"""Run the public tests of mha.py and report their points to GitHub Classroom.

    python .github/classroom/grade.py

Runs ``pytest test_public.py`` (the tests you can run yourself), prints one line per
function with its points, and, inside GitHub Actions, hands the result to the autograding
reporter as this step's output ``result``: base64-encoded JSON in the format of GitHub
Classroom's test runners. Each public test is worth the points of the function's public
checks in the course rubric (``points.json``). The hidden tests that decide the final
grade are not in this repository: your instructor runs them after the deadline.
"""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from xml.etree import ElementTree as ET

REPO = Path(__file__).resolve().parents[2]
POINTS = Path(__file__).with_name("points.json")
TESTS = "test_public.py"
TIMEOUT = 900                       #: seconds for the whole public suite
MESSAGE_LIMIT = 2000


def run_tests() -> dict[str, dict]:
    """{test: {"status": "pass" | "fail" | "error", "message", "time"}}, from pytest's JUnit XML."""
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "public.xml"
        try:
            subprocess.run([sys.executable, "-m", "pytest", TESTS, "-q", "-p", "no:cacheprovider",
                            f"--junitxml={xml}"], cwd=REPO, timeout=TIMEOUT, check=False)
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
    result = runner_result(points, run_tests())
    print()
    for test in result["tests"]:
        mark = "ok  " if test["status"] == "pass" else "FAIL"
        print(f"{mark} {test['name']:<20} {test['score']:>5g} / {points['test_' + test['name']]:g}")
    score = sum(test["score"] for test in result["tests"])
    print(f"Points {score:g}/{result['max_score']:g} (public tests only; hidden tests are graded later)")
    encoded = base64.b64encode(json.dumps(result).encode("utf-8")).decode("ascii")
    if os.environ.get("GITHUB_OUTPUT"):
        with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as f:
            f.write(f"result={encoded}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
