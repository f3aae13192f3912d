"""The zygote: a process that has imported torch once and forks one sandbox per submission.

Started by the grader as a fresh, isolated interpreter (``python -I``) whose path holds
only this folder, so it holds nothing secret: no reference, no hidden check, no expected
value, no submission, no other submission's channel (each sandbox's socket is made here
but handed to the grader and closed at once). It never runs tensor code after its
warm-up (OpenMP and fork do not mix), never initialises CUDA, and never reuses a sandbox.

It also builds, once, the read-only root every sandbox runs in (``jail.build``) and gives
each sandbox its own PID namespace: when the sandbox's first process dies, the kernel kills
every process it left behind, wherever it went; and the sandbox can signal nobody else.

As root it does so directly. Not as root (a TA's laptop, a CI runner), it first enters a
user namespace of its own, in which it is root (and only there: uid 0 is mapped to the
grader's uid, nothing else is mapped), and a PID namespace in which it is the first
process (``_own_namespaces``: its first process stays outside, waits for it and passes on
its exit status); from then on it works as in root mode. Each sandbox then leaves the
zygote's privileges behind in a nested user namespace (``worker.isolate``). Without user
namespaces at all, the sandbox runs with reduced isolation, and its notes say so.

Where the machine has a writable cgroup hierarchy, each sandbox is born in a cgroup of its
own (``cgroups``), which limits all its memory (shared memory and tmpfs pages included) and
its number of tasks, and is removed once the sandbox's processes are gone. A sandbox the
kernel's OOM killer stopped there is reported as killed for memory, as one the zygote's own
watch (resident sizes, by sandbox) stopped.

Control protocol (a Unix socket from the grader): one JSON line per message.
  grader -> zygote  {"op": "setup", "hide": [...], "memory_bytes": N}  (first, once)
                    {"op": "fork", "config": {...}}  -> {"pid": N, "uid": U, "cgroup": B}
                                                        + 3 fds (B: born in a cgroup of its own)
                    {"op": "kill", "pid": N}
  zygote -> grader  {"ready": true}                          (after setup)
                    {"exited": N, "status": S, "reason": R}   (S: exit code, or -signal;
                    R: "memory" when the zygote killed it for its memory, else null)
"""
from __future__ import annotations

import gc
import json
import os
import select
import signal
import site
import socket
import sys


#: The project's top-level packages: nothing in the zygote may be able to import them.
PROJECT_PACKAGES = ("autograder", "solutions", "assignments", "tests")


def _forget_the_installation() -> None:
    """Drop what site-packages' ``.pth`` files added for this project before anything runs.

    An editable install (``pip install -e``) puts a finder on ``sys.meta_path`` that maps
    ``autograder``, ``solutions`` and ``assignments`` to the project's folders (and a path
    hook for its namespace packages), and an older one puts the project's root on
    ``sys.path``; ``python -I`` still runs them. Every finder that can find one of the
    project's packages goes, with whatever else its module installed, and every path inside
    the project but this folder, so nothing here (nor in a sandbox forked from here) can
    import a grader module. Other finders stay: torch may need them.
    """
    standard = {"_frozen_importlib", "_frozen_importlib_external", "zipimport"}
    owner = lambda f: getattr(f, "__module__", None) or type(f).__module__  # noqa: E731

    def finds_ours(finder) -> bool:
        try:
            return any(finder.find_spec(name, None) is not None for name in PROJECT_PACKAGES)
        except Exception:
            return False
    dropped = {owner(f) for f in sys.meta_path if owner(f) not in standard and finds_ours(f)}
    sys.meta_path[:] = [f for f in sys.meta_path if owner(f) not in dropped]
    sys.path_hooks[:] = [h for h in sys.path_hooks if owner(h) not in dropped]
    sys.path_importer_cache.clear()
    here = os.path.dirname(os.path.abspath(__file__))
    project = os.path.dirname(os.path.dirname(here))
    inside = lambda p: (p + os.sep).startswith(project + os.sep)  # noqa: E731
    # the interpreter's own site-packages stay wherever they are: a virtual environment made
    # in the clone (``python -m venv .venv``) holds torch; its grader finder went above
    keep = {here, *(os.path.abspath(p) for p in site.getsitepackages())}
    sys.path[:] = [p for p in sys.path
                   if p in keep or os.path.isabs(p) and not inside(p)]
    for name in dropped:
        sys.modules.pop(name, None)


