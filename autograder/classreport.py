"""The class report: what a batch found, as one self-contained HTML page and its PNGs.

``build(OUT)`` reads ``OUT/results`` (written by ``batch``), draws the score distribution,
the outcome of each check, the diagnosis codes ranked by frequency, and the per-head
attention maps of one submission, and writes ``index.html`` (the PNGs embedded as data
URIs, so the page can be mailed or uploaded alone) next to the same PNG files.

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

from . import figures
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
        "diagnoses.png": figures.diagnosis_counts(diagnosis_counts(results), len(results)),
    }
    if weights is not None:
        pngs["attention.png"] = figures.attention_grid(weights, f"{chosen['key']}: {caption}")
    folder = Path(output) if output else out / "report"
    for name, data in pngs.items():
        _write_bytes(folder / name, data)
    index = folder / "index.html"
    write_atomic(str(index), page(results, pngs, chosen, caption))
    return str(index)


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
            tallies.setdefault(c["name"], Counter())[c["status"]] += 1
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
    for name, alt in (("scores.png", "Score distribution"), ("checks.png", "Outcome per check"),
                      ("diagnoses.png", "Diagnosis codes by frequency")):
        parts.append(_figure(pngs[name], alt))
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


def _diagnosis_table(results: list[dict]) -> str:
    examples = {d["code"]: d["message"] for r in results for d in r.get("diagnoses", [])}
    rows = "".join(f"<tr><td><code>{html.escape(code)}</code></td><td class=num>{n}</td>"
                   f"<td>{html.escape(examples[code][:300])}</td></tr>"
                   for code, n in diagnosis_counts(results))
    return ("<h2>Recognised mistakes</h2><table><tr><th>code</th><th>submissions</th>"
            f"<th>what it means (one example)</th></tr>{rows}</table>" if rows else "")


def _student_table(results: list[dict]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(r['key'])}</td><td class=num>{r['score']:g} / {r['max_score']:g}"
        f"</td><td>{html.escape(', '.join(d['code'] for d in r.get('diagnoses', [])))}</td></tr>"
        for r in sorted(results, key=lambda r: (_percent(r), r["key"])))
    return ("<h2>Submissions, lowest score first</h2><table><tr><th>student</th><th>score</th>"
            f"<th>diagnoses</th></tr>{rows}</table>")
