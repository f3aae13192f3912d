"""The grader's side of the sandbox: a zygote client and a proxy for one submission.

``Zygote`` starts the zygote process (a fresh ``python -I`` that imports torch once) and
asks it for sandboxes. ``Sandbox`` is one submission's sandbox: it sends the source,
then probes, and turns everything that can go wrong in a submission (an exception, a
crash, a hang, garbage on the channel) into a ``StudentError`` with a clear message.
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
import time
from pathlib import Path

from . import protocol

SANDBOX_DIR = Path(__file__).resolve().parent
OUTPUT_HEAD, OUTPUT_TAIL = 64 << 10, 16 << 10


class StudentError(Exception):
    """The submission failed to answer a probe: it raised, crashed, hung or sent garbage."""

    def __init__(self, message: str, *, raised: dict | None = None):
        super().__init__(message)
        self.raised = raised or {}

    @property
    def not_implemented(self) -> bool:
        return bool(self.raised.get("not_implemented"))


class GraderError(Exception):
    """The grader itself failed (not the submission's fault)."""


class Zygote:
    """A pre-imported interpreter that forks one fresh sandbox per submission."""

    def __init__(self):
        ours, theirs = socket.socketpair()
        self._log = tempfile.TemporaryFile()
        code = (f"import sys; sys.path.insert(0, {str(SANDBOX_DIR)!r}); "
                "import zygote; zygote.main()")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OMP_NUM_THREADS": "1",
               "LANG": "C.UTF-8"}
        self.proc = subprocess.Popen([sys.executable, "-I", "-c", code, str(theirs.fileno())],
                                     pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=self._log, env=env,
                                     start_new_session=True)
        theirs.close()
        self.sock = ours
        self._lock = threading.Lock()
        self._cond = threading.Condition()
        self._replies: list[tuple[dict, list[int]]] = []
        self.exits: dict[int, int] = {}
        self._ready = False
        self._closed = False
        threading.Thread(target=self._read, daemon=True).start()

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
                        self.exits[message["exited"]] = message["status"]
                    elif "pid" in message:
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

    def wait_ready(self, timeout: float = 120.0) -> None:
        if not self._wait(lambda: self._ready, timeout):
            self._log.seek(0)
            tail = self._log.read()[-2000:].decode("utf-8", "replace")
            raise GraderError(f"the sandbox's interpreter did not start:\n{tail}")

    def fork(self, config: dict) -> tuple[int, socket.socket, int, int]:
        self.wait_ready()
        with self._lock:
            self.sock.sendall(json.dumps({"op": "fork", "config": config}).encode() + b"\n")
            reply = self._wait(lambda: self._replies, 30.0)
            if not reply:
                raise GraderError("the zygote did not fork a sandbox")
            with self._cond:
                message, fds = self._replies.pop(0)
        chan, out_fd, err_fd = fds
        return message["pid"], socket.socket(fileno=chan), out_fd, err_fd

    def kill(self, pid: int) -> None:
        try:
            self.sock.sendall(json.dumps({"op": "kill", "pid": pid}).encode() + b"\n")
        except OSError:
            pass

    def exit_status(self, pid: int, timeout: float = 2.0) -> int | None:
        found = self._wait(lambda: pid in self.exits, timeout)
        return self.exits.get(pid) if found else None

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            self._log.close()


