"""Command line: grade | batch | report | bench | demo | checks | audit | package | variant.

Only the parser and the exit status live here; what each command does is in
``commands.py``. The status is decided by the type of what a command raised (see
``errors.py``): 0 grading ran, 2 a usage error, 1 the grader failed.
"""
from __future__ import annotations

import argparse
import gc
import os
import select
import sys
import traceback
from pathlib import Path

from .errors import (EXIT_GRADER, EXIT_INTERRUPTED, EXIT_OK, EXIT_PIPE_CLOSED, EXIT_USAGE,
                     GraderFailure, UsageError)

__all__ = ["EXIT_GRADER", "EXIT_OK", "EXIT_USAGE", "build_parser", "main", "version"]

PROG = "python -m autograder"
NAME = "mha-autograder"         #: the program's name, as pyproject.toml and --version say it
DEVICES = ("auto", "cpu", "cuda")

EXAMPLES = {
    None: """\
examples:
  python -m autograder demo                                grade the bundled examples
  python -m autograder grade mha.py                        one submission, as a table
  python -m autograder grade mha.ipynb --format json       the same, as one JSON object
  python -m autograder batch submitted/ --output results/  a whole class
  python -m autograder checks                              what is checked, for how many points
  python -m autograder COMMAND --help                      one command's options, with examples

exit status: 0 grading ran (whatever the score), 2 usage error, 1 the grader failed.""",
    "grade": """\
examples:
  python -m autograder grade mha.py
  python -m autograder grade mha.ipynb --format json --output result.json
  python -m autograder grade student_folder/ --public-only
  python -m autograder grade mha.py --seed 1234        replay the inputs of an earlier run""",
    "batch": """\
examples:
  python -m autograder batch submitted/ --output results/
  python -m autograder batch course/ --assignment mha --output results/ --workers 4
  python -m autograder batch clones/ --output results/ --executor dask --scheduler tls://HOST:8786 \\
      --tls-ca-file ca.pem --tls-cert client.pem --tls-key client-key.pem

Run the same command again to resume: only students without a complete result are graded.""",
    "report": """\
examples:
  python -m autograder report results/
  python -m autograder report results/ --student mha/alice --output report/""",
    "bench": """\
examples:
  python -m autograder bench -n 20
  python -m autograder bench -n 1000 --nbgrader 10 --workers 2 --keep /tmp/bench
  python -m autograder bench -n 1000 --nbgrader 10 --class realistic""",
    "demo": """\
examples:
  python -m autograder demo
  python -m autograder demo --seed 0 --device cpu""",
    "checks": """\
examples:
  python -m autograder checks
  python -m autograder checks --rubric my-rubric.toml""",
    "audit": """\
examples:
  python -m autograder audit course/
  python -m autograder audit course/ --assignment mha --format json""",
    "variant": """\
examples:
  python -m autograder variant alice --output variants/alice --course-config nbgrader_config.py""",
    "package": """\
examples:
  python -m autograder package gradescope --output autograder.zip
  python -m autograder package student --output mha-kit
  python -m autograder package classroom --output ../mha-template --rubric my-rubric.toml""",
}


