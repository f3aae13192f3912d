"""``python -m autograder audit COURSE_DIR``: re-grade every nbgrader submission outside
nbgrader and list the students whose gradebook score differs from the re-grade.

The re-grade reads what the student handed in (``submitted/<student>/<assignment>/``), puts
back the course's locked cells as nbgrader's ``OverwriteCells`` does, and scores our
autograded cells exactly as ``TrustedGrades`` does (``autograder.parts``), with the seed,
rubric and device of the course's ``nbgrader_config.py``. A cell differs when its gradebook
score (a grader's manual score if there is one, else the autograder's) is more than half a
cent away. Nothing here writes to the gradebook.

Before re-grading, the whole grader is imported and its bytecode checked
(``autograder.integrity``): planted bytecode (a ``.pyc`` Python would run in place of its
source, or a code file with no source) stops the audit with the files named; stale and
orphaned ``.pyc`` files (never loaded) are listed in the result.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook
from traitlets.config.loader import PyFileConfigLoader

from . import integrity, parts, variants
from .nbgrader_plugin import (TrustedGrades, course_hidden, grade_notebook, load_whole_grader,
                              shared_grader)
from .sandbox.host import GraderError

TOLERANCE = 0.005


class AuditError(Exception):
    """The folder is not an nbgrader course this audit can read; the message says why."""


@dataclass
class Audit:
    course: str
    seed: int
    rubric: str
    submissions: list = field(default_factory=list)   #: one dict per student and notebook
    differences: list = field(default_factory=list)   #: the submissions that differ, with cells
    failures: list = field(default_factory=list)      #: (who, why): not re-graded
    bytecode: list = field(default_factory=list)      #: integrity.Finding: stale, orphaned

    def to_dict(self) -> dict:
        return {"course": self.course, "seed": self.seed, "rubric": self.rubric,
                "submissions": self.submissions, "differences": self.differences,
                "failures": [{"submission": who, "error": why} for who, why in self.failures],
                "bytecode": [f.to_dict() for f in self.bytecode]}


def settings(course: Path) -> dict:
    """The course's gradebook and TrustedGrades settings, read from its nbgrader_config.py."""
    if not (course / "nbgrader_config.py").is_file():
        raise AuditError(f"{course} has no nbgrader_config.py: give the course's root folder")
    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    ours = TrustedGrades(config=cfg)
    where = cfg.CourseDirectory
    return {"seed": ours.seed, "rubric": ours.rubric, "device": ours.device,
            "variant_secret": ours.variant_secret,
            "db_url": where.get("db_url") or f"sqlite:///{course / 'gradebook.db'}",
            "course_id": where.get("course_id") or "default_course"}


def run(course, *, seed=None, rubric=None, device=None, assignment=None) -> Audit:
    """Re-grade every submission of the course's gradebook (or of one assignment)."""
    course = Path(course).resolve()
    chosen = settings(course)
    chosen.update({k: v for k, v in (("seed", seed), ("rubric", rubric), ("device", device))
                   if v is not None})
    database = chosen["db_url"].removeprefix("sqlite:///")
    if chosen["db_url"].startswith("sqlite:///") and not Path(database).is_file():
        raise AuditError(f"{course} has no gradebook ({chosen['db_url']}): run nbgrader "
                         "generate_assignment and autograde first")
    audit = Audit(str(course), chosen["seed"], chosen["rubric"] or "autograder/rubric.toml")
    load_whole_grader()
    integrity.refuse_planted()
    audit.bytecode = integrity.bytecode_findings()
    grader = shared_grader(chosen["seed"], chosen["rubric"], chosen["device"],
                           hide=course_hidden(course))
    with Gradebook(chosen["db_url"], chosen["course_id"]) as gb:
        names = [a.name for a in gb.assignments if assignment in (None, a.name)]
        if assignment is not None and not names:
            raise AuditError(f"the gradebook has no assignment {assignment!r}")
        for name in names:
            for notebook in gb.find_assignment(name).notebooks:
                maxima = {c.name: float(c.max_score) for c in notebook.grade_cells
                          if parts.cell_part(c.name)}
                if maxima:
                    _audit_notebook(gb, course, name, notebook.name, maxima, grader, audit,
                                    chosen["variant_secret"])
    return audit