class _Output:
    """Drains one of the sandbox's output pipes, keeping only its head and its tail."""

    def __init__(self, fd: int):
        self.head, self.tail, self.total = bytearray(), bytearray(), 0
        self.thread = threading.Thread(target=self._drain, args=(fd,), daemon=True)
        self.thread.start()

    def _drain(self, fd: int) -> None:
        with open(fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(1 << 16):
                self.total += len(chunk)
                room = OUTPUT_HEAD - len(self.head)
                if room > 0:
                    self.head += chunk[:room]
                    chunk = chunk[room:]
                if chunk:
                    self.tail = (self.tail + chunk)[-OUTPUT_TAIL:]

    def text(self) -> str:
        text = bytes(self.head).decode("utf-8", "replace")
        skipped = self.total - len(self.head) - len(self.tail)
        if self.tail:
            text += (f"\n[… {skipped} bytes left out …]\n" if skipped > 0 else "") + \
                bytes(self.tail).decode("utf-8", "replace")
        return sanitize(text)


def sanitize(text: str, limit: int | None = None) -> str:
    """Printable text only: no terminal escapes, NULs or carriage returns."""
    clean = "".join(ch if ch.isprintable() or ch in "\n\t" else "�" for ch in text)
    if limit is not None and len(clean) > limit:
        clean = clean[:limit] + f"… ({len(clean) - limit} more characters)"
    return clean


class Sandbox:
    """One submission, imported in a fresh sandbox; restarted if it dies, up to a cap."""

    def __init__(self, zygote: Zygote, source: bytes, filename: str, config: dict, *,
                 import_timeout: float = 20.0, restarts: int = 3):
        self.zygote, self.source, self.filename = zygote, source, filename
        self.config, self.import_timeout, self.restarts = config, import_timeout, restarts
        self.pid: int | None = None
        self.chan: socket.socket | None = None
        self.outputs: list[_Output] = []
        self.names: frozenset[str] = frozenset()
        self.notes: list[str] = []
        self.load_problem: str | None = None
        self.timed_out_groups: set[str] = set()
        self._start()

    # -- life cycle ------------------------------------------------------------------

    def _start(self) -> None:
        self.pid, self.chan, out_fd, err_fd = self.zygote.fork(self.config)
        self.outputs += [_Output(out_fd), _Output(err_fd)]
        ready = self._exchange(None, 30.0, "while starting the sandbox")
        if not ready.get("ready"):
            raise GraderError("the sandbox did not start properly")
        self.notes = [n for n in ready.get("notes", []) if isinstance(n, str)]
        try:
            answer = self._exchange({"source": self.source, "filename": self.filename},
                                    self.import_timeout, "while importing the submission")
        except StudentError as e:
            self.load_problem = str(e)
            self._stop()
            return
        if "raised" in answer:
            self.load_problem = ("the submission raised while being imported: "
                                 + _exception_text(answer["raised"]))
            self._stop()
            return
        names = answer.get("names")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise StudentError("the sandbox sent a malformed answer")
        self.names = frozenset(names)

    def _stop(self) -> None:
        if self.pid is not None:
            self.zygote.kill(self.pid)
        if self.chan is not None:
            self.chan.close()
        self.chan = None

    def close(self) -> None:
        self._stop()
        for out in self.outputs:
            out.thread.join(timeout=2)

    def output(self) -> str:
        """What the submission printed (stdout, then stderr), bounded and sanitised."""
        return "\n".join(o.text() for o in self.outputs if o.total)

    # -- probes ----------------------------------------------------------------------

    def probe(self, name: str, *, group: str, timeout: float = 15.0, **kwargs):
        """Run one probe; returns its data or raises StudentError."""
        if self.load_problem:
            raise StudentError(self.load_problem)
        if group in self.timed_out_groups:
            raise StudentError("not run: an earlier check of this part timed out")
        if self.chan is None:
            if self.restarts <= 0:
                raise StudentError("not run: the submission's worker crashed too often")
            self.restarts -= 1
            self._start()
            if self.load_problem:
                raise StudentError(self.load_problem)
        try:
            answer = self._exchange({"probe": name, "kwargs": kwargs}, timeout,
                                    "during the check", group=group)
        except StudentError:
            self._stop()
            raise
        if not isinstance(answer, dict):
            raise StudentError("the sandbox sent a malformed answer")
        self.forbidden = [f for f in answer.get("forbidden", []) if isinstance(f, str)]
        if "bad" in answer:
            raise StudentError(sanitize(str(answer["bad"]), 400))
        if "raised" in answer:
            raise StudentError(_exception_text(answer["raised"]), raised=_raised(answer["raised"]))
        if "ok" not in answer:
            raise StudentError("the sandbox sent a malformed answer")
        return answer["ok"]

    def _exchange(self, message, timeout: float, when: str, group: str | None = None):
        deadline = time.monotonic() + timeout
        chan = self.chan
        try:
            if message is not None:
                chan.settimeout(timeout)
                chan.sendall(protocol.pack(message))

            def recv_exact(n: int) -> bytes:
                buf = bytearray()
                while len(buf) < n:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError
                    chan.settimeout(left)
                    chunk = chan.recv(min(n - len(buf), 1 << 20))
                    if not chunk:
                        raise EOFError
                    buf += chunk
                return bytes(buf)
            return protocol.unpack(protocol.read_frame(recv_exact))
        except (TimeoutError, socket.timeout):
            self._stop()
            if group:
                self.timed_out_groups.add(group)
            raise StudentError(f"timed out {when} (limit {timeout:g} s); the process was killed")
        except (EOFError, ConnectionError, BrokenPipeError):
            self.chan = None
            status = self.zygote.exit_status(self.pid)
            how = ("was killed by signal %d" % -status if status is not None and status < 0
                   else f"exited (status {status})" if status is not None else "stopped")
            if status == -signal.SIGKILL or status == -signal.SIGSEGV:
                how += " — perhaps it ran out of memory or time"
            raise StudentError(f"the submission's worker {how} {when}")
        except protocol.ProtocolError as e:
            self._stop()
            raise StudentError(f"the submission sent back something that is not valid data ({e})")


def _raised(info) -> dict:
    return info if isinstance(info, dict) else {}


def _exception_text(info) -> str:
    info = _raised(info)
    kind = sanitize(str(info.get("type", "an exception")), 100)
    message = sanitize(str(info.get("message", "")), 400)
    return f"{kind}: {message}" if message else kind
