"""The class report: what a batch found, as one self-contained HTML page and its PNGs.

``build(OUT)`` reads ``OUT/results`` (written by ``batch``), draws the score distribution,
the outcome of each check (a check held back because a check it requires failed is
*blocked*, not failed), the points lost per part, the diagnosis codes ranked by frequency,
and the per-head attention maps of one submission, and writes ``index.html`` (the PNGs
embedded as data URIs, so the page can be mailed or uploaded alone) next to the same PNG
files. Beside it, for the LMS: ``feedback/<student>.md``, one file per student with what
``grade --format text`` says (as Markdown), and ``lms-grades.csv``, one row per student
with points, percent, a one-line comment (the reason for a zero) and the feedback file.

The attention maps come from the student's own module, run in a sandbox through the
existing ``mha`` probe (its ``weights``): the report never imports student code itself.
"""
from __future__ import annotations

import base64
import csv
import html
import io
import re
import json
import os
import statistics
import tempfile
from collections import Counter
from pathlib import Path

import torch

from . import figures
from .parts import AREAS, part_of
from .outfolder import load_results
from .files import write_atomic

MAP_SHAPE = {"d_model": 16, "num_heads": 4, "n": 10}     #: the probe's module and sequence


class ReportError(Exception):
    """The report cannot be built as asked; the message says why."""


def build(out, *, student: str | None = None, output=None) -> str:
    """Write the report; returns the path of index.html."""
    if not figures.available():
        raise ReportError("the class report draws with matplotlib: python -m pip install "
                          "matplotlib (or, in a checkout of the autograder, python -m pip "
                          "install -e \".[report]\")")
    out = Path(out)
    results = load_results(out)
    if not results:
        raise ReportError(f"{out}: no results to report on (run `python -m autograder batch "
                          f"DIR --output {out}` first)")
    chosen = _choose(results, student)
    weights, caption = attention_weights(chosen, seed=_seed(out, chosen), hide=[out])
    pngs = {
        "scores.png": figures.score_distribution([_percent(r) for r in results]),
        "checks.png": figures.check_outcomes(check_outcomes(results)),
        "parts.png": figures.points_lost([(part, lost, len(who)) for part, lost, who
                                          in points_lost_by_part(results)], len(results)),
        "diagnoses.png": figures.diagnosis_counts(diagnosis_counts(results), len(results)),
    }
    if weights is not None:
        pngs["attention.png"] = figures.attention_grid(weights, f"{chosen['key']}: {caption}")
    folder = Path(output) if output else out / "report"
    for name, data in pngs.items():
        _write_bytes(folder / name, data)
    feedback = write_feedback(results, folder / "feedback")
    write_atomic(str(folder / "lms-grades.csv"), lms_csv(results, feedback))
    index = folder / "index.html"
    write_atomic(str(index), page(results, pngs, chosen, caption))
    return str(index)


# ---------------------------------------------------------------------------------------
# What each check, part, diagnosis and zero means for the class

def status_of(check: dict) -> str:
    """A check's outcome for the report: its status, or "blocked" where it was not graded
    because a check it requires did not pass (``blocked_by``; older results: the message)."""
    if check.get("blocked_by") or (check.get("status") == "failed" and
                                   str(check.get("feedback", "")).startswith("not graded until")):
        return "blocked"
    return str(check.get("status", "error"))


def _who(result: dict) -> str:
    return str(result.get("student") or result["key"])


def _lost(check: dict) -> float:
    return max(0.0, float(check.get("max_score", 0)) - float(check.get("score", 0)))


def points_lost_by_part(results: list[dict]) -> list[tuple[str, float, list[str]]]:
    """(part, points lost over the class, the students who lost any), most lost first."""
    lost: dict[str, float] = {}
    who: dict[str, list[str]] = {}
    for r in results:
        mine: dict[str, float] = {}
        for c in r.get("checks", []):
            mine[part_of(c["name"])] = mine.get(part_of(c["name"]), 0.0) + _lost(c)
        for part, value in mine.items():
            if value > 1e-9:
                lost[part] = lost.get(part, 0.0) + value
                who.setdefault(part, []).append(_who(r))
    return sorted(((part, round(value, 2), sorted(who[part])) for part, value in lost.items()),
                  key=lambda row: (-row[1], row[0]))


