"""The grader's side of the sandbox: a zygote client and a proxy for one submission.

``Zygote`` starts the zygote process (a fresh ``python -I`` that imports torch once) and
asks it for sandboxes. ``Sandbox`` is one submission's sandbox: it sends the source,
then probes, and turns everything that can go wrong in a submission (an exception, a
crash, a hang, garbage on the channel) into a ``StudentError`` with a clear message.
Nothing the sandbox sends is trusted: frames are checked for size and form, answers must
carry this run's nonce and the number of the request, and probe results must have the
form the probe promises (``results.check``).
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import protocol, results

SANDBOX_DIR = Path(__file__).resolve().parent
OUTPUT_HEAD, OUTPUT_TAIL = 64 << 10, 16 << 10
PASSED_ENV = ("PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME",
              "NVIDIA_VISIBLE_DEVICES")


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

    def __init__(self, *, hide=(), memory_bytes: int = 0):
        ours, theirs = socket.socketpair()
        self._log = tempfile.TemporaryFile()
        code = (f"import sys; sys.path.insert(0, {str(SANDBOX_DIR)!r}); "
                "import zygote; zygote.main()")
        env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        env.update({"OMP_NUM_THREADS": "1", "LANG": "C.UTF-8"})
        env.setdefault("PATH", "/usr/bin:/bin")
        options = json.dumps({"hide": [str(h) for h in hide], "memory_bytes": int(memory_bytes)})
        self.proc = subprocess.Popen([sys.executable, "-I", "-c", code, str(theirs.fileno()),
                                      options],
                                     pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=self._log, env=env,
                                     start_new_session=True)
        theirs.close()
        self.sock = ours
        self._lock = threading.Lock()          # one fork request at a time
        self._send_lock = threading.Lock()     # whole lines on the control socket
        self._cond = threading.Condition()
        self._replies: list[tuple[dict, list[int]]] = []
        self.exits: dict[int, tuple[int, str | None]] = {}
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
            self._log.seek(0)
            tail = self._log.read()[-2000:].decode("utf-8", "replace")
            raise GraderError(f"the sandbox's interpreter did not start:\n{tail}")

    def fork(self, config: dict) -> tuple[int, socket.socket, int, int]:
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
        try:
            self.sock.close()
        finally:
            try:
                self.proc.wait(timeout=10)
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
    """One submission, imported in a fresh sandbox; restarted if it dies, up to a cap.

    Time is bounded three ways, all on the grader's clock: each probe has a deadline,
    each group of checks a budget, and the whole submission a budget. When one runs out
    the worker is killed (SIGKILL) and what is left of that group, or of the submission,
    fails fast instead of waiting again."""

    def __init__(self, zygote: Zygote, source: bytes, filename: str, config: dict, *,
                 import_timeout: float = 20.0, probe_timeout: float = 15.0, restarts: int = 3,
                 group_budget: float = 30.0, budget: float = 90.0):
        self.zygote, self.source, self.filename = zygote, source, filename
        self.config, self.import_timeout, self.restarts = config, import_timeout, restarts
        self.probe_timeout = probe_timeout
        self.budget, self.group_budget = budget, group_budget
        self.spent = 0.0
        self.group_spent: dict[str, float] = {}
        self.pid: int | None = None
        self.chan: socket.socket | None = None
        self.outputs: list[_Output] = []
        self.names: frozenset[str] = frozenset()
        self.notes: list[str] = []
        self.load_problem: str | None = None
        self.timed_out_groups: set[str] = set()
        self.forbidden: list[str] = []
        self.nonce, self.seq = "", 0
        self._start()

    # -- life cycle ------------------------------------------------------------------

    def _start(self) -> None:
        self.pid, self.chan, out_fd, err_fd = self.zygote.fork(self.config)
        self.outputs += [_Output(out_fd), _Output(err_fd)]
        self.nonce, self.seq = "", 0
        ready = self._exchange(None, 30.0, "while starting the sandbox")
        if ready.get("ready") is not True or not isinstance(ready.get("notes"), list):
            raise GraderError("the sandbox did not start properly")
        self.notes = [sanitize(n, 400) for n in ready["notes"] if isinstance(n, str)][:10]
        self.nonce = secrets.token_hex(16)
        try:
            answer = self._exchange({"source": self.source, "filename": self.filename},
                                    min(self.import_timeout, self._left()),
                                    "while importing the submission")
        except StudentError as e:
            self.load_problem = str(e)
            self._stop()
            return
        if "raised" in answer:
            self.load_problem = _import_failure(answer["raised"])
            self._stop()
            return
        names = answer.get("names")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            self.load_problem = "the submission's sandbox sent a malformed answer while importing"
            self._stop()
            return
        self.names = frozenset(names)

    def _stop(self) -> None:
        if self.pid is not None:
            self.zygote.kill(self.pid)
        if self.chan is not None:
            self.chan.close()
        self.chan = None

    def close(self) -> None:
        """Kill the sandbox. The output threads end by themselves once it is dead; nothing
        waits for them (``output()`` joins them if asked)."""
        self._stop()

    def output(self) -> str:
        """What the submission printed (stdout, then stderr), bounded and sanitised."""
        for out in self.outputs:
            out.thread.join(timeout=2)
        return "\n".join(o.text() for o in self.outputs if o.total)

    def _left(self) -> float:
        return self.budget - self.spent

    # -- probes ----------------------------------------------------------------------

    def probe(self, name: str, *, group: str, timeout: float | None = None, **kwargs):
        """Run one probe; returns its data (checked for form) or raises StudentError."""
        if self.load_problem:
            raise StudentError(self.load_problem)
        if group in self.timed_out_groups:
            raise StudentError("not run: an earlier check of this part timed out")
        if self._left() <= 0:
            raise StudentError(f"not run: the submission used up its time budget "
                               f"({self.budget:g} s)")
        if self.group_spent.get(group, 0.0) >= self.group_budget:
            raise StudentError(f"not run: the checks of this part used up their time budget "
                               f"({self.group_budget:g} s)")
        if self.chan is None:
            if self.restarts <= 0:
                raise StudentError("not run: the submission's worker crashed too often")
            self.restarts -= 1
            self._start()
            if self.load_problem:
                raise StudentError(self.load_problem)
        limit = min(timeout or self.probe_timeout, self._left(),
                    self.group_budget - self.group_spent.get(group, 0.0))
        started = time.monotonic()
        try:
            answer = self._exchange({"probe": name, "kwargs": kwargs}, limit,
                                    "during the check", group=group)
        except StudentError:
            self._stop()
            raise
        finally:
            self.group_spent[group] = self.group_spent.get(group, 0.0) + \
                time.monotonic() - started
        forbidden = answer.get("forbidden", [])
        self.forbidden = [sanitize(f, 100) for f in forbidden if isinstance(f, str)][:20] \
            if isinstance(forbidden, list) else []
        if "bad" in answer:
            raise StudentError(sanitize(str(answer["bad"]), 400))
        if "raised" in answer:
            raise StudentError(_exception_text(answer["raised"]),
                               raised=results.raised_info(answer["raised"]))
        if "ok" not in answer:
            raise StudentError("the sandbox sent a malformed answer")
        try:
            return results.check(name, kwargs, answer["ok"])
        except results.Refused as e:
            raise StudentError(sanitize(str(e), 400)) from None
        except results.ResultError as e:
            raise StudentError(f"the submission's sandbox sent back a result of the wrong "
                               f"form ({e}); was the grader's probe code tampered with?") from None

    def _exchange(self, message, timeout: float, when: str, group: str | None = None) -> dict:
        started = time.monotonic()
        deadline = started + max(timeout, 0.0)
        chan = self.chan
        try:
            if message is not None:
                self.seq += 1
                chan.settimeout(max(timeout, 0.001))
                chan.sendall(protocol.pack(dict(message, nonce=self.nonce, seq=self.seq)))

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
            answer = protocol.unpack(protocol.read_frame(recv_exact))
        except (TimeoutError, socket.timeout):
            self._stop()
            if group:
                self.timed_out_groups.add(group)
            raise StudentError(f"timed out {when} (limit {timeout:.3g} s); the process was "
                               "killed") from None
        except (EOFError, ConnectionError, BrokenPipeError):
            self.chan = None
            raise StudentError(self._death(when)) from None
        except protocol.ProtocolError as e:
            self._stop()
            raise StudentError(f"the submission sent back something that is not valid data "
                               f"({sanitize(str(e), 200)})") from None
        finally:
            self.spent += time.monotonic() - started
        if not isinstance(answer, dict) or answer.get("nonce") != self.nonce \
                or answer.get("seq") != self.seq:
            self._stop()
            raise StudentError("the sandbox sent a frame that does not answer this request "
                               "(wrong run nonce or request number); the worker was stopped")
        return answer

    def _death(self, when: str) -> str:
        status, reason = self.zygote.exit_status(self.pid)
        if reason == "memory":
            limit = self.config.get("memory_bytes", 0) / 2**30
            return (f"the submission's worker was killed {when}: it went over the memory "
                    f"limit ({limit:g} GiB)")
        how = ("was killed by signal %d" % -status if status is not None and status < 0
               else f"exited (status {status})" if status is not None else "stopped")
        if status == -signal.SIGKILL or status == -signal.SIGSEGV:
            how += " — perhaps it ran out of memory or time"
        return f"the submission's worker {how} {when}"


def _exception_text(info) -> str:
    info = results.raised_info(info)
    kind = sanitize(info.get("type", "an exception"), 100)
    message = sanitize(info.get("message", ""), 400)
    return f"{kind}: {message}" if message else kind


def _import_failure(info) -> str:
    info = results.raised_info(info)
    kind = info.get("type", "")
    if kind == "SystemExit":
        return (f"the submission exited while importing (SystemExit "
                f"{sanitize(info.get('message', ''), 60) or 'None'}): a module must not call "
                "sys.exit() or exit() at the top level, so no check could run")
    if kind == "KeyboardInterrupt":
        return "the submission raised KeyboardInterrupt while importing, so no check could run"
    return ("the submission raised while being imported, so no check could run: "
            + _exception_text(info))
