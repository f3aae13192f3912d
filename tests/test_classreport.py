"""The class report's accounting, on hand-made batch results (no grading, no sandbox):
blocked apart from failed, a reason beside every zero, points lost per part and per
diagnosis with the students who have each, one feedback file per student, the LMS CSV,
and the page and its figures."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from autograder import classreport, figures

PNG = b"\x89PNG\r\n\x1a\n"


def check(name, status, score, max_score, feedback="", group=None, blocked_by=None):
    data = {"name": name, "group": group or name.split(".")[0], "score": score,
            "max_score": max_score, "status": status, "feedback": feedback}
    if blocked_by:
        data["blocked_by"] = blocked_by
    return data


def result(key, checks, diagnoses=(), notes=(), student=None):
    return {"key": key, "student": student or key, "assignment": "mha", "checks": list(checks),
            "diagnoses": [{"code": c, "message": m} for c, m in diagnoses], "notes": list(notes),
            "score": sum(c["score"] for c in checks), "max_score": sum(c["max_score"] for c in checks),
            "submission": f"/class/{key}/mha.py", "seed": 7}


BLOCKED = "not graded until split_heads.values passes: this check only counts for an implementation that otherwise works"
CLASS = [
    result("amy", [check("split_heads.values", "passed", 6, 6, group="split"),
                   check("split_heads.raises", "passed", 2, 2, group="split"),
                   check("cost.parallel", "failed", 0, 2, "it loops over heads", group="cost")]),
    result("ben", [check("split_heads.values", "failed", 0, 6, "head 1 got rows", group="split"),
                   check("split_heads.raises", "failed", 0, 2, BLOCKED, group="split",
                         blocked_by=["split_heads.values"]),
                   check("cost.parallel", "failed", 0, 2, BLOCKED.replace("split_heads.values", "MultiHeadAttention.values"),
                         group="cost")],            # an older result: no blocked_by, the message says it
           diagnoses=[("split.no-transpose", "reshape, then transpose(1, 2)")]),
    result("cy", [check("split_heads.values", "error", 0, 6, "syntax error in mha.py, line 3", group="split"),
                  check("split_heads.raises", "failed", 0, 2, BLOCKED, group="split", blocked_by=["split_heads.values"]),
                  check("cost.parallel", "failed", 0, 2, BLOCKED, group="cost", blocked_by=["x"])],
          notes=["syntax error in mha.py, line 3: expected ':'\n    def f()\nPython cannot import the file",
                 "1 check(s) skipped (device.cuda); the other checks were scaled (rubric policy 'rescale')"]),
    result("dee", [check("split_heads.values", "error", 0, 6, "not implemented yet (split_heads raised NotImplementedError)", group="split"),
                   check("split_heads.raises", "failed", 0, 2, BLOCKED, group="split", blocked_by=["split_heads.values"]),
                   check("cost.parallel", "failed", 0, 2, BLOCKED, group="cost", blocked_by=["x"])]),
    result("eve", [check("split_heads.values", "error", 0, 6, "mha.py is empty: it defines none", group="split"),
                   check("split_heads.raises", "failed", 0, 2, BLOCKED, group="split", blocked_by=["split_heads.values"]),
                   check("cost.parallel", "failed", 0, 2, BLOCKED, group="cost", blocked_by=["x"])],
           notes=["mha.py is empty: it defines none of the API names (head_weight_shape, ...)"]),
]


def test_blocked_checks_are_counted_apart_from_failed_ones():
    """Is a check held back by a failed requirement "blocked", from blocked_by or (older
    results) from its message, and only a real failure "failed"?"""
    outcomes = dict(classreport.check_outcomes(CLASS))
    assert outcomes["cost.parallel"] == {"failed": 0.2, "blocked": 0.8}       # 1 real, 4 held back
    assert outcomes["split_heads.raises"] == {"passed": 0.2, "blocked": 0.8}
    assert classreport.status_of(CLASS[1]["checks"][0]) == "failed"


def test_every_zero_has_a_reason():
    """Syntax error, stub and empty file each named; none for a submission with points."""
    reasons = {r["key"]: classreport.zero_reason(r) for r in CLASS}
    assert reasons["amy"] is None
    assert reasons["cy"] == "syntax error in mha.py, line 3: expected ':'"
    assert reasons["dee"] == "unchanged stub: every function still raises NotImplementedError"
    assert reasons["eve"].startswith("empty file")
    assert reasons["ben"] == "no check passed"


def test_an_untouched_stub_is_named_so_not_no_check_passed():
    """A real stub's results (a notebook's too: the questions unanswered; a part graded with
    another stubbed part under it) and the batch's notes about the sandbox: is the reason
    "unchanged stub", never "no check passed" nor the first note?"""
    stub = result("fay", [
        check("split_heads.values", "error", 0, 6,
              "not implemented yet (split_heads raised NotImplementedError)", group="split"),
        check("MultiHeadAttention.values", "error", 0, 10, "MultiHeadAttention(8, 2) raised "
              "NotImplementedError: your __init__ is still the stub", group="mha"),
        check("questions.params", "error", 0, 2, "not implemented yet (params_many_heads() is "
              "not answered yet: replace its `raise` line)", group="questions"),
        check("device.cuda", "skipped", 0, 0, "skipped: no CUDA", group="device"),
        check("cost.parallel", "failed", 0, 2, BLOCKED, group="cost", blocked_by=["x"])],
        notes=["sandbox limits in force: memory 4 GiB"])
    assert classreport.zero_reason(stub) == "unchanged stub: every function still raises " \
        "NotImplementedError"
    wrong = dict(stub, checks=stub["checks"] + [check("split_heads.raises", "failed", 0, 2,
                                                      "returned, did not raise", group="split")])
    assert classreport.zero_reason(wrong) != classreport.zero_reason(stub)


def test_points_lost_per_part_and_per_diagnosis_name_the_students():
    """Are the points lost summed per part (with who lost them), and per diagnosis the
    points its students lost where that mistake shows?"""
    parts = {part: (lost, who) for part, lost, who in classreport.points_lost_by_part(CLASS)}
    assert parts["split_heads"] == (32.0, ["ben", "cy", "dee", "eve"])
    assert parts["conventions"] == (10.0, ["amy", "ben", "cy", "dee", "eve"])
    assert classreport.diagnosis_costs(CLASS) == [("split.no-transpose", ["ben"], 8.0)]


def test_one_feedback_file_per_student_and_an_lms_csv(tmp_path):
    """Is there one Markdown file per student with what grade --format text says (score,
    every check with its outcome and feedback, the mistakes, the reason for a zero), and a
    CSV with one row per student and a comment?"""
    names, missing = classreport.write_feedback(CLASS, tmp_path / "feedback")
    assert missing == []
    assert sorted(p.name for p in (tmp_path / "feedback").iterdir()) == sorted(names.values())
    assert len(names) == len(CLASS)
    ben = (tmp_path / "feedback" / names["ben"]).read_text()
    assert ben.startswith("# Feedback: ben") and "**0 / 10 points**" in ben
    assert "| `split_heads.values` | FAILED | 0 / 6 | head 1 got rows |" in ben
    assert "| `split_heads.raises` | BLOCKED by `split_heads.values` | 0 / 2 |" in ben
    assert "- **split.no-transpose**: reshape, then transpose(1, 2)" in ben
    cy = (tmp_path / "feedback" / names["cy"]).read_text()
    assert "Why no points: syntax error in mha.py, line 3" in cy
    rows = list(csv.DictReader(io.StringIO(classreport.lms_csv(CLASS, names))))
    assert [r["student"] for r in rows] == ["amy", "ben", "cy", "dee", "eve"]
    assert rows[0] == {"student": "amy", "assignment": "mha", "points": "8", "max_points": "10",
                       "percent": "80.0", "comment": "", "feedback_file": f"feedback/{names['amy']}"}
    assert names["amy"].startswith("amy-") and names["amy"].endswith(".md")
    assert rows[1]["comment"] == "no check passed"
    assert rows[2]["comment"].startswith("syntax error in mha.py, line 3")


def test_feedback_markdown_cannot_break_its_table():
    """Do a pipe, a newline and HTML in a submission's feedback stay inside one table cell?"""
    r = result("x|y", [check("split_heads.values", "failed", 0, 6, "a | b\n<script>alert(1)</script>",
                             group="split")])
    text = classreport.feedback_markdown(r)
    row = next(line for line in text.splitlines() if line.startswith("| `split_heads.values`"))
    assert row.count(" | ") == 3 + 0 and "<script>" not in text and "a \\| b" in row
    assert "\\<script\\>" in row and "&lt;" not in text         # escaped once, not as HTML entities
    assert classreport.feedback_name(r).startswith("x_y-")