def _audit_notebook(gb, course, assignment, notebook, maxima, grader, audit, secret="") -> None:
    source = nbformat.read(course / "source" / assignment / f"{notebook}.ipynb", as_version=4)
    for sub in gb.find_assignment(assignment).submissions:
        student = sub.student.id
        who = f"{student} {assignment}/{notebook}.ipynb"
        path = course / "submitted" / student / assignment / f"{notebook}.ipynb"
        try:
            variant = variants.derive(student, secret) if secret else None   # as autograde did
            regraded = regrade(path, source, maxima, grader, variant)
        except (GraderError, OSError, ValueError) as e:
            audit.failures.append((who, str(e)))
            continue
        saved = gb.find_submission_notebook(notebook, assignment, student).grades
        grades = {g.name: g for g in saved if g.name in maxima}
        cells = [{"cell": name, "regraded": score,
                  "gradebook": round(grades[name].score, 4) if name in grades else None,
                  "manual": name in grades and grades[name].manual_score is not None}
                 for name, score in regraded.items()]
        entry = {"student": student, "assignment": assignment, "notebook": notebook,
                 "gradebook": round(sum(c["gradebook"] or 0.0 for c in cells), 4),
                 "regraded": round(sum(regraded.values()), 4)}
        audit.submissions.append(entry)
        differing = [c for c in cells if c["gradebook"] is None
                     or abs(c["gradebook"] - c["regraded"]) > TOLERANCE]
        if differing:
            audit.differences.append(dict(entry, cells=differing))


def regrade(path: Path, source, maxima: dict, grader, variant=None) -> dict[str, float]:
    """Our cells' scores for one submitted notebook (all 0 when it was not handed in)."""
    if not path.is_file():
        return {name: 0.0 for name in maxima}
    nb = restore_locked(nbformat.read(path, as_version=4), source)
    return parts.cell_scores(grade_notebook(nb, path.name, grader, variant), maxima,
                             grader.rubric.points)


def restore_locked(nb, source):
    """The submission as nbgrader's sanitizing leaves it: of cells sharing a grade_id only the
    last keeps its nbgrader metadata (DeduplicateIds); a grade_id the course does not know is
    dropped; the course's locked cells are put back, source and metadata (OverwriteCells)."""
    nb = copy.deepcopy(nb)
    originals = {c.metadata["nbgrader"]["grade_id"]: c for c in source.cells
                 if "grade_id" in c.metadata.get("nbgrader", {})}
    seen = set()
    for cell in reversed(nb.cells):
        meta = cell.metadata.get("nbgrader")
        if not isinstance(meta, dict) or not any(meta.get(k) for k in ("grade", "solution", "locked")):
            continue
        grade_id = meta.get("grade_id")
        if grade_id in seen:
            cell.metadata["nbgrader"] = {}
            continue
        seen.add(grade_id)
        original = originals.get(grade_id)
        if original is None:
            meta.pop("grade_id", None)
            continue
        cell.metadata["nbgrader"] = copy.deepcopy(original.metadata["nbgrader"])
        if not original.metadata["nbgrader"].get("solution"):
            cell.source, cell.cell_type = original.source, original.cell_type
    return nb


def describe(audit: Audit) -> str:
    """The audit as text for the instructor."""
    lines = [f"audit of {audit.course} (seed {audit.seed}, rubric {audit.rubric}): "
             f"{len(audit.submissions)} submission(s) re-graded outside nbgrader"]
    if not audit.differences:
        lines.append("every gradebook score agrees with the re-grade")
    else:
        lines.append(f"{len(audit.differences)} differ from the gradebook:")
    for d in audit.differences:
        lines.append(f"  {d['student']}  {d['assignment']}/{d['notebook']}.ipynb  gradebook "
                     f"{d['gradebook']:g}, re-graded {d['regraded']:g}")
        for c in d["cells"]:
            was = "missing" if c["gradebook"] is None else f"{c['gradebook']:g}"
            lines.append(f"      {c['cell']}: gradebook {was}"
                         f"{' (manual)' if c['manual'] else ''}, re-graded {c['regraded']:g}")
    if audit.bytecode:
        named = ", ".join(f.path for f in audit.bytecode[:5])
        lines.append(f"  {len(audit.bytecode)} stale or orphaned .pyc file(s) in the grader, never "
                     f"loaded (out of date, or without a source): {named}"
                     + (" …" if len(audit.bytecode) > 5 else ""))
    for who, why in audit.failures:
        lines.append(f"  not re-graded: {who}: {why}")
    return "\n".join(lines) + "\n"
