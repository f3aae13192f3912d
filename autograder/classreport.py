"""The class report: what a batch found, as one self-contained HTML page and its PNGs.

``build(OUT)`` reads ``OUT/results`` (written by ``batch``), draws the score distribution,
the outcome of each check (a check held back because a check it requires failed is
*blocked*, not failed), the points lost per part, the diagnosis codes ranked by frequency,
and the per-head attention maps of one submission, and writes ``index.html`` (the PNGs
embedded as data URIs, so the page can be mailed or uploaded alone) next to the same PNG
files. Beside it, for the LMS (``autograder.lms``): ``feedback/<slug>-<digest>.md``, one file
per student with what ``grade --format text`` says (as Markdown), and ``lms-grades.csv``,
one row per student with points, percent, a one-line comment (the reason for a zero) and
the feedback file. The page embeds each student's feedback too, so it works mailed alone.

It degrades per student, per figure and per table: a result that cannot be read
(``classdata.load``), a feedback file, a figure or a table that cannot be drawn, or attention
maps that cannot be had, costs that entry, with a note at the top of the page, never the
page; a student's row that cannot be drawn (``page``; ``lms.lms_csv`` likewise) becomes a
row that says so.

The attention maps come from the student's own module, run in a sandbox through the
existing ``mha`` probe (its ``weights``): the report never imports student code itself.
"""
from __future__ import annotations

import base64
import html
import json
import os
import statistics
import tempfile
from collections import Counter
from pathlib import Path

import torch

from . import classdata, figures
from .classdata import (lost as _lost, name_of, percent as _percent, status_of,
                        who as _who, zero_reason)
from .files import write_atomic
from .lms import MARKS, feedback_markdown, feedback_name, lms_csv, write_feedback  # noqa: F401
from .parts import AREAS, result_part
from .writers.escape import mathtext, readable

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
    results, notes = classdata.load(out)
    if not results:
        raise ReportError(f"{out}: no results to report on (run `python -m autograder batch "
                          f"DIR --output {out}` first)" + "".join(f"; {n}" for n in notes))
    chosen = _choose(results, student)
    weights, caption = _attention(chosen, out)
    pngs = _figures(results, notes)
    if weights is not None:
        _draw(pngs, notes, "attention.png", figures.attention_grid, weights,
              f"{mathtext(_key(chosen))}: {caption}")
    folder = Path(output) if output else out / "report"
    for name, data in pngs.items():
        _write_bytes(folder / name, data)
    feedback, missing = write_feedback(results, folder / "feedback")
    notes += missing
    write_atomic(str(folder / "lms-grades.csv"), lms_csv(results, feedback))
    index = folder / "index.html"
    write_atomic(str(index), page(results, pngs, chosen, caption, feedback=feedback, notes=notes))
    return str(index)


def _figures(results: list[dict], notes: list[str]) -> dict[str, bytes]:
    """The class's figures; one that cannot be drawn is left out, with a note."""
    pngs: dict[str, bytes] = {}
    _draw(pngs, notes, "scores.png", figures.score_distribution, [_percent(r) for r in results])
    _draw(pngs, notes, "checks.png", figures.check_outcomes, check_outcomes(results))
    _draw(pngs, notes, "parts.png", figures.points_lost,
          [(part, lost, len(who)) for part, lost, who in points_lost_by_part(results)],
          len(results))
    _draw(pngs, notes, "diagnoses.png", figures.diagnosis_counts, diagnosis_counts(results),
          len(results))
    return pngs


def _draw(pngs: dict, notes: list[str], name: str, draw, *args) -> None:
    try:
        pngs[name] = draw(*args)
    except Exception as e:          # noqa: BLE001 — one figure's failure costs that figure
        notes.append(f"the figure {name} could not be drawn ({type(e).__name__}: "
                     f"{readable(str(e))[:200]}); the rest of the report is complete")


def _attention(chosen: dict, out: Path):
    """(weights or None, caption) of the chosen submission; a failure costs only the maps."""
    try:
        return attention_weights(chosen, seed=_seed(out, chosen), hide=[out])
    except Exception as e:          # noqa: BLE001 — the maps are one figure of many
        return None, f"no attention maps: {type(e).__name__}: {readable(str(e))[:200]}"


def _key(result: dict) -> str:
    return readable(result["key"])