_forget_the_installation()
os.environ["OMP_NUM_THREADS"] = "1"
import torch  # noqa: E402  (after the thread settings)

torch.set_num_threads(1)
import cgroups  # noqa: E402
import jail  # noqa: E402
import probes  # noqa: E402  (imported here so that forked sandboxes need no file access)
import protocol  # noqa: E402,F401
import guard  # noqa: E402
import rehearsal  # noqa: E402
import rules  # noqa: E402,F401
import worker  # noqa: E402

UID_BASE = 1_700_000_000
TICK = 0.05                  #: seconds between two looks at the children
SCAN_EVERY = 10              #: ticks between two scans of every process, for memory
PIDS = 64                    #: tasks (processes and threads) of one sandbox, where cgroups count
HOST_PID = os.getpid()       #: this zygote's pid as the grader sees it (set before a new PID ns)


class Zygote:
    """`mode`: "root" (really root), "userns" (root of its own user namespace, and first
    process of its own PID namespace where `own_pid` says so), or "none"."""

    def __init__(self, control: socket.socket, options: dict, mode: str = "root",
                 own_pid: bool = True):
        self.control = control
        self.children: dict[int, int] = {}       # pid -> whose processes are its: uid, or PID ns
        self.groups: dict[int, cgroups.Group] = {}
        self.leftover: list[cgroups.Group] = []  # groups whose processes were not all gone yet
        self.killed_for_memory: set[int] = set()
        self.counter = 0
        self.buffer = b""
        self.ticks = 0
        self.memory = int(options.get("memory_bytes", 0))
        self.mode = mode
        self.root = os.geteuid() == 0            # as root, or as root of its own user namespace
        self.notes: list[str] = []
        self.root_ready = False
        self.own_pid_ns = None
        if self.root:
            try:
                jail.private_namespace()
                jail.build(options.get("hide", []))
                self.root_ready = True
            except (jail.JailError, OSError) as e:
                self.notes.append(f"reduced isolation: the sandbox's root could not be built ({e})")
            if own_pid:
                self.own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY)
        self.by_namespace = mode == "userns" and self.own_pid_ns is not None
        self.cgroups = cgroups.Controllers.find()

    def run(self) -> None:
        while True:
            ready, _, _ = select.select([self.control], [], [], TICK)
            if ready:
                data = self.control.recv(65536)
                if not data:
                    break
                self.buffer += data
                while b"\n" in self.buffer:
                    line, self.buffer = self.buffer.split(b"\n", 1)
                    self.handle(json.loads(line))
            self.reap()
            self.watch_memory()
        self.finish()

    def finish(self) -> None:
        """Kill every sandbox, wait (briefly) for them, and remove their groups."""
        for pid in list(self.children):
            self.kill(pid)
        groups = list(self.groups.values()) + self.leftover
        for _ in range(100):
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    if all(g.remove() for g in groups):
                        return
                    select.select([], [], [], 0.02)
            except ChildProcessError:
                break
        for group in groups:
            group.remove()

    def handle(self, message: dict) -> None:
        if message["op"] == "fork":
            self.fork(message["config"])
        elif message["op"] == "kill":
            self.kill(message["pid"])

    def fork(self, config: dict) -> None:
        self.counter += 1
        uid = UID_BASE + (HOST_PID % 100_000) * 1000 + self.counter % 1000
        parent_end, child_end = socket.socketpair()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        group = self._group(config)            # the zygote steps into it: its child is born there
        pid_ns = self.own_pid_ns is not None and jail.unshare(jail.CLONE_NEWPID)
        config = dict(config, uid=uid, root_ready=self.root_ready, pid_namespace=pid_ns,
                      nested=self.mode == "userns", cgroup=group is not None,
                      zygote_notes=self.notes)
        try:
            pid = os.fork()
            if pid == 0:
                self.control.close()
                parent_end.close()
                os.close(out_r)
                os.close(err_r)
                worker.child_main(child_end, out_w, err_w, config)
        except OSError:
            if group:
                self.cgroups.leave()
                group.remove()
            raise
        finally:
            self._own_pid_namespace(pid_ns)
        if group:
            self.cgroups.leave()
        child_end.close()
        os.close(out_w)
        os.close(err_w)
        self.children[pid] = self._owner(pid, uid)
        if group:
            self.groups[pid] = group
        reply = {"pid": pid, "uid": uid, "cgroup": group is not None}
        socket.send_fds(self.control, [json.dumps(reply).encode() + b"\n"],
                        [parent_end.fileno(), out_r, err_r])
        parent_end.close()
        os.close(out_r)
        os.close(err_r)

    def _group(self, config: dict) -> "cgroups.Group | None":
        """A new cgroup for the next sandbox, which the zygote has stepped into (it steps
        out after the fork); None where there is none (or it could not be made or entered:
        the sandbox then caps shared memory itself)."""
        memory = int(config.get("memory_bytes") or self.memory or 0)
        if self.cgroups is None or memory <= 0:
            return None
        group = self.cgroups.make(f"{HOST_PID}-{self.counter}", memory, PIDS)
        if group is not None and not self.cgroups.enter(group):
            group.remove()
            return None
        return group

    def _owner(self, pid: int, uid: int) -> int:
        """How the memory watch knows the sandbox's processes: by user as root (each sandbox
        has its own), else by PID namespace (all run as the grader's user)."""
        if not self.by_namespace:
            return uid
        try:
            return os.stat(f"/proc/{pid}/ns/pid").st_ino
        except OSError:
            return uid

    def _own_pid_namespace(self, changed: bool) -> None:
        """After a sandbox's fork: the zygote's later children go in its own namespace again."""
        if changed:
            jail.libc.setns(self.own_pid_ns, jail.CLONE_NEWPID)

    def kill(self, pid: int) -> None:
        uid = self.children.get(pid)
        if uid is None:
            return
        for kill in (os.kill, os.killpg):
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if self.own_pid_ns is None and self.mode == "root":
            self.sweep(uid)

    def sweep(self, uid: int) -> None:
        """Without a PID namespace: kill every process the sandbox's user still has."""
        for _ in range(20):
            found = [pid for pid, owner, _ in _processes() if owner == uid]
            if not found:
                return
            for pid in found:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass

    def watch_memory(self) -> None:
        """Kill a sandbox whose processes together hold more memory than allowed.

        Each tick looks at each sandbox's first process; every SCAN_EVERY ticks, at all
        processes by user. Forked children share pages, so a sum of resident sizes that
        looks too large is confirmed with proportional sizes (PSS) before killing."""
        self.ticks += 1
        if self.ticks % SCAN_EVERY == 0:
            self.watch_groups()
        if not self.memory or not self.children:
            return
        if self.ticks % SCAN_EVERY == 0:
            pids: dict[int, list[int]] = {}
            totals: dict[int, int] = {}
            for pid, owner, rss in _processes(self.by_namespace):
                pids.setdefault(owner, []).append(pid)
                totals[owner] = totals.get(owner, 0) + rss
            for uid, total in totals.items():
                if total > self.memory and len(pids[uid]) > 1:
                    totals[uid] = sum(_pss(pid) or _rss(pid) for pid in pids[uid])
        else:
            totals = {uid: _rss(pid) for pid, uid in self.children.items()}
        for pid, uid in list(self.children.items()):
            if totals.get(uid, 0) > self.memory and pid not in self.killed_for_memory:
                self.killed_for_memory.add(pid)
                self.kill(pid)

    def watch_groups(self) -> None:
        """A sandbox one of whose processes the kernel's OOM killer stopped (in its cgroup)
        is stopped whole, for memory; groups left over are removed once empty."""
        for pid, group in list(self.groups.items()):
            if pid not in self.killed_for_memory and group.oom_kills():
                self.killed_for_memory.add(pid)
                self.kill(pid)
        self.leftover = [g for g in self.leftover if not g.remove()]

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            uid = self.children.pop(pid, None)
            if uid is None:
                continue
            if self.own_pid_ns is None and self.mode == "root":
                self.sweep(uid)
            group = self.groups.pop(pid, None)
            memory = pid in self.killed_for_memory or bool(group and group.oom_kills())
            reason = "memory" if memory else None
            if group and not group.remove():
                self.leftover.append(group)
            self.killed_for_memory.discard(pid)
            code = os.waitstatus_to_exitcode(status)
            self.control.sendall(json.dumps({"exited": pid, "status": code,
                                             "reason": reason}).encode() + b"\n")


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _pss(pid: int) -> int:
    """Proportional resident size; 0 where it cannot be read (then the resident size counts)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _processes(by_namespace: bool = False):
    """(pid, real uid or PID namespace, resident bytes) of every process we can see."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                fields = dict(line.split(b":", 1) for line in f.read().splitlines() if b":" in line)
            owner = os.stat(f"/proc/{name}/ns/pid").st_ino if by_namespace \
                else int(fields[b"Uid"].split()[0])
            rss = int(fields.get(b"VmRSS", b"0 kB").split()[0]) * 1024
        except (OSError, ValueError, KeyError, IndexError):
            continue
        yield int(name), owner, rss