def diagnosis_costs(results: list[dict]) -> list[tuple[str, list[str], float]]:
    """(code, the students it was found in, the points those students lost on the checks
    where that kind of mistake shows), most students first."""
    rows: dict[str, tuple[list[str], float]] = {}
    for r in results:
        for code in sorted({d["code"] for d in r.get("diagnoses", [])}):
            groups = AREAS.get(code.split(".")[0], ())
            cost = sum(_lost(c) for c in r.get("checks", []) if c.get("group") in groups)
            students, total = rows.get(code, ([], 0.0))
            rows[code] = (students + [_who(r)], total + cost)
    return sorted(((code, sorted(s), round(v, 2)) for code, (s, v) in rows.items()),
                  key=lambda row: (-len(row[1]), row[0]))


_POLICY_NOTE = re.compile(r"rubric policy|were scaled by")


def zero_reason(result: dict) -> str | None:
    """Why a submission scored nothing, in a few words; None where it scored points."""
    if float(result.get("score", 0)) > 0:
        return None
    notes = [n for n in result.get("notes", []) if not _POLICY_NOTE.search(n)]
    for note in notes:
        first = note.splitlines()[0]
        if first.startswith("syntax error"):
            return first
        if " is empty" in first:
            return "empty file: it defines none of the functions"
    checks = [c for c in result.get("checks", []) if status_of(c) not in ("skipped", "blocked")]
    if checks and all(c["status"] == "error" and "not implemented yet" in c.get("feedback", "")
                      for c in checks):
        return "the stub, unchanged: every function still raises NotImplementedError"
    if notes:
        return notes[0].splitlines()[0][:200]
    errors = Counter(c.get("feedback", "").split(":")[0][:120] for c in checks
                     if c["status"] == "error")
    if errors and sum(errors.values()) == len(checks):
        return "every check raised an error, most often: " + errors.most_common(1)[0][0]
    return "no check passed"


# ---------------------------------------------------------------------------------------
# For the LMS: one feedback file per student and a grades CSV

MARKS = {"passed": "passed", "failed": "FAILED", "error": "ERROR", "skipped": "skipped",
         "blocked": "not graded"}


def feedback_markdown(result: dict) -> str:
    """What ``grade --format text`` says about one submission, as Markdown."""
    lines = [f"# Feedback: {_md(_who(result))}", "",
             f"**{result.get('score', 0):g} / {result.get('max_score', 0):g} points** "
             f"({_md(Path(str(result.get('submission', ''))).name)})", ""]
    reason = zero_reason(result)
    if reason:
        lines += [f"Why no points: {_md(reason)}", ""]
    lines += ["| check | outcome | points | what the grader saw |", "|---|---|---|---|"]
    for c in result.get("checks", []):
        status = status_of(c)
        said = _md(c.get("feedback", ""))     # a passed check has some when carried forward
        lines.append(f"| `{c['name']}` | {MARKS.get(status, status)} | "
                     f"{c.get('score', 0):g} / {c.get('max_score', 0):g} | {said} |")
    if result.get("diagnoses"):
        lines += ["", "## What went wrong", ""]
        lines += [f"- **{_md(d['code'])}**: {_md(d['message'])}" for d in result["diagnoses"]]
    if result.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {_md(n)}" for n in result["notes"]]
    seed = result.get("seed")
    if seed is not None:
        lines += ["", f"_Seed {seed}: `python -m autograder grade FILE --seed {seed}` replays "
                      "these inputs._"]
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    """One table cell or list item of Markdown: no line breaks, no table pipes, no HTML."""
    text = " ".join(str(text).split())
    return html.escape(text, quote=False).replace("|", "\\|")


