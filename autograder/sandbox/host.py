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

import secrets
import signal
import socket
import threading
import time

from . import protocol, results
from .probes import ASK_LIMIT  # questions the sandbox may ask during one probe
from .spawn import GraderError, Zygote  # noqa: F401  (re-exported: callers import them here)

OUTPUT_HEAD, OUTPUT_TAIL = 64 << 10, 16 << 10
LIMITS_NOTE = "sandbox limits in force"      #: the note's opening words (instructors' notes)


class StudentError(Exception):
    """The submission failed to answer a probe: it raised, crashed, hung or sent garbage."""

    def __init__(self, message: str, *, raised: dict | None = None):
        super().__init__(message)
        self.raised = raised or {}

    @property
    def not_implemented(self) -> bool:
        return bool(self.raised.get("not_implemented"))


def sanitize(text: str, limit: int | None = None) -> str:
    """Printable text only: no terminal escapes, NULs or carriage returns."""
    clean = "".join(ch if ch.isprintable() or ch in "\n\t" else "�" for ch in text)
    if limit is not None and len(clean) > limit:
        clean = clean[:limit] + f"… ({len(clean) - limit} more characters)"
    return clean


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


class Sandbox:
    """One submission, imported in a fresh sandbox; restarted if it dies, up to a cap.

    Time is bounded three ways, all on the grader's clock: each probe has a deadline,
    each group of checks a budget, and the whole submission a budget. When one runs out
    the worker is killed (SIGKILL) and what is left of that group, or of the submission,
    fails fast instead of waiting again."""

    def __init__(self, zygote: Zygote, source: bytes, filename: str, config: dict, *,
                 import_timeout: float = 20.0, probe_timeout: float = 15.0, restarts: int = 3,
                 group_budget: float = 30.0, budget: float = 90.0,
                 worker: str = "the submission's worker"):
        self.zygote, self.source, self.filename = zygote, source, filename
        self.worker = worker                  #: what its messages call the process
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
        self.rules_broken: list[str] = []     #: code rules the submission broke while running
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
        self.notes.append(limits_note(self.config, self.zygote.last_cgroup, self.notes))
        self.nonce = secrets.token_hex(16)
        try:
            answer = self._exchange({"source": self.source, "filename": self.filename},
                                    min(self.import_timeout, self._left()),
                                    "while importing the submission")
        except StudentError as e:
            self.load_problem = str(e)
            self._stop()
            return
        self._note_rules(answer)
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

    def probe(self, name: str, *, group: str, timeout: float | None = None, carry=None,
              **kwargs):
        """Run one probe; returns its data (checked for form) or raises StudentError.

        ``carry``: (parts, answer): the parts the sandbox asks the grader for during this
        probe (error carried forward), and ``answer(question) -> dict`` that answers."""
        self._ready_for(group)
        bundled = len(kwargs["batch"]) if name == "calls" else \
            len(kwargs["specs"]) if name == "mhas" else 1      # each call its own limit
        limit = min((timeout or self.probe_timeout) * max(bundled, 1), self._left(),
                    self.group_budget - self.group_spent.get(group, 0.0))
        started = time.monotonic()
        message = {"probe": name, "kwargs": kwargs}
        if carry:
            message["carry"] = sorted(carry[0])
        try:
            answer = self._exchange(message, limit, "during the check", group=group)
            asked = 0
            while carry and isinstance(answer.get("ask"), dict) and asked < ASK_LIMIT:
                asked += 1
                reply = carry[1](answer["ask"], set(carry[0]))
                left = limit - (time.monotonic() - started)
                answer = self._exchange(None, left, "during the check", group=group,
                                        reply=reply)
        except StudentError:
            self._stop()
            raise
        finally:
            self.group_spent[group] = self.group_spent.get(group, 0.0) + \
                time.monotonic() - started
        return self._result(name, kwargs, answer)

    def _ready_for(self, group: str) -> None:
        """Fail fast where nothing can be learnt; start a new worker after a crash."""
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

    def _note_rules(self, answer: dict) -> None:
        """The code rules the submission broke so far, as the sandbox's guard saw them."""
        broken = answer.get("rules") if isinstance(answer, dict) else None
        if isinstance(broken, list):
            for message in broken[:20]:
                if isinstance(message, str) and (text := sanitize(message, 300)) \
                        not in self.rules_broken and len(self.rules_broken) < 20:
                    self.rules_broken.append(text)

    def _result(self, name: str, kwargs: dict, answer: dict):
        self._note_rules(answer)
        forbidden = answer.get("forbidden", [])
        self.forbidden = [sanitize(f, 100) for f in forbidden if isinstance(f, str)][:20] \
            if isinstance(forbidden, list) else []
        if "bad" in answer or "raised" in answer:
            raise failure(answer)
        if "ok" not in answer:
            raise StudentError("the sandbox sent a malformed answer")
        try:
            return results.check(name, kwargs, answer["ok"])
        except results.Refused as e:
            raise StudentError(sanitize(str(e), 400)) from None
        except results.ResultError as e:
            raise StudentError(f"the submission's sandbox sent back a result of the wrong "
                               f"form ({e}); was the grader's probe code tampered with?") from None

    def _exchange(self, message, timeout: float, when: str, group: str | None = None,
                  reply: dict | None = None) -> dict:
        """Send a message (if any; a ``reply`` to a question keeps the request's number) and
        read the answer, on the grader's clock."""
        started = time.monotonic()
        try:
            if message is not None:
                self.seq += 1
                self.chan.settimeout(max(timeout, 0.001))
                self.chan.sendall(protocol.pack(dict(message, nonce=self.nonce, seq=self.seq)))
            elif reply is not None:
                self.chan.settimeout(max(timeout, 0.001))
                self.chan.sendall(protocol.pack(dict(reply, nonce=self.nonce, seq=self.seq)))
            answer = protocol.unpack(protocol.read_frame(_reader(self.chan, started + timeout)))
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
            return (f"{self.worker} was killed {when}: it went over the memory "
                    f"limit ({limit:g} GiB)")
        how = ("was killed by signal %d" % -status if status is not None and status < 0
               else f"exited (status {status})" if status is not None else "stopped")
        if status == -signal.SIGKILL or status == -signal.SIGSEGV:
            how += " — perhaps it ran out of memory or time"
        return f"{self.worker} {how} {when}"