class _Parser(argparse.ArgumentParser):
    """Usage errors exit with status 2 and the usage line, as the contract says."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def version(pyproject: Path = PYPROJECT) -> str:
    """This package's version: from the checkout's pyproject.toml when the code runs from
    one (an installed copy of another checkout would report its own), else from the
    installed distribution's metadata, else "unknown"."""
    try:
        try:
            import tomllib
        except ModuleNotFoundError:                    # Python 3.10
            import tomli as tomllib
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        if project.get("name") == "mha-autograder" and project.get("version"):
            return str(project["version"])
    except (OSError, ValueError, ModuleNotFoundError):
        pass
    from importlib import metadata
    try:
        return metadata.version("mha-autograder")
    except metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Grade multi-head attention submissions against "
                     "the reference, each run isolated in a sandbox.", epilog=EXAMPLES[None])
    parser.add_argument("--version", action="version", version=f"{NAME} {version()}",
                        help="print the autograder's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser,
                                metavar="COMMAND")

    def command(name, summary, description=None):
        return sub.add_parser(name, help=summary, description=description or summary,
                              epilog=EXAMPLES[name])

    g = command("grade", "grade one submission (.py, .ipynb, or a folder holding one)")
    g.add_argument("submission", metavar="SUBMISSION",
                   help="a .py module, an .ipynb notebook (its graded cells) or a folder "
                        "holding one (mha.py or mha.ipynb, else its only .py or .ipynb)")
    from .writers import HELP as FORMATS         # the writers' registry
    g.add_argument("--format", choices=tuple(FORMATS), default="text",
                   help="; ".join(f"{name}: {text}" for name, text in FORMATS.items()))
    g.add_argument("--output", metavar="FILE",
                   help="write the report to FILE (whole or not at all) instead of stdout")
    _common(g)
    g.add_argument("--public-only", action="store_true",
                   help="run only the public checks (the instructor's and CI's view of what "
                        "students can see); by default the hidden checks run too")
    _student(g)

    b = command("batch", "grade every submission below DIR",
                "Grade every submission below DIR (an nbgrader course or its submitted/ "
                "folder, a flat folder of files, or one folder per student), resumably.")
    b.add_argument("dir", metavar="DIR", help="the folder that holds the submissions")
    b.add_argument("--output", required=True, metavar="OUT",
                   help="folder for one result per submission, failures/, grades.csv and "
                        "batch.json (its seed, rubric and device)")
    _common(b)
    b.add_argument("--workers", type=int, metavar="N",
                   help="submissions graded at once (default: the number of cores)")
    b.add_argument("--assignment", metavar="NAME",
                   help="in an nbgrader submitted/ tree, grade only this assignment")
    _student(b, one=False)
    b.add_argument("--executor", choices=("local", "dask"), default="local",
                   help="where to grade: on this machine (local, default) or on a Dask "
                        "distributed cluster (dask, needs --scheduler)")
    b.add_argument("--scheduler", metavar="ADDRESS",
                   help="with --executor dask: the scheduler's address, tls://HOST:8786 (its "
                        "certificates: the three options below; see README 'Scale-out')")
    b.add_argument("--tls-ca-file", metavar="FILE",
                   help="with a tls:// scheduler: the CA certificate that signed the "
                        "scheduler's, the workers' and this client's certificates")
    b.add_argument("--tls-cert", metavar="FILE", help="with a tls:// scheduler: this client's "
                   "certificate (PEM; it may hold the key too)")
    b.add_argument("--tls-key", metavar="FILE", help="with a tls:// scheduler: this client's "
                   "private key (PEM), if not in --tls-cert")
    b.add_argument("--insecure-scheduler", action="store_true",
                   help="allow a tcp:// scheduler without authentication (anyone who reaches "
                        "it can run code on the workers): only on a network only you reach")

    r = command("report", "a class report (an HTML page with plots, and PNGs) from a batch's "
                "output")
    r.add_argument("out", metavar="OUT", help="a batch's --output folder")
    r.add_argument("--student", metavar="KEY",
                   help="whose attention maps to draw (a result's key, as in grades.csv; "
                        "default: the best score)")
    r.add_argument("--output", metavar="FOLDER",
                   help="folder for index.html and the PNGs (default: OUT/report)")

    n = command("bench", "time batch against nbgrader autograde on generated notebooks")
    n.add_argument("-n", "--count", type=int, default=20, metavar="N",
                   help="notebooks to build and grade with batch (default 20)")
    n.add_argument("--nbgrader", type=int, metavar="K",
                   help="grade only the first K with nbgrader and extrapolate to N "
                        "(default: all N; 0 skips nbgrader)")
    n.add_argument("--workers", type=int, metavar="N",
                   help="batch's workers (default: the number of cores)")
    n.add_argument("--keep", metavar="FOLDER",
                   help="build in this empty folder and keep it (default: a temporary one, "
                        "removed afterwards)")
    n.add_argument("--class", dest="kind", choices=("classic", "realistic"), default="classic",
                   help="classic: half correct, half one classic bug or the stub (default); "
                        "realistic: the real-style files of tests/submissions/multi in turn, "
                        "most with several mistakes (needs a clone of the repository)")

    d = command("demo", "grade the bundled example submissions and say what each one got")
    _common(d)

    c = command("checks", "list every check with its group, points, visibility and purpose")
    c.add_argument("--rubric", metavar="FILE", help=RUBRIC_HELP)

    a = command("audit", "re-grade every submission of an nbgrader course outside nbgrader "
                "and list the students whose gradebook score differs")
    a.add_argument("course", metavar="COURSE_DIR",
                   help="the course's root folder (the one holding nbgrader_config.py)")
    a.add_argument("--assignment", metavar="NAME", help="audit only this assignment")
    a.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: a summary for a terminal (default); json: one object")
    a.add_argument("--device", choices=DEVICES,
                   help="where the module runs (default: the course config's "
                        "TrustedGrades.device)")
    a.add_argument("--seed", type=int, metavar="N",
                   help="the seed of the random inputs (default: the course config's "
                        "TrustedGrades.seed)")
    a.add_argument("--rubric", metavar="FILE",
                   help="a rubric TOML file (default: the course config's TrustedGrades.rubric)")

    k = command("package", "build the student kit, the Gradescope autograder zip or the "
                "GitHub Classroom template repository")
    k.add_argument("target", choices=("student", "gradescope", "classroom"), metavar="TARGET",
                   help="student: the kit to hand out (notebook, stub, public tests); gradescope: "
                        "the zip to upload; classroom: the template repository (the kit plus a workflow)")
    k.add_argument("--output", required=True, metavar="PATH",
                   help="gradescope: the zip to write; student, classroom: a new or empty "
                        "folder (--force replaces one in use)")
    k.add_argument("--skipped", choices=("award", "withhold", "rescale"), default="award",
                   help="gradescope: what the bundle's rubric does with a check that cannot run "
                        "there (device.cuda: Gradescope has no GPU); award (default) keeps every "
                        "score a whole number")
    k.add_argument("--force", action="store_true",
                   help="student, classroom: replace a folder that is not empty (the new one is "
                        "written beside it first, then put in its place)")
    k.add_argument("--questions", choices=("exclude", "include"), default="exclude",
                   help="gradescope: the notebook's numeric questions (section 7): exclude "
                        "(default) leaves them out, so a mha.py and a mha.ipynb upload are both "
                        "graded out of the code's points; include asks them of every upload (a "
                        "mha.py is reported as not answering them, 0 of their points)")
    k.add_argument("--no-pin-check", action="store_true",
                   help="gradescope: do not ask the package index whether the pins resolve for "
                        "Python 3.10 and 3.12 (Ubuntu 22.04 and 24.04)")
    k.add_argument("--rubric", metavar="FILE", help=RUBRIC_HELP)

    v = command("variant", "write students' released notebooks, each with their own numbers")
    v.add_argument("student", metavar="STUDENT", nargs="*",
                   help="a student's id (as nbgrader knows it); several: one folder each")
    v.add_argument("--students", metavar="FILE",
                   help="a file of student ids, one a line (a CSV's first column; # comments): "
                        "every student's notebook in one run, DIR/<id>/mha.ipynb")
    v.add_argument("--output", required=True, metavar="DIR",
                   help="folder to write mha.ipynb into (one student), or one folder per "
                        "student into (several, or --students)")
    _student(v, one=False)
    return parser


