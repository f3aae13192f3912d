"""JUnit XML, the dialect CI systems (Jenkins, GitLab, GitHub test reporters) and CodeGrade read.

    <testsuites name tests failures errors time>
      <testsuite name tests failures errors skipped time>
        <properties>  score, max_score, seed, submission  </properties>
        <testcase classname="mha.<group>" name="<check>" time>  one per check
          <failure | error | skipped message type>feedback</...>   unless it passed
                                            (a blocked check: <skipped type="blocked">)
        <system-out>  recognised mistakes and notes  </system-out>

Valid against ``junit-10.xsd``, the schema pytest checks its own JUnit output with. The
report has no timings, so every ``time`` is 0. JUnit has no notion of hidden tests: this
output carries the hidden checks' feedback, so show it to students only from a
``--public-only`` run.
"""
from __future__ import annotations

from xml.etree import ElementTree as ET

from .clean import clean
from .outcome import blocked_label, outcome

HELP = "JUnit XML for CI"   #: what ``grade --format`` says of this format
SUITE = "mha-autograder"
ELEMENT = {"failed": "failure", "error": "error", "skipped": "skipped", "blocked": "skipped"}
MESSAGE_LIMIT = 200                 #: the one-line summary CI systems show in their tables


def render(report) -> str:
    counts = {status: sum(outcome(r) == status for r in report.results)
              for status in ("failed", "error", "skipped", "blocked")}
    totals = {"tests": str(len(report.results)), "failures": str(counts["failed"]),
              "errors": str(counts["error"])}
    root = ET.Element("testsuites", name=SUITE, **totals, time="0")
    suite = ET.SubElement(root, "testsuite", name=f"{SUITE}: {clean(report.submission)}",
                          **totals, skipped=str(counts["skipped"] + counts["blocked"]), time="0")
    properties = ET.SubElement(suite, "properties")
    for name, value in (("score", f"{report.score:g}"), ("max_score", f"{report.max_score:g}"),
                        ("seed", str(report.seed)), ("submission", clean(report.submission))):
        ET.SubElement(properties, "property", name=name, value=value)
    for r in report.results:
        case = ET.SubElement(suite, "testcase", classname=f"mha.{clean(r.group)}",
                             name=clean(r.name), time="0")
        kind = outcome(r)
        if kind in ELEMENT:
            feedback = clean(r.feedback)
            first = feedback.strip().splitlines()[0] if feedback.strip() else kind
            summary = first if kind == "skipped" else \
                f"{r.score:g} / {r.max_score:g} points: {first}"
            if kind == "blocked":
                summary = f"{clean(blocked_label(r))}: {summary}"
            ET.SubElement(case, ELEMENT[kind], type=kind,
                          message=clean(summary, MESSAGE_LIMIT)).text = feedback or None
    out = _system_out(report)
    if out:
        ET.SubElement(suite, "system-out").text = out
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _system_out(report) -> str:
    lines = [f"{clean(report.submission)}: {report.score:g} / {report.max_score:g} points "
             f"(seed {report.seed})"]
    if report.diagnoses:
        lines += ["", "Recognised mistakes:"]
        lines += [f"[{clean(d.code)}] {clean(d.message)}" for d in report.diagnoses]
    if report.notes:
        lines += ["", "Notes:"] + [f"- {clean(n)}" for n in report.notes]
    return "\n".join(lines)