def limits_note(config: dict, cgroup: bool, notes: list[str]) -> str:
    """Which limits held this sandbox: how its memory was counted, and its resource limits."""
    gib = config.get("memory_bytes", 0) / 2**30
    refused = not any("could not be refused" in n for n in notes)
    if cgroup:
        memory = (f"memory {gib:g} GiB for all its processes together, counted by a cgroup of "
                  "its own (every page: shared memory, tmpfs and socket buffers included)")
    else:
        memory = (f"memory {gib:g} GiB for all its processes together, counted by the grader's "
                  "watch of their sizes (no cgroup here); "
                  + ("memfd, io_uring, new sockets and new namespaces refused (seccomp), so no memory "
                     "escapes that count" if refused else "memfd and new sockets NOT refused"))
    names = {"RLIMIT_CPU": "CPU {} s", "RLIMIT_NPROC": "{} processes", "RLIMIT_NOFILE":
             "{} open files", "RLIMIT_FSIZE": "files up to {}", "RLIMIT_AS": "address space {}"}
    rest = [text.format(_size(value) if name in ("RLIMIT_FSIZE", "RLIMIT_AS") else value)
            for name, value in config.get("limits", {}).items() if (text := names.get(name))]
    return f"{LIMITS_NOTE}: {memory}; " + ", ".join(rest)


def _size(value: int) -> str:
    return f"{value / 2**30:g} GiB" if value >= 2**30 else f"{value / 2**20:g} MiB"


def _reader(chan: socket.socket, deadline: float):
    """recv_exact(n) for protocol.read_frame, bounded by the deadline (monotonic clock)."""
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
    return recv_exact


def failure(answer: dict) -> StudentError:
    """What a probe's ``bad`` or ``raised`` answer (checked for its form) says, as the
    probe's own failure would say it (``Sandbox._result``)."""
    if "bad" in answer:
        return StudentError(sanitize(str(answer["bad"]), 400))
    return StudentError(_exception_text(answer["raised"]),
                        raised=results.raised_info(answer["raised"]))


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
