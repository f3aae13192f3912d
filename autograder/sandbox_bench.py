"""How much the isolation costs: grade N submissions through one Grader and time it.

    python -m autograder.sandbox_bench --n 20 [--submission FILE ...] [--one-core] [--profile]

Prints the fixed start-up cost (the grader's imports, the zygote's start, and the first
submission, which also fills the reference cache) and the marginal cost of each further
submission, as wall-clock time and as CPU time of every process involved (the grader, the
zygote and the sandboxes it forked), so the figure means "on one core" even where other
cores help. Then the cost of the isolation alone: a sandbox forked, jailed, given the
submission, asked one probe and killed. ``--one-core`` pins everything to one CPU first.

``--profile`` says where a submission's time goes, stage by stage (loading, the sandbox's
start and close, and each stage of ``api.STAGES``: the source reader, the checks, error
carried forward, the diagnoses, the prices, scoring, the notes), and
inside each, the grader's own work per check and per diagnosis apart from the round trips to
the sandbox per probe (a round trip's wall time is the sandbox's work plus the transport:
with ``--one-core`` that is CPU time). Exclusive times: a diagnosis's probe counts under the
probe, not twice. Not a test: it asserts nothing.
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


class _Profile:
    """Exclusive wall time per label, from a stack of the stages, checks, diagnoses and probes
    the grader enters (the instrumented functions are wrapped for this command only)."""

    def __init__(self):
        self.stack, self.mark = ["grader: other"], time.perf_counter()
        self.spent: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.inclusive: dict[str, float] = {}

    def _charge(self):
        now = time.perf_counter()
        top = self.stack[-1]
        self.spent[top] = self.spent.get(top, 0.0) + now - self.mark
        self.mark = now

    def enter(self, label: str):
        self._charge()
        self.stack.append(label)
        self.calls[label] = self.calls.get(label, 0) + 1

    def leave(self):
        self._charge()
        self.stack.pop()

    def timed(self, original, label):
        """``original``, its time charged to ``label`` (a string, or made from its arguments)."""
        def run(*args, **kwargs):
            what = label(*args, **kwargs) if callable(label) else label
            self.enter(what)
            began = self.mark
            try:
                return original(*args, **kwargs)
            finally:
                self.leave()
                self.inclusive[what] = self.inclusive.get(what, 0.0) + self.mark - began
        return run

    def wrap(self, owner, name: str, label):
        setattr(owner, name, self.timed(getattr(owner, name), label))

    def install(self):
        """Each stage of ``api.STAGES`` (and loading, the sandbox's start and close) labelled
        by name; inside them each check, diagnosis and probe round trip."""
        from . import api, diagnoses
        from .sandbox import host
        stage = "stage: "
        self.wrap(api.submission, "load", stage + "load the submission")
        self.wrap(api.Grader, "_sandbox", stage + "start the sandbox (fork, jail, import)")
        self.wrap(host.Sandbox, "close", stage + "close the sandbox")
        for group in ("BEFORE_SANDBOX", "IN_SANDBOX", "AFTER_SANDBOX"):
            setattr(api, group, tuple(self.timed(f, stage + f.__name__)
                                      for f in getattr(api, group)))
        self.wrap(api, "run_check", lambda check, *a, **k: "check " + check.name)
        self.wrap(diagnoses, "_attempt", lambda probe, what, *a, **k: what)
        self.wrap(host.Sandbox, "probe",
                  lambda box, name, group=None, **k: f"probe {group}/{name} (round trip)")

    def table(self, n: int) -> str:
        rows = sorted(self.spent.items(), key=lambda kv: -kv[1])
        total = sum(self.spent.values())
        probes = sum(v for k, v in self.spent.items() if k.startswith("probe "))
        stages = sorted((k for k in self.inclusive if k.startswith("stage: ")),
                        key=lambda k: -self.inclusive[k])
        lines = ["the stages of one submission (wall ms per submission, mean of "
                 f"{n}, each with what it called):"]
        lines += [f"  {self.inclusive[k] / n * 1e3:7.2f} ms  {k[len('stage: '):]}"
                  for k in stages]
        rest = sum(self.spent.values()) - sum(self.inclusive[k] for k in stages)
        lines.append(f"  {rest / n * 1e3:7.2f} ms  the rest (the grader's own loop)")
        lines += [f"where one submission's time goes (exclusive wall ms per submission, mean of "
                 f"{n}; total {total / n * 1e3:.1f} ms, of which round trips to the sandbox "
                 f"{probes / n * 1e3:.1f} ms in {sum(c for k, c in self.calls.items() if k.startswith('probe ')) / n:.0f} probes):"]
        for label, secs in rows:
            if secs / n >= 0.0002:
                lines.append(f"  {secs / n * 1e3:7.2f} ms  {self.calls.get(label, n) / n:6.1f}x  "
                             f"{label}")
        return "\n".join(lines)


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
    parser.add_argument("--profile", action="store_true",
                        help="say where the time goes: per stage, check, diagnosis and probe")
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
        profile = _Profile() if args.profile else None
        if profile:
            profile.install()
            profile.mark = time.perf_counter()
        walls, cpus = [], []
        for i in range(args.n):
            cpu0 = time.process_time() + _cpu_of(zygote)
            t = time.perf_counter()
            report = grader.grade(files[i % len(files)])
            walls.append(time.perf_counter() - t)
            time.sleep(0.2)                             # let the zygote reap the sandbox
            cpus.append(time.process_time() + _cpu_of(zygote) - cpu0)
            if profile:                                 # the pause is not the grader's
                profile.mark = time.perf_counter()
        where = profile.table(args.n) if profile else ""   # before the isolation runs
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
    if where:
        print(where)
    return 0


if __name__ == "__main__":
    sys.exit(main())
