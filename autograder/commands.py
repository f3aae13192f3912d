"""What each command does, on top of the API. No grading logic here."""
from __future__ import annotations

import importlib.util
import re
import sys
import textwrap
from pathlib import Path

from . import api, integrity, scoring, submission, variants
from .errors import EXIT_GRADER, EXIT_INTERRUPTED, EXIT_OK, GraderFailure, UsageError
from .files import write_atomic
from .sandbox.host import GraderError
from .writers import WRITERS

__all__ = ["COMMANDS", "GraderFailure", "UsageError"]

#: ``checks``: purposes are wrapped to this width, never cut
WIDTH = 100


def _grader(args, **extra) -> api.Grader:
    """The Grader the options ask for; a rubric that does not load, or ``--device cuda``
    without CUDA (the Grader raises UsageError itself), is a usage error."""
    try:
        return api.Grader(rubric=args.rubric, device=args.device, seed=args.seed, **extra)
    except scoring.RubricError as e:
        raise UsageError(str(e)) from None
    except GraderError as e:                 # the sandbox's interpreter could not start
        raise GraderFailure(str(e)) from None


def grade(args) -> int:
    if not Path(args.submission).exists():
        raise UsageError(f"{args.submission}: no such file or folder")
    variant = _variant(args, args.student) if args.student is not None else None
    grader = _grader(args, public_only=args.public_only)
    try:
        with integrity.guard():
            report = grader.grade(args.submission, variant)
    except submission.LoadError as e:
        raise UsageError(str(e)) from None
    except (GraderError, integrity.TamperedError) as e:
        raise GraderFailure(str(e)) from None
    finally:
        grader.close()
    text = WRITERS[args.format](report)
    if args.output:
        write_atomic(args.output, text)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _secret(args) -> str:
    try:
        return variants.secret_from(config=getattr(args, "course_config", None))
    except variants.SecretError as e:
        raise UsageError(str(e)) from None


def _variant(args, student: str) -> variants.Variant:
    """The student's variant; without the course's secret variants are off: say so."""
    if not student.strip():
        raise UsageError("--student needs a student id")
    secret = _secret(args)
    if not secret:
        print(f"note: no course secret (--course-config, or ${variants.ENV}): {student} gets the "
              "default variant, the numbers of the generic release", file=sys.stderr)
    return variants.derive(student, secret)


def variant(args) -> int:
    """Write each student's released notebook: what generate_assignment gives, with their
    numbers. One STUDENT: DIR/mha.ipynb; several, or ``--students FILE``: DIR/<id>/mha.ipynb,
    all in one process (the figures drawn once), every id checked before anything is written."""
    from importlib.util import find_spec
    missing = [m for m in ("nbgrader", "matplotlib") if find_spec(m) is None]
    if missing:       # asked before the import, so an ImportError of a bug stays a bug
        raise UsageError(f"variant needs {' and '.join(missing)}: python -m pip install "
                         f"{' '.join(missing)}")
    students = list(args.student) + (_student_list(args.students) if args.students else [])
    if not students:
        raise UsageError("variant needs a STUDENT id, several, or --students FILE")
    if any(not s.strip() for s in students):
        raise UsageError("a student id is empty")
    bulk = len(students) > 1 or bool(args.students)
    if bulk:
        bad = [s for s in students if not re.fullmatch(r"[A-Za-z0-9_@+-][A-Za-z0-9._@+-]*", s)]
        if bad:
            raise UsageError(f"these ids cannot name a folder: {', '.join(map(repr, bad[:5]))} "
                             "(letters, digits and . _ @ + - only)")
        twice = sorted({s for s in students if students.count(s) > 1})
        if twice:
            raise UsageError(f"these ids are listed twice: {', '.join(twice[:5])}")
    from assignments import build
    import nbformat
    secret = _secret(args)
    if not secret:
        print(f"note: no course secret (--course-config, or ${variants.ENV}): every student "
              "gets the default variant, the numbers of the generic release", file=sys.stderr)
    for student in students:
        try:
            nb = build.release(variants.derive(student, secret))
        except build.BuildError as e:
            raise UsageError(str(e)) from None
        folder = Path(args.output) / student if bulk else Path(args.output)
        path = folder / build.narrative.NOTEBOOK_NAME
        write_atomic(str(path), nbformat.writes(nb) + "\n")
        print(path)
    return EXIT_OK


def _student_list(path) -> list[str]:
    """The ids of a roster file: one a line (a CSV's first column), blank lines and lines
    starting with # left out."""
    if not Path(path).is_file():
        raise UsageError(f"the student list {path} is not a file")
    lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    return [line.split(",")[0].strip() for line in lines
            if line.strip() and not line.lstrip().startswith("#")]


