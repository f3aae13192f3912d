"""Outputs that carry student text keep it inert (issue 21, 1-3): CSV cells no spreadsheet
runs, Markdown with nothing live, HTML through an allowlist, figure titles never read as
math; the class report degrades per student and per figure; one feedback file per student
whatever the ids; and every writer shows a blocked check apart from a failed one."""
from __future__ import annotations

import csv
import io
import json
import os
import random
import unicodedata
from pathlib import Path

import pytest

from autograder import classreport, figures, lms
from autograder.model import CheckResult, Diagnosis, Report, Status
from autograder.writers import WRITERS, cells, escape

FORMULA = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
HOSTILE_IDS = ["$\\left($", "=HYPERLINK(\"x\",\"y\")", "@SUM(1+1)*cmd|' -C calc'!A0",
               "+1+2", "-2+3", "<img src=x onerror=alert(1)>", "张伟", "李娜", "Zoë", "Zoé",
               "Zoe\u0301", "\tTAB", " =1+1", os.fsdecode(b"bad\xff\xfename")]


def runnable(cell: str) -> bool:
    """Whether a spreadsheet would take this cell for a formula."""
    return cell.lstrip(" ").startswith(FORMULA)


def render_markdown(text: str) -> str:
    """GitHub-flavoured rendering (raw HTML passed through, bare URLs linked), as an LMS
    would show the file."""
    mistune = pytest.importorskip("mistune", reason="mistune comes with nbconvert (dev extra)")
    return mistune.create_markdown(escape=False, plugins=["table", "url", "strikethrough"])(text)


def assert_no_formula(text: str) -> None:
    for row in csv.reader(io.StringIO(text)):
        bad = [cell for cell in row if runnable(cell)]
        assert not bad, bad


@pytest.mark.parametrize("value", HOSTILE_IDS)
def test_csv_cells_never_start_a_formula(value):
    """Is every text cell that a spreadsheet would run given a leading apostrophe (and
    written as UTF-8 even with undecodable bytes), and numbers left as numbers?"""
    cell = escape.csv_cell(value)
    assert not runnable(cell) and cell.encode("utf-8")
    assert escape.csv_cell(3.5) == 3.5 and escape.csv_cell("alice") == "alice"


def test_markdown_has_no_live_link_image_html_or_url():
    """Do links, images, autolinks, bare URLs and HTML in an exception message stay text,
    escaped once (a reader of the raw file sees `->`, not `-&gt;`)?"""
    text = escape.markdown("see [here](http://evil.example) ![](https://track.example/p.gif) "
                           "<img src=x onerror=alert(1)> <https://a.example> www.b.example x -> y")
    rendered = render_markdown(text)
    assert "<a" not in rendered and "<img" not in rendered, rendered
    assert "&lt;img src=x onerror=alert(1)&gt;" in rendered and "[here](http://evil" in rendered
    assert "http\\://evil" in text and "www\\.b" in text and "-\\>" in text and "&gt;" not in text
    assert "\n" not in escape.markdown("one\ntwo") and "<br>" in escape.markdown("one\ntwo")


def test_html_keeps_only_the_allowlist():
    """Does the sanitiser drop scripts, event handlers, javascript: links and images from
    other sites, and keep plain formatting?"""
    out = escape.html("<b>bold</b><img src=x onerror=alert(1)><script>alert(2)</script>"
                      "<a href='javascript:alert(3)'>l</a><img src='https://t.example/p.gif'>"
                      "<img src='attachment:plot.png'>")
    assert "<b>bold</b>" in out and "attachment:plot.png" in out
    for bad in ("onerror", "<script", "javascript:", "t.example"):
        assert bad not in out, out


def test_feedback_names_are_unique_per_student():
    """Do ids that differ only in non-ASCII characters, in Unicode normalisation or in case,
    and 5000 random ones, each get their own feedback file (also on a case-insensitive disk)?"""
    rng = random.Random(0)
    alphabet = "aAbBzZéèëÉ张伟李娜 _-.=@+$\\/()"
    keys = set(HOSTILE_IDS) | {"Alice", "alice", unicodedata.normalize("NFD", "Zoé")}
    keys |= {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(5000)}
    names = {lms.feedback_name({"key": k}) for k in keys}
    assert len(names) == len(keys)
    assert len({n.lower() for n in names}) == len(keys)
    assert all(n.isascii() and "/" not in n and not n.startswith(".") for n in names)
    assert lms.feedback_name({"key": "张伟"}) != lms.feedback_name({"key": "李娜"})
    assert lms.feedback_name({"key": "Zoë"}).startswith("Zoe-")