# ---------------------------------------------------------------------------------------
# What each check, part, diagnosis and zero means for the class

def points_lost_by_part(results: list[dict]) -> list[tuple[str, float, list[str]]]:
    """(part, points lost over the class, the students who lost any), most lost first."""
    lost: dict[str, float] = {}
    who: dict[str, list[str]] = {}
    for r in results:
        mine: dict[str, float] = {}
        for c in r.get("checks", []):
            mine[result_part(c)] = mine.get(result_part(c), 0.0) + _lost(c)
        for part, value in mine.items():
            if value > 1e-9:
                lost[part] = lost.get(part, 0.0) + value
                who.setdefault(part, []).append(_who(r))
    return sorted(((part, round(value, 2), sorted(who[part])) for part, value in lost.items()),
                  key=lambda row: (-row[1], row[0]))


def diagnosis_costs(results: list[dict]) -> list[tuple[str, list[str], float]]:
    """(code, the students it was found in, the points those students lost on the checks
    where that kind of mistake shows), most students first. A check's lost points are
    shared out over the student's codes that show there, so no point counts twice."""
    rows: dict[str, tuple[list[str], float]] = {}
    for r in results:
        codes = sorted({d["code"] for d in r.get("diagnoses", [])})
        cost = dict.fromkeys(codes, 0.0)
        for c in r.get("checks", []):
            showing = [code for code in codes
                       if c.get("group") in AREAS.get(code.split(".")[0], ())]
            for code in showing:
                cost[code] += _lost(c) / len(showing)
        for code in codes:
            students, total = rows.get(code, ([], 0.0))
            rows[code] = (students + [_who(r)], total + cost[code])
    return sorted(((code, sorted(s), round(v, 2)) for code, (s, v) in rows.items()),
                  key=lambda row: (-len(row[1]), row[0]))


def _choose(results: list[dict], student: str | None) -> dict:
    if student is None:
        return min(results, key=lambda r: (-_percent(r), r["key"]))
    for r in results:
        if student in (r["key"], r.get("student")):
            return r
    raise ReportError(f"no result for {readable(student)!r}; the keys are: "
                      + ", ".join(_key(r) for r in results[:20]))


def _seed(out: Path, result: dict) -> int:
    try:
        return int(json.loads((out / "batch.json").read_text(encoding="utf-8"))["seed"])
    except (OSError, ValueError, KeyError):
        return int(result.get("seed", 0))


def check_outcomes(results: list[dict]) -> list[tuple[str, dict[str, float]]]:
    """(check, share of submissions per outcome), hardest first: the lowest pass rate among
    the submissions where it ran (a skipped check is not hard; one never run comes last)."""
    tallies: dict[str, Counter] = {}
    for r in results:
        for c in r.get("checks", []):
            tallies.setdefault(c["name"], Counter())[status_of(c)] += 1
    rows = [(name, {s: n / sum(t.values()) for s, n in t.items()}) for name, t in tallies.items()]
    return sorted(rows, key=_hardness)


