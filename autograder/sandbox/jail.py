"""The sandbox's view of the machine: a new root holding only what the interpreter needs.

Allow-list, not deny-list: the new root is an empty read-only tmpfs into which the system
folders (``/usr``, ``/lib``...), a few files of ``/etc`` (``ETC``: the loader's cache, the
time zone, the user database), Python's own folders (those on its path and its binary's,
never its whole prefix, whose ``etc/jupyter`` may hold a course's configuration) and the
folders of the libraries already loaded are bound read-only. The grader's checkout, the
reference, the hidden checks, other submissions, the home folders and every place Jupyter
and nbgrader read configuration from (hidden on top, by the grader: ``spawn``) are simply
not there. Each sandbox then gets its own /tmp and /dev/shm,
a fresh /proc (its own PID namespace: it sees only its own processes), and no network.

The zygote builds this root once (``build``) in a private mount namespace and every
sandbox copies it with ``unshare(CLONE_NEWNS)`` and enters it (``enter``): a few mounts per
submission. As root the zygote does so directly; without root it first enters a user
namespace of its own (``own_user_namespace``: it is root there, and only there) and a PID
namespace in which it is the first process. Either way the sandbox ends with no capability
at all (``drop_capabilities``): as root by becoming a fresh unprivileged user; without root
by entering a nested user and mount namespace (``nested_user_namespace``), in which every
mount it inherited is locked (it can neither be unmounted to show what lies under it nor
be made writable), as a non-zero uid. Only if no user namespace can be made at all is the
sandbox left with reduced isolation, and it says so.

Memory that no process's size shows (System V shared memory, memfd) is capped here too:
``cap_sysv_shm`` sets the sandbox's own IPC namespace's limits to zero, and
``refuse_memfd`` installs a seccomp filter that answers ``memfd_create`` with EPERM, and
refuses new sockets (``socket``, ``socketpair`` and io_uring, whose rings make sockets
without the socket call) and new user and IPC namespaces, in which the sandbox could mount
an unbounded tmpfs or have uncapped shared memory (used where no cgroup charges such pages
to the sandbox: see ``cgroups``).

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
PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(platform.machine())
SYSTEM = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/sys")
#: What of /etc a sandbox may read (where present): the loader's cache and configuration,
#: the time zone, the user and group names, name-service rules, symbolic links of tools.
ETC = tuple(f"/etc/{name}" for name in (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "passwd", "group",
    "nsswitch.conf", "host.conf", "hosts", "alternatives", "os-release", "mime.types"))
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
    found = set(SYSTEM) | {os.path.dirname(os.path.realpath(sys.executable))}
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


def runtime_files(folders, hide) -> list[str]:
    """The files of /etc the sandbox needs (``ETC``), where present, unless bound already."""
    hide = [os.path.realpath(h) for h in hide]
    return [path for path in ETC if os.path.lexists(path) and not _inside(path, folders)
            and not _inside(os.path.realpath(path), hide)]


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
    files = runtime_files(paths, hide)
    wanted = list(paths) + list(sys.path) + [sys.executable] + list(SYSTEM) + files
    links = {k: v for k, v in _symlinks(wanted).items()
             if not _inside(k, paths) and os.path.realpath(k) != k and k not in files}
    devices = [d for d in os.listdir("/dev") if d in DEVICES or d.startswith("nvidia")]
    sources = {p: os.open(p, os.O_PATH) for p in paths + files + [f"/dev/{d}" for d in devices]}
    try:
        mount("none", ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
        for link, text in sorted(links.items()):
            os.makedirs(ROOT + os.path.dirname(link), mode=0o755, exist_ok=True)
            if not os.path.lexists(ROOT + link):
                os.symlink(text, ROOT + link)
        for folder in ("tmp", "proc", "dev/shm"):
            os.makedirs(f"{ROOT}/{folder}", mode=0o755, exist_ok=True)
        for path, fd in sources.items():
            _place(path, fd)
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


def _place(path: str, fd: int) -> None:
    """Bind one folder, file or device node (opened as ``fd``) at its place in the root."""
    source, target = f"/proc/self/fd/{fd}", ROOT + path
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    if os.path.isdir(source):
        os.makedirs(target, mode=0o755, exist_ok=True)
        if path.startswith("/dev/"):                                # e.g. nvidia-caps/
            mount(source, target, None, MS_BIND | MS_REC)
        else:
            _bind_readonly(source, target)
        return
    if not os.path.lexists(target):
        open(target, "w").close()
    if path.startswith("/dev/"):                                    # a device node
        mount(source, target, None, MS_BIND)
    else:
        _bind_readonly(source, target)


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


# ----------------------------------------------------------------------------------------
# Users and capabilities

def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def own_user_namespace(inside: int, outside_uid: int, outside_gid: int, flags: int = 0) -> None:
    """Enter a new user namespace (with `flags`, e.g. a mount namespace) in which this
    process is `inside`, mapped to its own uid and gid outside; nothing else is mapped, and
    groups can never be changed there (setgroups denied)."""
    if not unshare(CLONE_NEWUSER | flags):
        raise JailError(f"no user namespace: {os.strerror(ctypes.get_errno())}")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{inside} {outside_uid} 1")
    _write("/proc/self/gid_map", f"{inside} {outside_gid} 1")


def nested_user_namespace(uid: int) -> None:
    """In the sandbox, still root of the zygote's user namespace: become `uid` of a nested
    user namespace with its own mount namespace. Every mount seen there came from a more
    privileged namespace and is locked, so no capability held there can undo the jail."""
    own_user_namespace(uid, os.geteuid(), os.getegid(), CLONE_NEWNS)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def drop_bounding_set() -> None:
    """No capability can ever be gained again (needs CAP_SETPCAP: done while it is held)."""
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break                 # EINVAL: past the last capability; EPERM: not ours to drop


def drop_capabilities() -> None:
    """Empty the bounding (where still allowed), ambient, effective, permitted and
    inheritable sets."""
    drop_bounding_set()
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(0x20080522, 0)     # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        raise JailError(f"capset: {os.strerror(ctypes.get_errno())}")


def capabilities() -> dict[str, int]:
    """CapEff, CapPrm, ... of this process, as numbers (from /proc/self/status)."""
    with open("/proc/self/status") as f:
        return {k: int(v, 16) for k, v in (line.split(":") for line in f
                                           if line.startswith("Cap"))}


# ----------------------------------------------------------------------------------------
# Memory no process's size shows

SHM_LIMITS = ("/proc/sys/kernel/shmmni", "/proc/sys/kernel/shmall", "/proc/sys/kernel/shmmax")


def cap_sysv_shm() -> None:
    """No System V shared memory in this IPC namespace (ours alone): a detached segment
    would outlive every process and be in no process's size. Needs privilege over the
    namespace, so is done before the sandbox gives up its capabilities."""
    for path in SHM_LIMITS:
        try:
            _write(path, "0")
        except OSError as e:
            raise JailError(f"System V shared memory could not be capped ({path}: "
                            f"{os.strerror(e.errno)})") from None


#: Per seccomp_data.arch: (memfd_create, memfd_secret), (unshare, clone), clone3.
SYSCALLS = {0xC000003E: ((319, 447), (272, 56), 435),      # x86_64
            0x40000003: ((356, 447), (310, 120), 435),     # i386
            0xC00000B7: ((279, 447), (97, 220), 435)}      # aarch64
#: Per seccomp_data.arch: socket and socketpair (i386: also socketcall, which multiplexes
#: them; nothing here makes 32-bit calls).
SOCKET_CALLS = {0xC000003E: (41, 53), 0x40000003: (102, 359, 360), 0xC00000B7: (198, 199)}
#: io_uring_setup, io_uring_enter and io_uring_register: the same numbers on all three (the
#: table shared since 5.1). Refused with the rest, whatever ``sockets`` says: a ring's
#: IORING_OP_SOCKET (and OP_ACCEPT) makes sockets without the socket call, and nothing the
#: sandbox runs (Python, torch) uses io_uring.
IO_URING_CALLS = (425, 426, 427)
X32_BIT = 1 << 30                 #: x86_64's x32 calls: refused outright (nothing here uses them)
NEW_NAMESPACES = CLONE_NEWUSER | CLONE_NEWIPC     #: flags refused in unshare and clone
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _EPERM, _ENOSYS = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38


class _Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_Instruction))]


def _memfd_filter(sockets: bool = True) -> list[tuple[int, int, int, int]]:
    """A classic BPF program. For each known architecture: memfd_create and memfd_secret
    fail with EPERM; so do unshare and clone asking for a new user or IPC namespace (a user
    namespace of its own would let the sandbox mount an unbounded tmpfs, an IPC namespace
    of its own would have uncapped shared memory), and, with ``sockets``, socket and
    socketpair (connections nobody accepts hold kernel memory that no process's size shows:
    the sandbox keeps the one channel it already has); the io_uring calls, always (a ring
    makes sockets without the socket call); clone3, whose flags a filter cannot
    read, answers ENOSYS, so the C library falls back to clone. Everything else is allowed.
    Jumps are forward offsets, resolved to the labels "deny", "enosys" and "flags:ARCH"."""
    program: list = [(_LD_ABS, 0, 0, 4)]                                    # arch
    for arch, (memfd, spawn, clone3) in SYSCALLS.items():
        block: list = [(_LD_ABS, 0, 0, 0)]                                  # nr
        if arch == 0xC000003E:
            block.append((_JGE, "deny", 0, X32_BIT))
        block += [(_JEQ, "deny", 0, n) for n in memfd]
        block += [(_JEQ, "deny", 0, n) for n in SOCKET_CALLS[arch] if sockets]
        block += [(_JEQ, "deny", 0, n) for n in IO_URING_CALLS]
        block += [(_JEQ, f"flags:{arch}", 0, n) for n in spawn]
        block += [(_JEQ, "enosys", 0, clone3), (_RET, 0, 0, _ALLOW)]
        block += [(f"flags:{arch}",), (_LD_ABS, 0, 0, 16),                 # args[0], low half
                  (_JSET, "deny", 0, NEW_NAMESPACES), (_RET, 0, 0, _ALLOW)]
        size = sum(1 for i in block if len(i) == 4)
        program.append((_JEQ, 0, size, arch))
        program += block
    program += [(_RET, 0, 0, _ALLOW), ("deny",), (_RET, 0, 0, _EPERM),
                ("enosys",), (_RET, 0, 0, _ENOSYS)]
    labels, code = {}, []
    for item in program:
        if len(item) == 1:
            labels[item[0]] = len(code)
        else:
            code.append(item)
    return [(c, labels[jt] - i - 1 if isinstance(jt, str) else jt, jf, k)
            for i, (c, jt, jf, k) in enumerate(code)]


def refuse_memfd(sockets: bool = True) -> None:
    """memfd_create, io_uring, new user or IPC namespaces and (with ``sockets``) new sockets
    fail with EPERM from now on, in this process and its children: an anonymous file's
    pages, and the buffers of socket connections nobody accepts, are in no process's size.
    The sandbox's channel to the grader exists before this, and stays. Needs
    no_new_privs."""
    code = _memfd_filter(sockets)
    instructions = (_Instruction * len(code))(*code)
    program = _Program(len(code), instructions)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
            libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) != 0:
        raise JailError(f"memfd could not be refused: {os.strerror(ctypes.get_errno())}")
