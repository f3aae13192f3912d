"""Starting the zygote, and talking to it: the grader's side of the control socket.

Imports nothing heavy (no torch), so that the command line can start the zygote first
thing (``prestart``) and the two interpreters import torch at the same time; the first
``Zygote()`` then adopts that process instead of starting one.

Not as root, the process started here only waits: the zygote proper is its child, the first
process of a PID namespace of its own (see ``zygote``); ``Zygote.proc`` is the one started
here, and the pids the zygote sends are those of its own namespace (names, not for ``kill``).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

SANDBOX_DIR = Path(__file__).resolve().parent
PASSED_ENV = ("PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME",
              "NVIDIA_VISIBLE_DEVICES")
_PRESTARTED: list = []


#: The zygote's first lines: the sandbox's own modules load from their sources, never from
#: a ``__pycache__`` file (bytecode planted there would run in every sandbox), and nothing
#: is written there; other modules (torch's) load as usual.
SOURCE_ONLY = """\
import sys, importlib.machinery as _m
sys.dont_write_bytecode = True
sys.path.insert(0, {folder!r})
class _Source(_m.SourceFileLoader):
    def get_code(self, name):
        path = self.get_filename(name)
        return self.source_to_code(self.get_data(path), path)
class _SandboxModules:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        spec = _m.PathFinder.find_spec(name, [{folder!r}]) if "." not in name else None
        if spec is None or not (spec.origin or "").endswith(".py"):
            return None
        spec.loader, spec.cached = _Source(name, spec.origin), None
        return spec
sys.meta_path.insert(0, _SandboxModules)
def _forget_the_grader(names=("autograder", "solutions", "assignments")):
    # No editable install of the grader here: its finder (installed by its .pth file at
    # start-up), path hooks and module. (Path entries stay: an installed grader shares
    # site-packages with torch.)
    def finds(finder):
        try:        # or names them: setuptools' finders keep a MAPPING, found or not
            mapping = getattr(sys.modules.get(getattr(finder, "__module__", "")), "MAPPING", ())
            return any(n in mapping or finder.find_spec(n, None) for n in names)
        except Exception:
            return False
    owners = set(getattr(f, "__module__", None) for f in sys.meta_path
                 if f is not _SandboxModules and f is not _m.PathFinder and finds(f))
    owners -= set(["_frozen_importlib", "_frozen_importlib_external", "zipimport", None])
    sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "__module__", None) not in owners]
    sys.path_hooks[:] = [h for h in sys.path_hooks if getattr(h, "__module__", None) not in owners]
    sys.path_importer_cache.clear()
    for owner in owners:
        sys.modules.pop(owner, None)
_forget_the_grader()
del _forget_the_grader
"""


def _launch():
    """A fresh ``python -I`` running the zygote: (process, control socket, its stderr log)."""
    ours, theirs = socket.socketpair()
    log = tempfile.TemporaryFile()
    code = SOURCE_ONLY.format(folder=str(SANDBOX_DIR)) + "import zygote; zygote.main()"
    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    env.update({"OMP_NUM_THREADS": "1", "LANG": "C.UTF-8"})
    env.setdefault("PATH", "/usr/bin:/bin")
    proc = subprocess.Popen([sys.executable, "-I", "-c", code, str(theirs.fileno())],
                            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=log, env=env,
                            start_new_session=True)
    theirs.close()
    return proc, ours, log


def config_places() -> list[str]:
    """Every place Jupyter and nbgrader read configuration from (a course's secret may sit in
    any): what ``jupyter --paths`` lists, ``$JUPYTER_CONFIG_DIR`` and ``$JUPYTER_CONFIG_PATH``,
    the prefixes' ``etc/jupyter``, the home's, and the configuration files nbgrader reads from
    the folder it runs in. Computed here, where the environment is (the zygote has none):
    the sandbox's root hides each one that a bound folder would show."""
    home = os.path.expanduser("~")
    places = [os.environ.get("JUPYTER_CONFIG_DIR", ""), os.path.join(home, ".jupyter"),
              os.path.join(home, ".local", "etc", "jupyter"), "/usr/local/etc/jupyter",
              "/etc/jupyter", "/usr/etc/jupyter"]
    places += os.environ.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep)
    places += [os.path.join(p, "etc", "jupyter") for p in (sys.prefix, sys.base_prefix,
                                                            sys.exec_prefix)]
    places += [os.path.join(os.getcwd(), name) for name in ("nbgrader_config.py",
                                                            "nbgrader_config.json",
                                                            "jupyter_config.py")]
    try:
        from jupyter_core.paths import jupyter_config_path
        places += jupyter_config_path()
    except Exception:       # noqa: BLE001 — no Jupyter here: the standard places above
        pass
    return sorted({os.path.realpath(p) for p in places if p and os.path.isabs(p)
                   and os.path.lexists(p)})


