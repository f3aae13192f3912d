"""The sandboxed worker: imports one submission and serves probes over a private socket.

Runs only inside the sandbox (a process forked by the zygote), as the top-level module
``worker``. It never sees the reference, the hidden checks or any expected value: it
receives inputs, runs probes, and sends back data.
"""
from __future__ import annotations

import builtins
import ctypes
import os
import resource
import signal
import socket
import sys
import types

import torch

import probes
import protocol

API = ("head_weight_shape", "project", "project_heads", "split_heads", "concat_heads",
       "masked_softmax", "attention_pool", "MultiHeadAttention")
_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWUSER = 0x00020000, 0x40000000, 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
FORBIDDEN_HITS: list[str] = []


# ----------------------------------------------------------------------------------------
# Isolation, applied before the submission is imported

def _mount(source, target, fstype, flags, data) -> bool:
    ok = _libc.mount(source.encode() if source else None, target.encode(),
                     fstype.encode() if fstype else None, flags,
                     data.encode() if data else None) == 0
    return ok


def _hide(paths: list[str]) -> list[str]:
    """Mount empty, unreadable file systems over the grader's files (in our namespace)."""
    failed = []
    for path in paths:
        if os.path.isdir(path):
            ok = _mount("none", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=000")
        elif os.path.exists(path):
            ok = _mount("/dev/null", path, None, MS_BIND, None)
        else:
            continue
        if not ok:
            failed.append(path)
    return failed


def _blocking_ancestor(path: str) -> tuple[str, str] | None:
    """The first ancestor others cannot enter, and the next component below it."""
    parts = os.path.abspath(path).split(os.sep)[1:]
    current = "/"
    for part in parts:
        try:
            if not os.stat(current).st_mode & 0o001:
                return current, part
        except OSError:
            return None
        current = os.path.join(current, part)
    return None


def _open_runtime() -> list[str]:
    """Let an unprivileged user reach the interpreter's own files (e.g. under /root).

    For each folder on sys.path behind a folder others cannot enter, that folder is
    covered with an empty, enterable tmpfs into which only the needed subtree is bound.
    """
    needed = {p for p in sys.path + [sys.prefix, sys.base_prefix, os.path.dirname(torch.__file__)]
              if p and os.path.isdir(p)}
    blocked: dict[str, set[str]] = {}
    for path in needed:
        found = _blocking_ancestor(path)
        if found:
            blocked.setdefault(found[0], set()).add(found[1])
    notes = []
    for ancestor, parts in blocked.items():
        fds = {part: os.open(os.path.join(ancestor, part), os.O_PATH) for part in parts}
        if not _mount("none", ancestor, "tmpfs", MS_NOSUID | MS_NODEV, "size=4k,mode=0755"):
            notes.append(f"could not open {ancestor} to the sandbox's user")
            continue
        for part, fd in fds.items():
            os.mkdir(os.path.join(ancestor, part), 0o755)
            _mount(f"/proc/self/fd/{fd}", os.path.join(ancestor, part), None, MS_BIND | MS_REC, None)
            os.close(fd)
    return notes


def isolate(config: dict) -> list[str]:
    """Namespaces, hidden files, private /tmp, limits, unprivileged user. Returns notes."""
    notes = []
    uid = config.get("uid")
    root = os.geteuid() == 0
    flags = CLONE_NEWNS | CLONE_NEWNET
    if not root:
        flags |= CLONE_NEWUSER
    namespaced = _libc.unshare(flags) == 0
    if namespaced and not root:
        real_uid, real_gid = config["host_uid"], config["host_gid"]
        try:
            with open("/proc/self/setgroups", "w") as f:
                f.write("deny")
            with open("/proc/self/uid_map", "w") as f:
                f.write(f"0 {real_uid} 1")
            with open("/proc/self/gid_map", "w") as f:
                f.write(f"0 {real_gid} 1")
        except OSError:
            namespaced = False
    if namespaced:
        _mount("none", "/", None, MS_REC | MS_PRIVATE, None)
        if root and uid is not None:
            notes += _open_runtime()
        failed = _hide(config.get("hide", []))
        if failed:
            notes.append("reduced isolation: could not hide " + ", ".join(failed))
        owner = f",uid={uid},gid={uid}" if root and uid is not None else ""
        if not _mount("none", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
                      f"size={config.get('tmp_bytes', 64 << 20)},mode=0700{owner}"):
            notes.append("reduced isolation: no private /tmp")
    else:
        notes.append("reduced isolation: no mount namespace here, so the reference and the "
                     "hidden checks are not hidden from the submission (run the grader as root "
                     "or enable unprivileged user namespaces)")
    os.chdir("/tmp")
    limits = config.get("limits", {})
    for name, value in limits.items():
        which = getattr(resource, name)
        soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            notes.append(f"reduced isolation: could not set {name}")
    if root and uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    elif root:
        notes.append("reduced isolation: the submission runs as root")
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    return notes


def _install_spies() -> None:
    """Note calls of the built-in attention the contract forbids, however they are reached."""
    F = torch.nn.functional

    def spy(name, fn):
        def wrapper(*args, **kwargs):
            FORBIDDEN_HITS.append(name)
            return fn(*args, **kwargs)
        return wrapper
    F.scaled_dot_product_attention = spy("scaled_dot_product_attention",
                                         F.scaled_dot_product_attention)
    F.multi_head_attention_forward = spy("multi_head_attention_forward",
                                         F.multi_head_attention_forward)
    torch.nn.MultiheadAttention.forward = spy("torch.nn.MultiheadAttention",
                                              torch.nn.MultiheadAttention.forward)


class _ForbiddenKernels(probes.TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__
        if any(f in name for f in probes.FORBIDDEN_OPS):
            FORBIDDEN_HITS.append(f"aten::{name.split('.')[0]}")
        return func(*args, **(kwargs or {}))


# ----------------------------------------------------------------------------------------
# Serving

class Channel:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._sendall = sock.sendall
        self._recv_into = sock.recv_into

    def recv_exact(self, n: int) -> bytes:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self._recv_into(view[got:])
            if k == 0:
                raise EOFError
            got += k
        return bytes(buf)

    def recv(self):
        return protocol.unpack(protocol.read_frame(self.recv_exact))

    def send(self, value) -> None:
        try:
            frame = protocol.pack(value)
        except (protocol.ProtocolError, TypeError, ValueError) as e:
            frame = protocol.pack({"bad": f"the result could not be sent back: {e}"[:400]})
        self._sendall(frame)


def _load(message: dict) -> tuple[types.ModuleType | None, dict]:
    module = types.ModuleType("mha")
    module.__file__ = message.get("filename", "mha.py")
    sys.modules["mha"] = module
    try:
        code = compile(message["source"], module.__file__, "exec", dont_inherit=True)
        exec(code, module.__dict__)
    except BaseException as e:       # SystemExit and KeyboardInterrupt included
        return None, {"raised": probes.describe(e)}
    names = [n for n in API if callable(module.__dict__.get(n))]
    return module, {"names": names}


def serve(channel: Channel, notes: list[str]) -> None:
    channel.send({"ready": True, "notes": notes})
    message = channel.recv()
    module, answer = _load(message)
    channel.send(answer)
    if module is None:
        return
    guard = _ForbiddenKernels()
    while True:
        request = channel.recv()
        FORBIDDEN_HITS.clear()
        try:
            with guard:
                result = {"ok": probes.PROBES[request["probe"]](module, **request["kwargs"])}
        except probes.ProbeError as e:
            result = {"bad": str(e)}
        except BaseException as e:
            result = {"raised": probes.describe(e)}
        result["forbidden"] = sorted(set(FORBIDDEN_HITS))
        channel.send(result)


def child_main(sock: socket.socket, out_fd: int, err_fd: int, config: dict) -> None:
    """Entry point of a freshly forked sandbox process. Never returns."""
    status = 0
    try:
        os.setsid()
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.close(out_fd)
        os.close(err_fd)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
        os.environ.clear()
        os.environ.update({"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8",
                           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
        notes = isolate(config)
        sys.path[:] = [p for p in sys.path if p not in config.get("hide_sys_path", [])]
        _install_spies()
        serve(Channel(sock), notes)
    except BaseException:
        status = 3
    os._exit(status)
