"""Grades attack fixtures with one Grader and writes what it saw as JSON: run by
``test_nonroot`` as root and, through ``setpriv``, as an unprivileged user.

    python tests/nonroot_driver.py OUT.json MEMORY_BYTES BATCH_FILE,... FILE...

Each FILE is graded alone; the BATCH_FILEs are graded at once, in threads sharing the
Grader (as ``autograder batch`` does). A probe sandbox reports what it can see and do.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autograder import api  # noqa: E402
from autograder.sandbox.host import Sandbox  # noqa: E402

PROBE = textwrap.dedent('''
    import ctypes, os
    def head_weight_shape(*a):
        status = {l.split(":")[0]: l.split(":", 1)[1].strip() for l in open("/proc/self/status")
                  if ":" in l}
        libc = ctypes.CDLL(None, use_errno=True)
        umount = libc.umount2(b"/usr", 2)
        remount = libc.mount(None, b"/usr", None, 32 | 4096, None)
        shm = libc.shmget(0, ctypes.c_size_t(1 << 20), 0o1000 | 0o600)
        try:
            os.memfd_create("probe")
            memfd = True
        except OSError:
            memfd = False
        try:
            import socket
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
            sock = True
        except OSError:
            sock = False
        # io_uring_setup(1, NULL): EFAULT where the call is allowed, EPERM where refused (a
        # ring's IORING_OP_SOCKET would make sockets without the socket call)
        uring = libc.syscall(425, 1, None)
        uring = "refused" if uring == -1 and ctypes.get_errno() == 1 else "allowed"
        with open("/proc/self/cgroup") as f:
            groups = f.read()
        return repr({"CapEff": int(status["CapEff"], 16), "CapPrm": int(status["CapPrm"], 16),
                     "NoNewPrivs": int(status["NoNewPrivs"]), "uid": os.getuid(),
                     "ppid": os.getppid(), "procs": sorted(p for p in os.listdir("/proc")
                                                          if p.isdigit()),
                     "umount": umount, "remount": remount, "shm": shm, "memfd": memfd,
                     "socket": sock, "io_uring": uring,
                     "cgroup": "autograder-" in groups})
''')


def report(grader, path: str) -> dict:
    r = grader.grade(path)
    return {"score": r.score, "max": r.max_score, "notes": list(r.notes),
            "feedback": [f"{x.name}: {x.feedback}" for x in r.results]}


def probe(grader) -> dict:
    config = {"hide": grader.hide, "limits": dict(api.LIMITS, RLIMIT_AS=grader.memory),
              "memory_bytes": grader.memory, "host_uid": os.getuid(), "host_gid": os.getgid(),
              "rules": False}                # the probe reads the jail itself: no code rules
    box = Sandbox(grader.zygote, PROBE.encode(), "mha.py", config, import_timeout=60,
                  probe_timeout=30)
    try:
        seen = box.probe("call", group="g", fn="head_weight_shape", args=[])
        return {"notes": box.notes, "seen": seen.get("value")}
    finally:
        box.close()


def main() -> None:
    out, memory, batch, files = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    # without the code rules: these fixtures try the isolation itself (the rules would refuse
    # most of them before they act; test_adversarial grades them both ways)
    grader = api.Grader(seed=4321, memory_bytes=memory, rules=False)
    grader.timeouts.update({"import": 60.0, "probe": 30.0, "group": 60.0, "submission": 200.0})
    result = {"uid": os.getuid(), "reports": {}, "batch": {}}
    try:
        result["probe"] = probe(grader)
        for path in files:
            result["reports"][Path(path).name] = report(grader, path)
        together = [p for p in batch.split(",") if p]
        with concurrent.futures.ThreadPoolExecutor(len(together) or 1) as pool:
            for path, r in zip(together, pool.map(lambda p: report(grader, p), together)):
                result["batch"][path] = r
    finally:
        grader.close()
    Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
