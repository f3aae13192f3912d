"""Grade the multi-mistake fixtures and say, per file, which codes the grader named.

    python tests/multi_report.py [--seeds N] [--seed S]

Every file in tests/submissions/multi/ starts with ``# CODES: a, b`` (exactly the TAXONOMY codes
of the mistakes it holds; empty for a correct file) and ``# STYLE: ...``. Each file is graded
in-process by one ``autograder.api.Grader(seed=S)``; the report gives its score, the expected
and found codes, what is missing and what is extra, then the totals. With ``--seeds N`` every
file is graded under the seeds S, S+1, ..., S+N-1 (one Grader per seed) and the files whose
codes or score (to 0.01) differ between seeds are listed. A script, not a test: the test of
the same fixtures is tests/test_multi.py.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
FOLDER = HERE / "submissions" / "multi"


def fixtures(folder: Path = FOLDER) -> list[Path]:
    return sorted(folder.glob("*.py"))


def header(path: Path) -> tuple[set[str], str]:
    """(the codes named by ``# CODES:``, the ``# STYLE:`` text) of one fixture."""
    text = path.read_text(encoding="utf-8")
    codes = re.search(r"^# CODES:(.*)$", text, re.M)
    style = re.search(r"^# STYLE:(.*)$", text, re.M)
    if codes is None:
        raise SystemExit(f"{path.name}: no '# CODES:' line")
    found = {c.strip() for c in codes.group(1).split(",") if c.strip()}
    return found, style.group(1).strip() if style else ""


def grade_all(paths: list[Path], seed: int) -> dict[str, tuple[float, set[str]]]:
    """{file name: (score, found codes)} under one Grader of this seed."""
    from autograder.api import Grader
    grader = Grader(seed=seed, device="cpu")
    try:
        out = {}
        for path in paths:
            report = grader.grade(path)
            out[path.name] = (report.score, {d.code for d in report.diagnoses})
        return out
    finally:
        grader.close()


def show(paths: list[Path], results: dict[str, tuple[float, set[str]]], seed: int) -> None:
    right = present = named = false = 0
    print(f"seed {seed}: {len(paths)} files in {FOLDER.relative_to(PROJECT)}")
    for path in paths:
        expected, _ = header(path)
        score, found = results[path.name]
        missing, extra = expected - found, found - expected
        right += not missing and not extra
        present += len(expected)
        named += len(expected & found)
        false += len(extra)
        verdict = "ok" if not missing and not extra else "WRONG"
        print(f"\n{path.name}  score {score:.2f}  [{verdict}]")
        print(f"  expected: {', '.join(sorted(expected)) or '-'}")
        print(f"  found:    {', '.join(sorted(found)) or '-'}")
        print(f"  missing:  {', '.join(sorted(missing)) or '-'}")
        print(f"  extra:    {', '.join(sorted(extra)) or '-'}")
    print(f"\nTOTAL: files fully right {right}/{len(paths)}; codes found {named}/{present}; "
          f"false codes {false}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=1, help="grade under this many seeds")
    parser.add_argument("--seed", type=int, default=1, help="the first seed (default 1)")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    sys.path.insert(0, str(PROJECT))
    paths = fixtures()
    if not paths:
        raise SystemExit(f"no fixtures in {FOLDER}")
    started = time.monotonic()
    runs = {}
    for seed in range(args.seed, args.seed + args.seeds):
        runs[seed] = grade_all(paths, seed)
    show(paths, runs[args.seed], args.seed)
    if args.seeds > 1:
        print(f"\nACROSS SEEDS {args.seed}..{args.seed + args.seeds - 1}:")
        unstable = 0
        for path in paths:
            seen = {seed: (round(r[path.name][0], 2), tuple(sorted(r[path.name][1])))
                    for seed, r in runs.items()}
            if len(set(seen.values())) > 1:
                unstable += 1
                print(f"  {path.name} differs:")
                for seed, (score, codes) in seen.items():
                    print(f"    seed {seed}: score {score:.2f}  codes {', '.join(codes) or '-'}")
        print(f"  {unstable} of {len(paths)} files differ between seeds")
    print(f"\n({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
