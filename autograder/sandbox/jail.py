"""The sandbox's view of the machine: a new root holding only what the interpreter needs.

Allow-list, not deny-list: the new root is an empty read-only tmpfs into which the system
folders, Python's own folders and the folders of the libraries already loaded are bound
read-only. The grader's checkout, the reference, the hidden checks, other submissions and
the home folders are simply not there. Each sandbox then gets its own /tmp and /dev/shm,
a fresh /proc (its own PID namespace: it sees only its own processes), and no network.

As root, the zygote builds this root once (``build``) in a private mount namespace and
every sandbox copies it with ``unshare(CLONE_NEWNS)`` and enters it (``enter``): a few
mounts per submission. Without root the sandbox builds it itself inside a user namespace.

Imported inside the zygote and the sandbox as the top-level module ``jail``: it imports
nothing from the grader.
"""
from __future__ import annotations

import ctypes
import os
import platform
import sys

libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
MNT_DETACH = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(platform.machine())
SYSTEM = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/etc", "/sys")
DEVICES = ("null", "zero", "full", "random", "urandom")
ROOT = "/tmp"     #: where the new root is built: over /tmp, in a private mount namespace


class JailError(Exception):
    """A step of the isolation failed; the message names it."""


def mount(source, target, fstype=None, flags=0, data=None) -> None:
    enc = (lambda s: s.encode() if s else None)
    if libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        raise JailError(f"mount {target}: {os.strerror(ctypes.get_errno())}")


def unshare(flags: int) -> bool:
    return libc.unshare(flags) == 0


def _inside(path: str, folders) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def runtime_paths(hide) -> list[str]:
    """Real folders the interpreter needs, parents before children, none inside `hide`."""
    found = set(SYSTEM) | {sys.prefix, sys.base_prefix, sys.exec_prefix}
    found |= {p for p in sys.path if p.startswith("/")}
    found |= {p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":")    # e.g. CUDA's
              if p.startswith("/")}
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/") and not fields[5].startswith(
                    ("/dev/", "/proc/", "/memfd:")):
                found.add(os.path.dirname(fields[5].rstrip("\n").removesuffix(" (deleted)")))
    keep: list[str] = []
    hide = [os.path.realpath(h) for h in hide]
    for path in sorted({os.path.realpath(p) for p in found if os.path.exists(p)}):
        if os.path.isdir(path) and path != "/" and not _inside(path, hide) \
                and not _inside(path, keep):
            keep.append(path)
    return keep


def _symlinks(paths) -> dict[str, str]:
    """Host symlinks met on the way to each path (e.g. /lib -> usr/lib), to mirror them."""
    links = {}
    for path in paths:
        current = ""
        for part in os.path.abspath(path).split("/")[1:]:
            current += "/" + part
            if os.path.islink(current):
                links[current] = os.readlink(current)
                current = os.path.realpath(current)
    return links


def _bind_readonly(source: str, target: str) -> None:
    mount(source, target, None, MS_BIND | MS_REC)
    mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _readonly_submounts(root: str) -> None:
    """Bind mounts of folders bring their sub-mounts along writable; make them read-only."""
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for point in points:
        # device nodes are left alone: a remount adding nodev would make them unusable
        if point.startswith(root + "/") and not point.startswith(root + "/dev/"):
            try:
                mount(None, point, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
            except JailError:
                pass                  # e.g. proc or sysfs sub-mounts that refuse: not writable to us


def build(hide) -> str:
    """Cover /tmp (in a private mount namespace) with a read-only root holding the runtime.

    Sources are opened before /tmp is covered, so a runtime kept under /tmp still binds."""
    paths = runtime_paths(hide)
    wanted = list(paths) + list(sys.path) + [sys.prefix, sys.executable] + list(SYSTEM)
    links = {k: v for k, v in _symlinks(wanted).items()
             if not _inside(k, paths) and os.path.realpath(k) != k}
    devices = [d for d in os.listdir("/dev") if d in DEVICES or d.startswith("nvidia")]
    sources = {p: os.open(p, os.O_PATH) for p in paths + [f"/dev/{d}" for d in devices]}
    try:
        mount("none", ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
        for link, text in sorted(links.items()):
            os.makedirs(ROOT + os.path.dirname(link), mode=0o755, exist_ok=True)
            if not os.path.lexists(ROOT + link):
                os.symlink(text, ROOT + link)
        for folder in ("tmp", "proc", "dev/shm"):
            os.makedirs(f"{ROOT}/{folder}", mode=0o755, exist_ok=True)
        for path, fd in sources.items():
            if path.startswith("/dev/") and not os.path.isdir(path):    # a device node
                open(ROOT + path, "w").close()
                mount(f"/proc/self/fd/{fd}", ROOT + path, None, MS_BIND)
            elif path.startswith("/dev/"):                              # e.g. nvidia-caps/
                os.makedirs(ROOT + path, mode=0o755, exist_ok=True)
                mount(f"/proc/self/fd/{fd}", ROOT + path, None, MS_BIND | MS_REC)
            else:
                os.makedirs(ROOT + path, mode=0o755, exist_ok=True)
                _bind_readonly(f"/proc/self/fd/{fd}", ROOT + path)
    finally:
        for fd in sources.values():
            os.close(fd)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{ROOT}/dev/{name}")
    _readonly_submounts(ROOT)
    _hide(ROOT, hide)
    mount(None, ROOT, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    return ROOT


def _hide(root: str, hide) -> list[str]:
    """Cover what must stay unseen but lies inside a bound folder. Returns what failed."""
    failed = []
    for path in hide:
        inner = root + os.path.realpath(path)
        try:
            if os.path.isdir(inner):
                mount("none", inner, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=000")
            elif os.path.exists(inner):
                mount("/dev/null", inner, None, MS_BIND)
        except JailError:
            failed.append(path)
    return failed


def private_namespace() -> None:
    """A mount namespace of our own whose changes nobody else sees."""
    if not unshare(CLONE_NEWNS):
        raise JailError(f"no mount namespace: {os.strerror(ctypes.get_errno())}")
    mount(None, "/", None, MS_REC | MS_PRIVATE)


def enter(root: str, *, owner: str, tmp_bytes: int, own_proc: bool, hide=()) -> list[str]:
    """In the sandbox, in a fresh copy of the mount namespace: private /tmp, /dev/shm and
    /proc, then pivot into `root`. Returns notes about what could not be done."""
    notes = []
    mount("none", f"{root}/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
          f"size={tmp_bytes},mode=0700{owner}")
    mount("none", f"{root}/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
          f"size={min(tmp_bytes, 16 << 20)},mode=0700{owner}")
    if own_proc:
        mount("proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    else:
        mount("/proc", f"{root}/proc", None, MS_BIND | MS_REC)
        notes.append("reduced isolation: the submission can list the machine's processes "
                     "(no PID namespace)")
    failed = _hide(root, hide)
    if failed:
        notes.append("reduced isolation: could not hide " + ", ".join(failed))
    os.chdir(root)
    if SYS_PIVOT_ROOT and libc.syscall(SYS_PIVOT_ROOT, b".", b".") == 0:
        libc.umount2(b".", MNT_DETACH)
    else:
        os.chroot(".")
    os.chdir("/tmp")
    return notes
