"""How much the isolation costs: grade N submissions through one Grader and time it.

    python -m autograder.sandbox_bench --n 20 [--submission FILE ...] [--one-core]

Prints the fixed start-up cost (the grader's imports, the zygote's start, and the first
submission, which also fills the reference cache) and the marginal cost of each further
submission, as wall-clock time and as CPU time of every process involved (the grader, the
zygote and the sandboxes it forked), so the figure means "on one core" even where other
cores help. Then the cost of the isolation alone: a sandbox forked, jailed, given the
submission, asked one probe and killed. ``--one-core`` pins everything to one CPU first.
Not a test: it asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

T0 = time.perf_counter()


def _cpu_of(pid: int) -> float:
    """utime + stime of a process, of its children it has reaped and of its live
    descendants, in seconds (without root the zygote runs as its first process's child)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return 0.0
    own = sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return own + sum(_cpu_of(child) for child in children)


def _isolation_only(grader, source: bytes, n: int) -> tuple[float, float]:
    """(wall, CPU) per sandbox that only imports the submission and answers one probe."""
    from . import api
    from .sandbox.host import Sandbox
    config = {"hide": grader.hide, "limits": dict(api.LIMITS, RLIMIT_AS=api.MEMORY),
              "memory_bytes": api.MEMORY, "host_uid": os.getuid(), "host_gid": os.getgid()}
    zygote = grader.zygote.proc.pid
    cpu0, t = time.process_time() + _cpu_of(zygote), time.perf_counter()
    for _ in range(n):
        box = Sandbox(grader.zygote, source, "mha.py", config)
        box.probe("call", group="bench", fn="head_weight_shape", args=[8, 8, 2])
        box.close()
    wall = (time.perf_counter() - t) / n
    time.sleep(0.5)
    return wall, (time.process_time() + _cpu_of(zygote) - cpu0) / n


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.sandbox_bench")
    parser.add_argument("--n", type=int, default=20, help="submissions after the first")
    parser.add_argument("--submission", action="append",
                        help="file(s) to grade in turn (default: the reference solution, "
                             "so every probe of the full hidden suite runs)")
    parser.add_argument("--one-core", action="store_true", help="pin to one CPU first")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.one_core:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    from .sandbox import spawn
    spawn.prestart()                                    # as the command line does
    from . import api                                   # imports torch
    imported = time.perf_counter()
    files = args.submission or [str(api.PROJECT / "solutions" / "mha.py")]
    grader = api.Grader(seed=args.seed, device="cpu")
    try:
        grader.zygote.wait_ready()
        ready = time.perf_counter()
        first = grader.grade(files[0])
        started = time.perf_counter()
        zygote = grader.zygote.proc.pid
        walls, cpus = [], []
        for i in range(args.n):
            cpu0 = time.process_time() + _cpu_of(zygote)
            t = time.perf_counter()
            report = grader.grade(files[i % len(files)])
            walls.append(time.perf_counter() - t)
            time.sleep(0.2)                             # let the zygote reap the sandbox
            cpus.append(time.process_time() + _cpu_of(zygote) - cpu0)
        alone = _isolation_only(grader, Path(files[0]).read_bytes(), args.n)
    finally:
        grader.close()
    checks = len(first.results)
    print(f"graded {args.n + 1} submissions ({', '.join(Path(f).name for f in files)}), "
          f"{checks} checks each, last score {report.score:g}/{report.max_score:g}")
    print(f"start-up: {started - T0:.2f} s wall = grader imports {imported - T0:.2f} s"
          f" + zygote ready {ready - imported:.2f} s + first submission {started - ready:.2f} s")
    print(f"marginal per submission: wall {statistics.mean(walls):.3f} s mean, "
          f"{statistics.median(walls):.3f} s median, {min(walls):.3f} s min; "
          f"CPU (grader + zygote + sandbox) {statistics.mean(cpus):.3f} s mean, "
          f"{statistics.median(cpus):.3f} s median")
    print(f"isolation alone (fork, jail, import, one probe, kill): wall {alone[0]:.3f} s, "
          f"CPU {alone[1]:.3f} s per submission")
    print(f"cores available: {len(os.sched_getaffinity(0))}"
          + (" (pinned with --one-core)" if args.one_core else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
