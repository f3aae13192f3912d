"""The zygote: a process that has imported torch once and forks one sandbox per submission.

Started by the grader as a fresh, isolated interpreter (``python -I``) whose path holds
only this folder, so it holds nothing secret: no reference, no hidden check, no expected
value, no other submission's channel. It never runs tensor code itself (OpenMP and
fork do not mix), and it never reuses a sandbox for a second submission.

Control protocol (a Unix socket from the grader): one JSON line per message.
  grader -> zygote  {"op": "fork", "config": {...}}  -> {"pid": N, "uid": U} + 3 fds
                    {"op": "kill", "pid": N}
  zygote -> grader  {"exited": N, "status": S}       (S: exit code, or -signal)
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys

os.environ["OMP_NUM_THREADS"] = "1"
import torch  # noqa: E402  (after the thread settings)

torch.set_num_threads(1)
import probes  # noqa: E402,F401  (imported here so that forked sandboxes need no file access)
import protocol  # noqa: E402,F401
import worker  # noqa: E402

def _warm_up() -> None:
    """Import now what the probes import lazily, so a sandbox needs no file access for it."""
    import torch._dynamo  # noqa: F401
    x = torch.ones(2, 2)
    with probes.OpTrace("cpu"), probes.FlopCounterMode(display=False):
        torch.softmax(x @ x, dim=-1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.nn.functional.linear(x, x)
    _warm_up_meta()


def _warm_up_meta() -> None:
    """The structure probes: a masked forward on the meta device (seconds of lazy imports
    the first time) and the errors they expect there; float16 autocast."""
    layer, x = torch.nn.Linear(2, 2).to("meta"), torch.ones(1, 2, 2, device="meta")
    with probes.OpTrace("meta"):
        scores = layer(x) @ x.transpose(-2, -1)
        keep = torch.arange(2, device="meta") < torch.tensor([1], device="meta").reshape(-1, 1, 1)
        torch.softmax(scores.masked_fill(~keep, -1.0), dim=-1).masked_fill(~keep, 0.0)
    for fails in (lambda: bool(x.sum() > 0), lambda: torch.arange(2) < x):
        try:
            fails()
        except RuntimeError:
            pass
    with torch.autocast("cpu", dtype=torch.float16):
        torch.nn.functional.linear(torch.ones(2, 2), torch.ones(2, 2)).half().masked_fill(
            torch.ones(2, 2, dtype=torch.bool), -1.0).softmax(-1)


_warm_up()
UID_BASE = 1_700_000_000


class Zygote:
    def __init__(self, control: socket.socket):
        self.control = control
        self.children: dict[int, int] = {}       # pid -> uid
        self.counter = 0
        self.buffer = b""

    def run(self) -> None:
        while True:
            ready, _, _ = select.select([self.control], [], [], 0.05)
            if ready:
                data = self.control.recv(65536)
                if not data:
                    break
                self.buffer += data
                while b"\n" in self.buffer:
                    line, self.buffer = self.buffer.split(b"\n", 1)
                    self.handle(json.loads(line))
            self.reap()
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
        config = dict(config, uid=uid)
        parent_end, child_end = socket.socketpair()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            self.control.close()
            parent_end.close()
            os.close(out_r)
            os.close(err_r)
            worker.child_main(child_end, out_w, err_w, config)
        child_end.close()
        os.close(out_w)
        os.close(err_w)
        self.children[pid] = uid
        socket.send_fds(self.control, [json.dumps({"pid": pid, "uid": uid}).encode() + b"\n"],
                        [parent_end.fileno(), out_r, err_r])
        parent_end.close()
        os.close(out_r)
        os.close(err_r)

    def kill(self, pid: int) -> None:
        uid = self.children.get(pid)
        if uid is None:
            return
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        self.sweep(uid)

    def sweep(self, uid: int) -> None:
        """Kill every process the sandbox's user still has, wherever it went."""
        if os.geteuid() != 0:
            return
        helper = os.fork()
        if helper == 0:
            try:
                os.setgid(uid)
                os.setuid(uid)
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(helper, 0)

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
            self.sweep(uid)
            code = os.waitstatus_to_exitcode(status)
            self.control.sendall(json.dumps({"exited": pid, "status": code}).encode() + b"\n")


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)   # die with the grader
    except OSError:
        pass
    control.sendall(b'{"ready": true}\n')
    Zygote(control).run()


if __name__ == "__main__":
    main()
