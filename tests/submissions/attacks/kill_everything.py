# ATTACK: tries to kill the grader: kill(-1, SIGKILL) from a child, SIGKILL to its parent, to process group 0 and to every pid from 1 to 70000 but its own, SIGSTOP to the same, then carries on importing as if nothing happened.
# HONEST: 0
# EXPECT: the sandbox can signal only its own processes (own user, own PID namespace); the grader, the zygote and other sandboxes carry on; score 0; grader exit status 0.
import os
import signal

if os.fork() == 0:
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for target in [-1, os.getppid()] + [p for p in range(1, 70000) if p != os.getpid()]:
            try:
                os.kill(target, sig)
            except OSError:
                pass
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