def _result(key: str, score: float, *, notes=(), diagnoses=(), checks=None) -> dict:
    checks = checks or [
        {"name": "split_heads.values", "group": "split", "score": score, "max_score": 6.0,
         "status": "passed" if score else "failed",
         "feedback": "" if score else "see [x](http://evil.example) =1+1"},
        {"name": "device.cuda", "group": "device", "score": 0.0, "max_score": 0.0,
         "status": "skipped", "feedback": "no CUDA here"}]
    return {"key": key, "student": key, "assignment": "", "score": score,
            "max_score": 6.0, "checks": checks, "notes": list(notes), "seed": 3,
            "diagnoses": [{"code": c, "message": "=HYPERLINK(1)"} for c in diagnoses],
            "submission": f"{key}.py"}


def _write(out: Path, result: dict) -> None:
    folder = os.fsencode(out / "results")
    os.makedirs(folder, exist_ok=True)
    data = {k: v for k, v in result.items() if k != "key"}
    with open(os.path.join(folder, os.fsencode(result["key"]) + b".json"), "w") as f:
        json.dump(data, f)


def test_the_report_degrades_per_student_and_per_figure(tmp_path, monkeypatch):
    """A math-text id chosen for the attention maps, negative attention weights, an id that
    is not UTF-8, a result file that is not JSON and one whose score is not a number: the
    report is written, every readable student has an entry, the broken ones a note."""
    pytest.importorskip("matplotlib", reason="the report needs the 'report' extra")
    out = tmp_path / "out"
    for i, key in enumerate(HOSTILE_IDS):
        _write(out, _result(key, 6.0 if key == "$\\left($" else i % 3, diagnoses=["split.x"]))
    (out / "results" / "broken.json").write_text("{not json")
    _write(out, dict(_result("nan-score", 1), score="lots"))
    negative = [[[-0.5, -0.25], [-1.0, -2.0]]] * 4
    monkeypatch.setattr(classreport, "attention_weights",
                        lambda *a, **k: (negative, "heads with negative weights"))
    index = Path(classreport.build(out))
    page = index.read_text(encoding="utf-8")
    assert (index.parent / "attention.png").read_bytes().startswith(b"\x89PNG")
    assert "broken: its result could not be read" in page and "nan-score" in page
    feedback = list((index.parent / "feedback").iterdir())
    assert len(feedback) == len(HOSTILE_IDS)
    for path in feedback:
        rendered = render_markdown(path.read_text(encoding="utf-8"))
        assert "<a " not in rendered and "<img" not in rendered, rendered
    lms_text = (index.parent / "lms-grades.csv").read_text(encoding="utf-8")
    assert_no_formula(lms_text)
    assert len(list(csv.reader(io.StringIO(lms_text)))) == len(HOSTILE_IDS) + 1
    assert "<img src=x" not in page and "&lt;img src=x onerror" in page


def _odd(key: str) -> dict:
    """A result of a shape nobody foresaw that still passes ``classdata.checked``: a blocked
    check whose ``blocked_by`` is a number, not a list of names."""
    result = _result(key, 0.0)
    result["checks"][0]["blocked_by"] = 5
    return result


def test_one_students_row_of_an_unforeseen_shape_costs_only_that_row():
    """Is the page built around a row that cannot be drawn (the feedback named, as if its
    file were written), with that row saying so and every other student's feedback in it?"""
    results = [_result(k, i % 3) for i, k in enumerate(("amy", "ben", "cy"))] + [_odd("odd")]
    feedback = {r["key"]: f"{r['key']}.md" for r in results}
    page = classreport.page(results, {}, results[0], "no maps", feedback=feedback)
    assert page.count("<details>") == 3 and page.endswith("</html>\n")
    row = next(line for line in page.split("<tr>") if line.startswith("<td>odd</td>"))
    assert "this entry could not be shown (TypeError" in row, row


def test_a_result_of_an_unforeseen_shape_costs_only_that_student(tmp_path, monkeypatch):
    """A score written as a 401-digit integer (float() overflows) and the odd blocked_by:
    the report is written, the first left out with a note, the second without a feedback
    file (a note says why) but with its rows, every other student complete."""
    pytest.importorskip("matplotlib", reason="the report needs the 'report' extra")
    out = tmp_path / "out"
    for i, key in enumerate(("amy", "ben", "cy")):
        _write(out, _result(key, i % 3))
    _write(out, _odd("odd"))
    (out / "results" / "huge.json").write_text(
        json.dumps({k: v for k, v in _result("huge", 1.0).items() if k != "key"})
        .replace('"score": 1.0', '"score": 1' + "0" * 400))
    monkeypatch.setattr(classreport, "attention_weights", lambda *a, **k: (None, "no maps"))
    index = Path(classreport.build(out))
    page = index.read_text(encoding="utf-8")
    assert "huge: its result could not be read (OverflowError" in page
    assert "odd: no feedback file (TypeError" in page and page.count("<details>") == 3
    assert len(list((index.parent / "feedback").iterdir())) == 3
    rows = list(csv.reader(io.StringIO((index.parent / "lms-grades.csv").read_text())))
    assert [r[0] for r in rows[1:]] == ["amy", "ben", "cy", "odd"]