def test_report_page_and_figures(tmp_path, monkeypatch):
    """Does the page show the parts and diagnosis tables, a reason beside each zero and a
    link to each feedback file, with real PNGs (blocked in the check outcomes)?"""
    pytest.importorskip("matplotlib", reason="the report needs the 'report' extra")
    results = tmp_path / "out" / "results"
    results.mkdir(parents=True)
    for r in CLASS:
        (results / f"{r['key']}.json").write_text(json.dumps({k: v for k, v in r.items() if k != "key"}))
    monkeypatch.setattr(classreport, "attention_weights", lambda *a, **k: (None, "no maps here"))
    index = Path(classreport.build(tmp_path / "out", output=tmp_path / "report"))
    page = index.read_text()
    assert "Points lost per part" in page and "blocked" in page
    assert "<td>split.no-transpose</td>" not in page and "<code>split.no-transpose</code>" in page
    assert "unchanged stub" in page and "empty file" in page
    assert "<details><summary>feedback</summary>" in page             # works mailed alone
    assert page.count("<details>") == len(CLASS) and "# Feedback: eve" in page
    pngs = {p.name for p in (tmp_path / "report").glob("*.png")}
    assert pngs == {"scores.png", "checks.png", "parts.png", "diagnoses.png"}
    assert all((tmp_path / "report" / n).read_bytes().startswith(PNG) for n in pngs)
    assert (tmp_path / "report" / "lms-grades.csv").is_file()
    assert len(list((tmp_path / "report" / "feedback").glob("*.md"))) == len(CLASS)
    assert figures.STATUS_COLOURS["blocked"] != figures.STATUS_COLOURS["failed"]