def _die_with_parent() -> None:
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)
    except OSError:
        pass


def _own_namespaces(control: socket.socket) -> tuple[str, bool]:
    """Not as root: become root of a user namespace of our own, and the first process of a
    PID namespace of our own, with a /proc of its own, so the zygote can then work as
    root does (build the jail, give each sandbox a PID namespace). Returns (mode, whether
    the zygote has its own PID namespace). The first process stays outside and only waits:
    it is what the grader started, and passes on the zygote's exit status.
    """
    if os.geteuid() == 0:
        return "root", True
    try:
        jail.own_user_namespace(0, os.getuid(), os.getgid())
    except (jail.JailError, OSError):
        return "none", False            # the sandboxes say what isolation this leaves
    if not jail.unshare(jail.CLONE_NEWPID):
        return "userns", False
    pid = os.fork()
    if pid:
        control.close()
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    _die_with_parent()                 # with the process outside, which dies with the grader
    try:                               # a /proc showing this PID namespace's processes
        jail.private_namespace()
        jail.mount("proc", "/proc", "proc", jail.MS_NOSUID | jail.MS_NODEV | jail.MS_NOEXEC)
    except (jail.JailError, OSError):
        return "userns", False
    return "userns", True


def _setup(control: socket.socket) -> tuple[dict, bytes]:
    """The first message: {"op": "setup", "hide": [...], "memory_bytes": N}, and what
    followed it. It may have been sent while torch was still being imported here."""
    buffer = b""
    while b"\n" not in buffer:
        data = control.recv(65536)
        if not data:
            raise SystemExit(0)            # started ahead for a grader that never came
        buffer += data
    line, rest = buffer.split(b"\n", 1)
    return json.loads(line), rest


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    _die_with_parent()                  # die with the grader
    mode, own_pid = _own_namespaces(control)
    probes.warm_up()
    worker.watch_forbidden_kernels()    # after the warm-up: sandboxes inherit it
    guard.preload()                     # every module graded code may import, loaded here
    rehearsal.rehearse()                # each kind of probe once: sandboxes start warm
    options, rest = _setup(control)
    zygote = Zygote(control, options, mode, own_pid)
    zygote.buffer = rest
    gc.collect()
    gc.freeze()                # children touch fewer shared pages (copy-on-write)
    control.sendall(b'{"ready": true}\n')
    zygote.run()
    os._exit(0)                # nothing to flush; interpreter shutdown with torch is slow


if __name__ == "__main__":
    main()