def _hardness(row) -> tuple:
    shares = row[1]
    ran = 1.0 - shares.get("skipped", 0.0)
    return (ran <= 1e-9, shares.get("passed", 0.0) / ran if ran > 1e-9 else 1.0, row[0])


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
img{max-width:100%}.num{text-align:right}figure{margin:1.5rem 0}figcaption{color:#555}
pre{white-space:pre-wrap;max-width:40rem}.notes{background:#fff4e0;padding:.3rem 1rem}"""


def page(results: list[dict], pngs: dict, chosen: dict, caption: str, *,
         feedback: dict | None = None, notes=()) -> str:
    """The page. Each part that draws on the class's data is built on its own, and each
    student's row too: one that fails (a result of a shape nobody foresaw) is left out with
    a note, or becomes a row with a note, and the rest of the page is written."""
    e = html.escape
    notes = list(notes)
    summary = _section(notes, "the class's summary", _summary, results)
    tables = [_section(notes, "the table of points lost per part", _parts_table, results),
              _section(notes, "the table of recognised mistakes", _diagnosis_table, results),
              _section(notes, "the attention maps' heading", _attention_section, chosen, pngs,
                       caption),
              _student_table(results, feedback or {})]
    parts = [f"<!doctype html><html lang='en'><meta charset='utf-8'><title>Class report</title>"
             f"<style>{STYLE}</style><h1>Class report</h1>", summary]
    if notes:
        parts.append("<div class=notes><p>Left out of this report:</p><ul>"
                     + "".join(f"<li>{e(readable(n))}</li>" for n in notes) + "</ul></div>")
    for name, alt in (("scores.png", "Score distribution"),
                      ("checks.png", "Outcome per check (blocked: not graded, a check it "
                                     "requires failed)"),
                      ("parts.png", "Points lost per part"),
                      ("diagnoses.png", "Diagnosis codes by frequency")):
        if name in pngs:
            parts.append(_figure(pngs[name], alt))
    return "\n".join(parts + tables) + "\n</html>\n"


def _section(notes: list[str], what: str, build, *args) -> str:
    """One part of the page that draws on every student's data; one that cannot be built
    is left out with a note (an unforeseen shape of some result), never the page."""
    try:
        return build(*args)
    except Exception as e:          # noqa: BLE001 — one section's failure costs that section
        notes.append(f"{what} could not be built ({type(e).__name__}: "
                     f"{readable(str(e))[:200]}); the rest of the report is complete")
        return ""


def _summary(results: list[dict]) -> str:
    percents = [_percent(r) for r in results]
    full = sum(p >= 99.995 for p in percents)
    return (f"<p>{len(results)} submissions graded; mean {statistics.fmean(percents):.1f}%, "
            f"median {statistics.median(percents):.1f}%, {full} with full marks.</p>")


def _attention_section(chosen: dict, pngs: dict, caption: str) -> str:
    e = html.escape
    parts = [f"<h2>Attention maps of {e(_key(chosen))}</h2>"]
    if "attention.png" in pngs:
        parts.append(_figure(pngs["attention.png"], f"Per-head attention of {_key(chosen)}"))
    parts.append(f"<p>{e(readable(caption))}</p>")
    return "\n".join(parts)


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
    examples = {d["code"]: readable(d.get("message", "")) for r in results
                for d in r.get("diagnoses", [])}
    rows = "".join(f"<tr><td><code>{e(code)}</code></td><td class=num>{len(who)}</td>"
                   f"<td class=num>{lost:g}</td><td>{e(', '.join(who))}</td>"
                   f"<td>{e(examples[code][:300])}</td></tr>"
                   for code, who, lost in diagnosis_costs(results))
    return ("<h2>Recognised mistakes</h2><table><tr><th>code</th><th>students</th>"
            "<th>points they lost there (each lost point counted once)</th><th>who</th>"
            f"<th>what it means (one example)</th></tr>{rows}</table>" if rows else "")


def _student_table(results: list[dict], feedback: dict) -> str:
    """Every submission, lowest first; its feedback is in the page (a mailed page has no
    folder beside it), and the file it is also in is named."""
    rows = []
    for r in sorted(results, key=_row_order):
        try:
            rows.append(_student_row(r, feedback))
        except Exception as ex:     # noqa: BLE001 — one student's bad data costs that row
            rows.append(f"<tr><td>{html.escape(name_of(r))}</td><td colspan=3>this entry "
                        f"could not be shown ({type(ex).__name__}: "
                        f"{html.escape(readable(str(ex))[:200])}); its result file is in "
                        "results/</td></tr>")
    return ("<h2>Submissions, lowest score first</h2><table><tr><th>student</th><th>score</th>"
            f"<th>diagnoses, or why no points</th><th>feedback</th></tr>{''.join(rows)}</table>")


def _student_row(r: dict, feedback: dict) -> str:
    e = html.escape
    said = zero_reason(r) or ", ".join(str(d["code"]) for d in r.get("diagnoses", []))
    name = feedback.get(r["key"])
    text = (f"<details><summary>feedback</summary><p>also in <code>feedback/{e(name)}</code>"
            f"</p><pre>{e(feedback_markdown(r))}</pre></details>" if name else
            "no feedback file (see the notes above)")
    return (f"<tr><td>{e(_who(r))}</td><td class=num>{r['score']:g} / {r['max_score']:g}</td>"
            f"<td>{e(readable(said))}</td><td>{text}</td></tr>")


def _row_order(r: dict) -> tuple:
    """Lowest score first; a result whose score cannot be read comes last."""
    try:
        return (0, _percent(r), str(r["key"]))
    except Exception:               # noqa: BLE001 — its row says what is wrong
        return (1, 0.0, name_of(r))
