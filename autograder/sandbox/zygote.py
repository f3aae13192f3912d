"""The zygote: a process that has imported torch once and forks one sandbox per submission.

Started by the grader as a fresh, isolated interpreter (``python -I``) whose path holds
only this folder, so it holds nothing secret: no reference, no hidden check, no expected
value, no submission, no other submission's channel (each sandbox's socket is made here
but handed to the grader and closed at once). It never runs tensor code after its
warm-up (OpenMP and fork do not mix), never initialises CUDA, and never reuses a sandbox.

As root it also builds, once, the read-only root every sandbox runs in (``jail.build``)
and gives each sandbox its own PID namespace: when the sandbox's first process dies, the
kernel kills every process it left behind, wherever it went.

Control protocol (a Unix socket from the grader): one JSON line per message.
  grader -> zygote  {"op": "setup", "hide": [...], "memory_bytes": N}  (first, once)
                    {"op": "fork", "config": {...}}  -> {"pid": N, "uid": U} + 3 fds
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
    sys.path[:] = [p for p in sys.path if p == here or os.path.isabs(p) and not inside(p)]
    for name in dropped:
        sys.modules.pop(name, None)


_forget_the_installation()
os.environ["OMP_NUM_THREADS"] = "1"
import torch  # noqa: E402  (after the thread settings)

torch.set_num_threads(1)
import jail  # noqa: E402
import probes  # noqa: E402  (imported here so that forked sandboxes need no file access)
import protocol  # noqa: E402,F401
import worker  # noqa: E402

UID_BASE = 1_700_000_000
TICK = 0.05                  #: seconds between two looks at the children
SCAN_EVERY = 10              #: ticks between two scans of every process, for memory


class Zygote:
    def __init__(self, control: socket.socket, options: dict):
        self.control = control
        self.children: dict[int, int] = {}       # pid -> uid
        self.killed_for_memory: set[int] = set()
        self.counter = 0
        self.buffer = b""
        self.ticks = 0
        self.memory = int(options.get("memory_bytes", 0))
        self.root = os.geteuid() == 0
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
            self.own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY)

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
        for pid in list(self.children):
            self.kill(pid)

    def handle(self, message: dict) -> None:
        if message["op"] == "fork":
            self.fork(message["config"])
        elif message["op"] == "kill":
            self.kill(message["pid"])

    def fork(self, config: dict) -> None:
        self.counter += 1
        uid = UID_BASE + (os.getpid() % 100_000) * 1000 + self.counter % 1000
        parent_end, child_end = socket.socketpair()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid_ns = self.own_pid_ns is not None and jail.unshare(jail.CLONE_NEWPID)
        config = dict(config, uid=uid, root_ready=self.root_ready, pid_namespace=pid_ns,
                      zygote_notes=self.notes)
        try:
            pid = os.fork()
        except OSError:
            self._own_pid_namespace(pid_ns)
            raise
        if pid == 0:
            self.control.close()
            parent_end.close()
            os.close(out_r)
            os.close(err_r)
            worker.child_main(child_end, out_w, err_w, config)
        self._own_pid_namespace(pid_ns)
        child_end.close()
        os.close(out_w)
        os.close(err_w)
        self.children[pid] = uid
        socket.send_fds(self.control, [json.dumps({"pid": pid, "uid": uid}).encode() + b"\n"],
                        [parent_end.fileno(), out_r, err_r])
        parent_end.close()
        os.close(out_r)
        os.close(err_r)

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
        if self.own_pid_ns is None and self.root:
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
        if not self.memory or not self.children:
            return
        if self.ticks % SCAN_EVERY == 0:
            pids: dict[int, list[int]] = {}
            totals: dict[int, int] = {}
            for pid, owner, rss in _processes():
                pids.setdefault(owner, []).append(pid)
                totals[owner] = totals.get(owner, 0) + rss
            for uid, total in totals.items():
                if total > self.memory and len(pids[uid]) > 1:
                    totals[uid] = sum(_pss(pid) for pid in pids[uid])
        else:
            totals = {uid: _rss(pid) for pid, uid in self.children.items()}
        for pid, uid in list(self.children.items()):
            if totals.get(uid, 0) > self.memory and pid not in self.killed_for_memory:
                self.killed_for_memory.add(pid)
                self.kill(pid)

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
            if self.own_pid_ns is None and self.root:
                self.sweep(uid)
            reason = "memory" if pid in self.killed_for_memory else None
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
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _processes():
    """(pid, real uid, resident bytes) of every process we can see."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                fields = dict(line.split(b":", 1) for line in f.read().splitlines() if b":" in line)
            uid = int(fields[b"Uid"].split()[0])
            rss = int(fields.get(b"VmRSS", b"0 kB").split()[0]) * 1024
        except (OSError, ValueError, KeyError, IndexError):
            continue
        yield int(name), uid, rss


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
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)   # die with the grader
    except OSError:
        pass
    probes.warm_up()
    worker.watch_forbidden_kernels()    # after the warm-up: sandboxes inherit it
    options, rest = _setup(control)
    zygote = Zygote(control, options)
    zygote.buffer = rest
    gc.collect()
    gc.freeze()                # children touch fewer shared pages (copy-on-write)
    control.sendall(b'{"ready": true}\n')
    zygote.run()
    os._exit(0)                # nothing to flush; interpreter shutdown with torch is slow


if __name__ == "__main__":
    main()