def prestart() -> None:
    """Start a zygote now, from this thread (it dies with it), for the next ``Zygote()``."""
    if not _PRESTARTED:
        _PRESTARTED.append(_launch())


class GraderError(Exception):
    """The grader itself failed (not the submission's fault)."""


class Zygote:
    """A pre-imported interpreter that forks one fresh sandbox per submission."""

    def __init__(self, *, hide=(), memory_bytes: int = 0):
        self.proc, self.sock, self._log = _PRESTARTED.pop() if _PRESTARTED else _launch()
        self._lock = threading.Lock()          # one fork request at a time
        self._send_lock = threading.Lock()     # whole lines on the control socket
        self._cond = threading.Condition()
        self._replies: list[tuple[dict, list[int]]] = []
        self.exits: dict[int, tuple[int, str | None]] = {}
        self._ready = False
        self._closed = False
        self.last_cgroup = False
        try:
            self._send({"op": "setup", "hide": [str(h) for h in hide] + config_places(),
                        "memory_bytes": int(memory_bytes)})
        except OSError:                        # it died as it started: say what it said
            self.proc.wait(timeout=30)
            raise GraderError("the sandbox's interpreter did not start:\n"
                              + self._tail()) from None
        threading.Thread(target=self._read, daemon=True).start()

    def _tail(self) -> str:
        self._log.seek(0)
        return self._log.read()[-2000:].decode("utf-8", "replace")

    def _read(self) -> None:
        buffer, fds = b"", []
        while True:
            try:
                data, new_fds, _, _ = socket.recv_fds(self.sock, 65536, 3)
            except OSError:
                data = b""
            if not data:
                break
            buffer += data
            fds += new_fds
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                message = json.loads(line)
                with self._cond:
                    if "exited" in message:
                        self.exits[message["exited"]] = (message["status"], message.get("reason"))
                    elif "pid" in message:
                        self.exits.pop(message["pid"], None)      # a reused pid: forget the old
                        self._replies.append((message, fds))
                        fds = []
                    elif message.get("ready"):
                        self._ready = True
                    self._cond.notify_all()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _wait(self, predicate, timeout: float):
        with self._cond:
            if not self._cond.wait_for(lambda: predicate() or self._closed, timeout):
                return None
            return predicate()

    def wait_ready(self, timeout: float = 180.0) -> None:
        if not self._wait(lambda: self._ready, timeout):
            raise GraderError(f"the sandbox's interpreter did not start:\n{self._tail()}")

    def fork(self, config: dict) -> tuple[int, socket.socket, int, int]:
        """(pid, channel, stdout fd, stderr fd) of a new sandbox; ``self.last_cgroup`` says
        whether it was born in a cgroup of its own."""
        self.wait_ready()
        with self._lock:
            try:
                self._send({"op": "fork", "config": config})
            except OSError as e:
                raise GraderError(f"the zygote is gone ({e})") from None
            reply = self._wait(lambda: self._replies, 30.0)
            if not reply:
                raise GraderError("the zygote did not fork a sandbox")
            with self._cond:
                message, fds = self._replies.pop(0)
        chan, out_fd, err_fd = fds
        self.last_cgroup = bool(message.get("cgroup"))
        return message["pid"], socket.socket(fileno=chan), out_fd, err_fd

    def _send(self, message: dict) -> None:
        with self._send_lock:
            self.sock.sendall(json.dumps(message).encode() + b"\n")

    def kill(self, pid: int) -> None:
        try:
            self._send({"op": "kill", "pid": pid})
        except OSError:
            pass

    def exit_status(self, pid: int, timeout: float = 2.0) -> tuple[int | None, str | None]:
        found = self._wait(lambda: pid in self.exits, timeout)
        return self.exits.get(pid, (None, None)) if found else (None, None)

    def close(self) -> None:
        """Closing the socket ends the zygote, which kills its sandboxes; one still starting
        up is killed outright rather than waited for."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)   # wakes our reader; the zygote reads EOF
        except OSError:
            pass
        try:
            self.sock.close()
        finally:
            try:
                self.proc.wait(timeout=10 if self._ready else 0)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            self._log.close()
