"""Command line: grade | batch | demo | checks. Exit 0: grading ran; 2: usage error; 1: grader failed."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

EXIT_OK, EXIT_GRADER, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m autograder", description="Grade multi-head attention submissions.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    g = sub.add_parser("grade", help="grade one submission (.py, .ipynb, or a folder holding one)")
    g.add_argument("submission")
    g.add_argument("--format", choices=("text", "json", "gradescope", "junit"), default="text")
    g.add_argument("--output", help="write the report to this file instead of stdout")
    _common(g)
    g.add_argument("--public-only", action="store_true", help="run only the checks students may see")
    _student(g)
    b = sub.add_parser("batch", help="grade every submission below DIR")
    b.add_argument("dir")
    b.add_argument("--output", required=True, help="folder for one result per submission")
    _common(b)
    b.add_argument("--workers", type=int, help="submissions graded at once (default: the cores)")
    b.add_argument("--assignment", help="in an nbgrader submitted/ tree, grade only this one")
    _student(b, one=False)
    b.add_argument("--executor", choices=("local", "dask"), default="local",
                   help="where to grade: here (default) or on a Dask distributed cluster")
    b.add_argument("--scheduler", help="with --executor dask: the scheduler's address "
                   "(tcp://HOST:8786)")
    r = sub.add_parser("report", help="a class report (HTML with plots, and PNGs) from a batch's output")
    r.add_argument("out", help="a batch's --output folder")
    r.add_argument("--student", help="whose attention maps to draw (a result's key; default: "
                   "the best score)")
    r.add_argument("--output", help="folder for index.html and the PNGs (default: OUT/report)")
    n = sub.add_parser("bench", help="time batch against nbgrader autograde on generated notebooks")
    n.add_argument("-n", "--count", type=int, default=20, help="notebooks to build (default 20)")
    n.add_argument("--nbgrader", type=int, help="grade only this many of them with nbgrader and "
                   "extrapolate (default: all; 0 skips nbgrader)")
    n.add_argument("--workers", type=int, help="batch's workers (default: the cores)")
    n.add_argument("--keep", help="build in this folder and keep it (default: a temporary one)")
    d = sub.add_parser("demo", help="grade the bundled example submissions")
    _common(d)
    sub.add_parser("checks", help="list every check with its group, points and purpose")
    a = sub.add_parser("audit", help="re-grade every submission of an nbgrader course outside "
                       "nbgrader and list the students whose gradebook score differs")
    a.add_argument("course", help="the course's root folder (holds nbgrader_config.py)")
    a.add_argument("--assignment", help="audit only this assignment")
    a.add_argument("--format", choices=("text", "json"), default="text")
    a.add_argument("--device", choices=("auto", "cpu", "cuda"),
                   help="default: the course config's TrustedGrades.device")
    a.add_argument("--seed", type=int, help="default: the course config's TrustedGrades.seed")
    a.add_argument("--rubric", help="default: the course config's TrustedGrades.rubric")
    k = sub.add_parser("package", help="build the Gradescope autograder zip or the GitHub "
                       "Classroom template repository")
    k.add_argument("target", choices=("gradescope", "classroom"))
    k.add_argument("--output", required=True, help="gradescope: the zip to write; classroom: "
                   "a new folder for the template")
    k.add_argument("--rubric", help="a rubric TOML file (default: autograder/rubric.toml)")
    v = sub.add_parser("variant", help="write a student's released notebook: their own numbers")
    v.add_argument("student", help="the student's id (as nbgrader knows it)")
    v.add_argument("--output", required=True, help="folder to write mha.ipynb into")
    _student(v, one=False)
    return parser


def _student(p, one: bool = True) -> None:
    """Per-student variants (autograder.variants): whose numbers, and the course's secret."""
    if one:
        p.add_argument("--student", help="grade against this student's variant (their numbers "
                       "and hidden inputs); needs the course's secret")
    p.add_argument("--course-config", help="the course's nbgrader_config.py, for its "
                   "TrustedGrades.variant_secret (default: $MHA_VARIANT_SECRET)")


def _common(p) -> None:
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--seed", type=int, help="replay the inputs of an earlier run")
    p.add_argument("--rubric", help="a rubric TOML file (default: autograder/rubric.toml)")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("grade", "demo") or getattr(args, "executor", None) == "local":
        from .sandbox import spawn
        spawn.prestart()          # the zygote imports torch while this process does too
    from . import commands
    try:
        return commands.COMMANDS[args.command](args)
    except commands.UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except commands.GraderFailure as e:
        print(f"the grader failed: {e}", file=sys.stderr)
        return EXIT_GRADER


def write_atomic(path: str, text: str) -> None:
    """Write the whole file or nothing: a temporary file, then os.replace."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)          # mkstemp's 0600 would hide results from TAs
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
