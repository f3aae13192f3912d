"""Which live processes belong to a zygote's sandboxes, read from /proc."""
from __future__ import annotations

import os

UID_BASE = 1_700_000_000     # zygote.UID_BASE: sandbox users are numbered from here


def sandbox_processes(zygote) -> dict[int, int]:
    """pid -> uid of the live processes run by this zygote's sandbox users (zygote.fork
    numbers them from UID_BASE + (zygote pid % 100000) * 1000; other zygotes use other ranges)."""
    first = UID_BASE + (zygote.proc.pid % 100_000) * 1000
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = int(next(line for line in f if line.startswith("Uid:")).split()[1])
        except (OSError, StopIteration, ValueError):
            continue
        if first <= uid < first + 1000:
            found[int(pid)] = uid
    return found