RUBRIC_HELP = "a rubric TOML file (default: autograder/rubric.toml)"


def _student(p, one: bool = True) -> None:
    """Per-student variants (autograder.variants): whose numbers, and the course's secret."""
    if one:
        p.add_argument("--student", metavar="ID",
                       help="grade against this student's variant (their numbers and hidden "
                            "inputs); needs the course's secret")
    p.add_argument("--course-config", metavar="FILE",
                   help="the course's nbgrader_config.py, for its TrustedGrades.variant_secret "
                        "(default: $MHA_VARIANT_SECRET)")


def _common(p) -> None:
    p.add_argument("--device", choices=DEVICES, default="auto",
                   help="where the module runs: auto (CUDA when present, default), cpu, or "
                        "cuda (an error where there is none)")
    p.add_argument("--seed", type=int, metavar="N",
                   help="the seed of the random inputs; give an earlier run's seed to replay "
                        "its inputs (default: a new random seed, printed with the result)")
    p.add_argument("--rubric", metavar="FILE", help=RUBRIC_HELP)


def command() -> int:
    """The command line as a program runs it (``python -m autograder``, ``mha-autograder``):
    ``main``, then the heap frozen, since the process ends. The interpreter's last garbage
    collection would walk every object still alive (some 300,000, most of them torch's) only
    for the system to free them all, 0.5 to 1 s of every command. Frozen objects are left out
    of it; the rest of the exit (atexit handlers, flushing and closing files) is unchanged."""
    status = main()
    gc.freeze()
    return status


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status = _run(args)
        sys.stdout.flush()          # a closed pipe shows here, not at interpreter exit
        return status
    except UsageError as e:
        _say(f"error: {e}")
        return EXIT_USAGE
    except GraderFailure as e:
        _say(f"the grader failed: {e}")
        return EXIT_GRADER
    except KeyboardInterrupt:
        _say("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        if not _stdout_closed():
            return _bug()
        # The reader went away (`... | head -1`). As Python's documentation on SIGPIPE
        # advises: point stdout at devnull so that the flush at exit cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_PIPE_CLOSED
    except Exception:               # noqa: BLE001 — a bug in the grader, whatever its type
        return _bug()


def _run(args) -> int:
    if args.command in ("grade", "demo") or getattr(args, "executor", None) == "local":
        from .sandbox import spawn
        spawn.prestart()          # the zygote imports torch while this process does too
    from . import commands
    return commands.COMMANDS[args.command](args)


def _bug() -> int:
    """Anything a command did not raise on purpose: a short line, then the traceback."""
    kind, error, _ = sys.exc_info()
    _say(f"the grader failed (a bug in the autograder {version()}): {kind.__name__}: {error}\n"
         "Please report it with the traceback below.\n" + traceback.format_exc().rstrip())
    return EXIT_GRADER


def _say(message: str) -> None:
    try:
        print(message, file=sys.stderr, flush=True)
    except (OSError, ValueError):       # stderr closed too: the status still tells
        pass


def _stdout_closed() -> bool:
    """Whether stdout is a pipe (or socket) nobody reads any more: poll reports an error on
    its write end. A BrokenPipeError from anywhere else (a socket of the grader's) is a bug."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return True     # no usable stdout at all: nothing more can be written there