def feedback_name(result: dict) -> str:
    """The file name of a student's feedback: their key, made safe for every LMS."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", result["key"]).strip("._") + ".md"


def write_feedback(results: list[dict], folder: Path) -> dict[str, str]:
    """Write one Markdown feedback file per submission; {key: file name}."""
    folder.mkdir(parents=True, exist_ok=True)
    names = {}
    for r in results:
        name = feedback_name(r)
        write_atomic(str(folder / name), feedback_markdown(r))
        names[r["key"]] = name
    return names


LMS_COLUMNS = ("student", "assignment", "points", "max_points", "percent", "comment",
               "feedback_file")


def lms_csv(results: list[dict], feedback: dict[str, str]) -> str:
    """The grades as an LMS imports them: one row per student, numbers as plain numbers,
    a one-line comment (the reason for a zero, else the mistakes found)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(LMS_COLUMNS)
    for r in sorted(results, key=lambda r: _who(r)):
        codes = sorted({d["code"] for d in r.get("diagnoses", [])})
        comment = zero_reason(r) or ("mistakes found: " + ", ".join(codes) if codes else "")
        writer.writerow([_who(r), r.get("assignment", ""), f"{float(r.get('score', 0)):g}",
                         f"{float(r.get('max_score', 0)):g}", f"{_percent(r):.1f}",
                         " ".join(comment.split()), "feedback/" + feedback.get(r["key"], "")])
    return buffer.getvalue()


def _choose(results: list[dict], student: str | None) -> dict:
    if student is None:
        return min(results, key=lambda r: (-_percent(r), r["key"]))
    for r in results:
        if student in (r["key"], r.get("student")):
            return r
    raise ReportError(f"no result for {student!r}; the keys are: "
                      + ", ".join(r["key"] for r in results[:20]))


def _seed(out: Path, result: dict) -> int:
    try:
        return int(json.loads((out / "batch.json").read_text(encoding="utf-8"))["seed"])
    except (OSError, ValueError, KeyError):
        return int(result.get("seed", 0))


def _percent(result: dict) -> float:
    top = result.get("max_score") or 0
    return 100.0 * result.get("score", 0) / top if top else 0.0


def check_outcomes(results: list[dict]) -> list[tuple[str, dict[str, float]]]:
    """(check, share of submissions per status), hardest (lowest pass rate) first."""
    tallies: dict[str, Counter] = {}
    for r in results:
        for c in r.get("checks", []):
            tallies.setdefault(c["name"], Counter())[status_of(c)] += 1
    rows = [(name, {s: n / sum(t.values()) for s, n in t.items()}) for name, t in tallies.items()]
    return sorted(rows, key=lambda row: row[1].get("passed", 0.0))