def batch(args) -> int:
    from . import batch as batching, executors
    from .progress import Progress
    if args.executor == "dask" and not args.scheduler:
        raise UsageError("--executor dask needs --scheduler ADDRESS (tls://HOST:8786)")
    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers must be at least 1")
    progress = Progress()
    try:
        summary = batching.run(
            args.dir, args.output, seed=args.seed, rubric=args.rubric, device=args.device,
            assignment=args.assignment, progress=progress,
            secret=_secret(args) if args.course_config else None,     # else the course's own
            executor=lambda options: executors.make(
                args.executor, options, workers=args.workers, scheduler=args.scheduler,
                tls=(args.tls_ca_file, args.tls_cert, args.tls_key),
                insecure=args.insecure_scheduler))
    except (batching.BatchError, scoring.RubricError) as e:
        raise UsageError(str(e)) from None
    except integrity.TamperedError as e:
        raise GraderFailure(str(e)) from None
    except KeyboardInterrupt:
        print("interrupted: what was graded is kept; run the same command again to grade the "
              "rest", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        progress.finish()
    print(batching.describe(summary, args.output), file=sys.stderr)
    return EXIT_GRADER if summary.failures else EXIT_OK


def report(args) -> int:
    from . import classreport
    try:
        index = classreport.build(args.out, student=args.student, output=args.output)
    except classreport.ReportError as e:
        raise UsageError(str(e)) from None
    print(index)
    return EXIT_OK


def bench(args) -> int:
    from . import bench as benchmark
    if args.count < 1:
        raise UsageError("--count must be at least 1")
    return benchmark.main(args.count, nbgrader=args.nbgrader, workers=args.workers,
                          keep=args.keep, kind=args.kind)


def demo(args) -> int:
    from . import demo as demo_module
    grader = _grader(args)
    try:
        with integrity.guard():
            demo_module.run(grader)
    except (GraderError, integrity.TamperedError) as e:
        raise GraderFailure(str(e)) from None
    finally:
        grader.close()
    return EXIT_OK


def list_checks(args) -> int:
    """One line per check (name, group, points, public or hidden), then its whole purpose,
    wrapped and indented: a purpose is never cut."""
    from . import checks
    every = checks.load_all()
    try:
        rubric = scoring.load_rubric(args.rubric, known=set(every))
    except scoring.RubricError as e:
        raise UsageError(str(e)) from None
    width = max(len(name) for name in every)
    for c in every.values():
        flag = "hidden" if c.hidden else "public"
        print(f"{c.name:<{width}}  {c.group:<9} {rubric.points.get(c.name, 0):>5g} points  {flag}")
        for line in textwrap.wrap(purpose(c.doc), WIDTH - 4, break_long_words=False,
                                  break_on_hyphens=False):
            print(f"    {line}")
    return EXIT_OK


def purpose(doc: str) -> str:
    """A check's purpose: the first paragraph of its docstring, on one line."""
    first = doc.strip().split("\n\n")[0] if doc else ""
    return " ".join(first.split()) or "(no description)"


def package(args) -> int:
    if importlib.util.find_spec("nbformat") is None:   # asked before the import, as for variant
        raise UsageError("package needs nbformat: python -m pip install nbformat")
    from . import package as bundles
    try:
        if args.target == "gradescope":
            built = bundles.gradescope(args.output, rubric=args.rubric, skipped=args.skipped,
                                       questions=args.questions, check_pins=not args.no_pin_check)
        else:
            built = getattr(bundles, args.target)(args.output, rubric=args.rubric,
                                                  force=args.force)
    except bundles.PackageError as e:
        raise UsageError(str(e)) from None
    if args.target == "gradescope":
        print(f"wrote {built['path']} ({len(built['files'])} files). Upload it on Gradescope's "
              f"'Configure Autograder' page and set the assignment's autograder points to "
              f"{built['max_score']:g}. {built['pins']}")
    elif args.target == "student":
        print(f"wrote the student kit {built['path']}: {', '.join(built['files'])}. Hand it out "
              "as it is; students run `pytest` in it.")
    else:
        print(f"wrote the template repository {built['path']}: public tests worth "
              f"{built['max_score']:g} points. Push it to a repository marked as a template "
              "and pick it as the assignment's starter code in GitHub Classroom.")
    return EXIT_OK


def audit(args) -> int:
    import json
    if importlib.util.find_spec("nbgrader") is None:
        raise UsageError("audit reads an nbgrader gradebook and needs nbgrader: "
                         "python -m pip install nbgrader (or, in a checkout of the autograder, "
                         'python -m pip install -e ".[nbgrader]")')
    from . import audit as auditing
    if not Path(args.course).is_dir():
        raise UsageError(f"{args.course}: no such folder")
    try:
        with integrity.guard():
            result = auditing.run(args.course, seed=args.seed, rubric=args.rubric,
                                  device=args.device, assignment=args.assignment)
    except (auditing.AuditError, scoring.RubricError) as e:
        raise UsageError(str(e)) from None
    except (GraderError, integrity.TamperedError) as e:
        raise GraderFailure(str(e)) from None
    sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n" if args.format == "json"
                     else auditing.describe(result))
    return EXIT_GRADER if result.failures else EXIT_OK


COMMANDS = {"grade": grade, "batch": batch, "demo": demo, "checks": list_checks,
            "report": report, "bench": bench, "package": package, "audit": audit,
            "variant": variant}