def test_a_figure_that_fails_costs_only_that_figure(tmp_path, monkeypatch):
    """Does a figure that raises leave a note and the rest of the page?"""
    pytest.importorskip("matplotlib", reason="the report needs the 'report' extra")
    out = tmp_path / "out"
    _write(out, _result("amy", 6.0))
    monkeypatch.setattr(classreport, "attention_weights", lambda *a, **k: (None, "no maps"))

    def broken(*args):
        raise ValueError("minvalue must be <= maxvalue")
    monkeypatch.setattr(figures, "diagnosis_counts", broken)
    page = Path(classreport.build(out)).read_text(encoding="utf-8")
    assert "diagnoses.png could not be drawn (ValueError: minvalue" in page
    assert "Score distribution" in page and "<details>" in page


def test_math_text_is_drawn_as_written():
    """Is a title that mathtext cannot parse drawn (as plain text), not raised on?"""
    pytest.importorskip("matplotlib", reason="the report needs the 'report' extra")
    png = figures.attention_grid([[[0.5, 0.5], [1.0, 0.0]]], "$\\left($ $x^2$ \\frac{")
    assert png.startswith(b"\x89PNG")


def test_skipped_is_not_hard_and_lost_points_count_once():
    """Does a check skipped everywhere sort last, not as the hardest, and do two codes that
    show on the same check share its lost points instead of each counting them?"""
    results = [_result("a", 0.0, diagnoses=["split.no-transpose", "split.wrong-heads"]),
               _result("b", 6.0)]
    order = [name for name, _ in classreport.check_outcomes(results)]
    assert order == ["split_heads.values", "device.cuda"]
    costs = {code: lost for code, _, lost in classreport.diagnosis_costs(results)}
    assert costs == {"split.no-transpose": 3.0, "split.wrong-heads": 3.0}


def _report(blocked: bool) -> Report:
    r = [CheckResult("split_heads.values", "split", Status.FAILED, 0, 6, "head 1 got rows",
                     hidden=False),
         CheckResult("split_heads.raises", "split", Status.FAILED, 0, 2,
                     "not graded until split_heads.values passes", hidden=False,
                     blocked_by=("split_heads.values",) if blocked else ())]
    return Report("=cmd|' /C calc'!A0 \x1b[31mred.py", tuple(r),
                  (Diagnosis("split.no-transpose", "\x1b]8;;http://x\x07link"),), seed=1)


def test_every_writer_shows_blocked_apart_from_failed():
    """Text, JUnit, Gradescope and the nbgrader cell each name a blocked check and what
    blocks it, and never call it a failure; no terminal escape reaches any of them."""
    report = _report(blocked=True)
    text = WRITERS["text"](report)
    assert "BLKD split_heads.raises" in text and "BLOCKED by split_heads.values" in text
    assert "FAIL split_heads.values" in text and "\x1b" not in text
    junit = WRITERS["junit"](report)
    assert 'type="blocked"' in junit and 'failures="1"' in junit and 'skipped="1"' in junit
    scope = json.loads(WRITERS["gradescope"](report))
    raises = next(t for t in scope["tests"] if t["name"] == "split_heads.raises")
    assert raises["output"].startswith("BLOCKED by split_heads.values")
    cell = cells.render(report, part="split_heads", public=True, score=0, points=8)
    assert "BLOCKED split_heads.raises (BLOCKED by split_heads.values)" in cell
    unblocked = WRITERS["text"](_report(blocked=False))
    assert "BLKD" not in unblocked and "FAIL split_heads.raises" in unblocked


def test_a_syntax_error_quotes_its_line_on_its_own(tmp_path):
    """Is the offending line of a syntax error on a line of its own, in every writer that
    wraps text, and not run into the sentence?"""
    from autograder import submission
    path = tmp_path / "mha.py"
    path.write_text("def f()\n    return 1\n")
    problem = submission.load(path).problem
    assert problem.splitlines()[:2] == ["syntax error in mha.py, line 1: expected ':'. The line:",
                                        "    def f()"]
    report = Report("mha.py", (CheckResult("split_heads.values", "split", Status.ERROR, 0, 6,
                                           problem),), notes=(problem,))
    text = WRITERS["text"](report)
    assert "\n             def f()\n" in text or "\n    def f()\n" in text
    assert "expected ':'. The line: def f()" not in text
    md = lms.feedback_markdown({"key": "k", "checks": [{"name": "x", "status": "error",
                                "score": 0, "max_score": 6, "feedback": problem}]})
    assert "The line:<br>`def f()`<br>" in md
