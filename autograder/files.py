"""Writing files whole or not at all, for every command that leaves results behind."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str, text: str) -> None:
    """Write the whole file or nothing: a temporary file, then os.replace, so a reader (or a
    rerun after a crash) never sees half a result."""
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