def diagnosis_counts(results: list[dict]) -> list[tuple[str, int]]:
    """(code, number of submissions it was found in), most frequent first."""
    counts = Counter(code for r in results for code in {d["code"] for d in r.get("diagnoses", [])})
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def attention_weights(result: dict, *, seed: int, hide=()):
    """(weights (heads, n, n) or None, caption): the student's module on one sequence."""
    from . import api, submission
    from .sandbox.host import StudentError
    path = result.get("path")
    if not path or not Path(path).is_file():
        return None, f"its submission file {path!r} is not here, so no attention maps"
    sub = submission.load(path)
    if sub.problem:
        return None, f"no attention maps: {sub.problem}"
    d, h, n = MAP_SHAPE["d_model"], MAP_SHAPE["num_heads"], MAP_SHAPE["n"]
    # A larger input than N(0, 1) sharpens the maps of a freshly initialised module.
    x = 3 * torch.randn(1, n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    spec = {"init": {"d_model": d, "num_heads": h}, "seed": seed,
            "runs": [{"queries": x, "keys": x, "values": x}]}
    grader = api.Grader(seed=seed, device="cpu", hide=hide)
    try:
        sandbox = grader._sandbox(sub)              # one sandbox, one existing probe
        try:
            answer = sandbox.probe("mha", group="mha", spec=spec)
        except StudentError as e:
            return None, f"no attention maps: the module failed ({e})"
        finally:
            sandbox.close()
    finally:
        grader.close()
    weights = answer["runs"][0].get("weights")
    if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != (1, h, n, n):
        return None, (f"no attention maps: self.attention_weights should have shape "
                      f"{(1, h, n, n)} after a call")
    weights = weights[0].double()
    return weights.tolist(), _describe_heads(weights)


def _describe_heads(weights: torch.Tensor) -> str:
    same = [(i, j) for i in range(len(weights)) for j in range(i + 1, len(weights))
            if torch.allclose(weights[i], weights[j], atol=1e-9)]
    if not same:
        return "self-attention of one sequence, its own initial weights: every head differs"
    pairs = ", ".join(f"{i}={j}" for i, j in same[:6])
    return f"identical heads ({pairs}): shared or identically initialised weights?"


def _write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------
# The page

STYLE = """body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;
color:#222}table{border-collapse:collapse;margin:1rem 0}td,th{border-bottom:1px solid #ddd;
padding:.25rem .7rem;text-align:left;vertical-align:top}th{background:#f4f4f4}
img{max-width:100%}.num{text-align:right}figure{margin:1.5rem 0}figcaption{color:#555}"""


def page(results: list[dict], pngs: dict, chosen: dict, caption: str) -> str:
    e = html.escape
    percents = [_percent(r) for r in results]
    full = sum(p >= 99.995 for p in percents)
    parts = [f"<!doctype html><html lang='en'><meta charset='utf-8'><title>Class report</title>"
             f"<style>{STYLE}</style><h1>Class report</h1>",
             f"<p>{len(results)} submissions graded; mean {statistics.fmean(percents):.1f}%, "
             f"median {statistics.median(percents):.1f}%, {full} with full marks.</p>"]
    for name, alt in (("scores.png", "Score distribution"),
                      ("checks.png", "Outcome per check (blocked: not graded, a check it "
                                     "requires failed)"),
                      ("parts.png", "Points lost per part"),
                      ("diagnoses.png", "Diagnosis codes by frequency")):
        parts.append(_figure(pngs[name], alt))
    parts.append(_parts_table(results))
    parts.append(_diagnosis_table(results))
    parts.append(f"<h2>Attention maps of {e(chosen['key'])}</h2>")
    if "attention.png" in pngs:
        parts.append(_figure(pngs["attention.png"], f"Per-head attention of {chosen['key']}"))
    parts.append(f"<p>{e(caption)}</p>")
    parts.append(_student_table(results))
    return "\n".join(parts) + "\n</html>\n"


def _figure(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f"<figure><img alt='{html.escape(alt)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{html.escape(alt)}</figcaption></figure>")


def _parts_table(results: list[dict]) -> str:
    e = html.escape
    rows = "".join(f"<tr><td>{e(part)}</td><td class=num>{lost:g}</td><td class=num>{len(who)}"
                   f"</td><td>{e(', '.join(who))}</td></tr>"
                   for part, lost, who in points_lost_by_part(results))
    return ("<h2>Points lost per part</h2><table><tr><th>part</th><th>points lost</th>"
            f"<th>students</th><th>who</th></tr>{rows}</table>" if rows else "")


def _diagnosis_table(results: list[dict]) -> str:
    e = html.escape
    examples = {d["code"]: d["message"] for r in results for d in r.get("diagnoses", [])}
    rows = "".join(f"<tr><td><code>{e(code)}</code></td><td class=num>{len(who)}</td>"
                   f"<td class=num>{lost:g}</td><td>{e(', '.join(who))}</td>"
                   f"<td>{e(examples[code][:300])}</td></tr>"
                   for code, who, lost in diagnosis_costs(results))
    return ("<h2>Recognised mistakes</h2><table><tr><th>code</th><th>students</th>"
            "<th>points they lost there</th><th>who</th>"
            f"<th>what it means (one example)</th></tr>{rows}</table>" if rows else "")


def _student_table(results: list[dict]) -> str:
    e = html.escape
    rows = "".join(
        f"<tr><td>{e(r['key'])}</td><td class=num>{r['score']:g} / {r['max_score']:g}"
        f"</td><td>{e(zero_reason(r) or ', '.join(d['code'] for d in r.get('diagnoses', [])))}"
        f"</td><td><a href='feedback/{e(feedback_name(r))}'>feedback</a></td></tr>"
        for r in sorted(results, key=lambda r: (_percent(r), r["key"])))
    return ("<h2>Submissions, lowest score first</h2><table><tr><th>student</th><th>score</th>"
            f"<th>diagnoses, or why no points</th><th></th></tr>{rows}</table>")
