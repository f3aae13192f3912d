"""Safe extraction of a submitted archive (.zip, .tar, .tar.gz, .tgz, .tar.bz2, .tar.xz).

Only regular .py and .ipynb files are written, each below the target folder and under a
size cap. Entries that would land outside it (``../x``, ``/etc/x``, ``C:\\x``), links,
devices and everything else are skipped, and the notes say so. Nothing is ever extracted
with ``extractall``, so no path, link or permission from the archive reaches the disk.
"""
from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path, PurePosixPath

SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
WANTED = (".py", ".ipynb")
MAX_ENTRIES = 2000
MAX_TOTAL = 64 << 20         #: bytes extracted from one archive, all files together


class ArchiveError(Exception):
    """The archive cannot be used; the message says why and what to do."""


def is_archive(path: Path) -> bool:
    return path.name.lower().endswith(SUFFIXES)


def _safe_name(name: str) -> PurePosixPath | None:
    """The entry's path below the target, or None if it would leave it."""
    name = name.replace("\\", "/")
    parts = PurePosixPath(name).parts
    if not parts or name.startswith("/") or ":" in parts[0] or ".." in parts:
        return None
    return PurePosixPath(*[p for p in parts if p not in ("", ".")])


def _entries(path: Path):
    """(name, kind, size, read) per entry; kind is "file", "dir" or "other"."""
    if path.name.lower().endswith(".zip"):
        try:
            archive = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError, ValueError) as e:
            raise ArchiveError(f"{path.name} is not a valid zip archive ({e}); make it again "
                               "and resubmit") from None
        with archive:
            for info in archive.infolist():
                mode = info.external_attr >> 16
                kind = ("dir" if info.is_dir() else
                        "other" if mode and (mode & 0o170000) not in (0, 0o100000) else "file")
                yield info.filename, kind, info.file_size, (lambda i=info: archive.open(i))
        return
    try:
        archive = tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError, ValueError, EOFError) as e:
        raise ArchiveError(f"{path.name} is not a valid tar archive ({e}); make it again "
                           "and resubmit") from None
    with archive:
        for member in archive:
            kind = "dir" if member.isdir() else "file" if member.isfile() else "other"
            yield member.name, kind, member.size, (lambda m=member: archive.extractfile(m))


def extract(path: Path, target: Path, *, max_file: int) -> list[str]:
    """Write the archive's .py/.ipynb files below `target`; returns notes on what was skipped."""
    if path.stat().st_size > MAX_TOTAL:
        raise ArchiveError(f"{path.name} is larger than {MAX_TOTAL >> 20} MiB; submit only your "
                           "mha.py (or the notebook)")
    notes, written, listed, count = [], 0, 0, 0
    try:
        for name, kind, size, open_entry in _entries(path):
            count, listed = count + 1, listed + max(size, 0)
            if count > MAX_ENTRIES or listed > 4 * MAX_TOTAL:
                raise ArchiveError(f"{path.name} holds too much (over {MAX_ENTRIES} entries or "
                                   f"{4 * MAX_TOTAL >> 20} MiB); submit only your mha.py")
            safe = _safe_name(name)
            if safe is None:
                notes.append(f"archive entry {name[:80]!r} was not extracted: it points outside "
                             "the archive's folder")
            elif kind == "other":
                notes.append(f"archive entry {name[:80]!r} was not extracted: links and special "
                             "files are not accepted")
            elif kind == "file" and safe.parts and safe.name.endswith(WANTED):
                written += _write(target, safe, open_entry, max_file, MAX_TOTAL - written, notes)
    except (zipfile.BadZipFile, tarfile.TarError, OSError, EOFError, ValueError,
            NotImplementedError, RuntimeError) as e:
        raise ArchiveError(f"{path.name} could not be read ({type(e).__name__}: {e}); make the "
                           "archive again and resubmit") from None
    return notes[:20]


def _write(target: Path, safe: PurePosixPath, open_entry, max_file: int, room: int,
           notes: list) -> int:
    """Write one entry (at most max_file bytes, within room); returns the bytes written."""
    with open_entry() as source:
        data = source.read(min(max_file, room) + 1)
    if len(data) > min(max_file, room):
        notes.append(f"archive entry {str(safe)[:80]!r} was not extracted: it is too large")
        return 0
    destination = target.joinpath(*safe.parts)
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(destination, "xb") as out:          # never through an existing file or link
            out.write(data)
    except FileExistsError:
        notes.append(f"archive entry {str(safe)[:80]!r} is listed twice; the first was kept")
        return 0
    return len(data)
