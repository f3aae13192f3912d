# ATTACK: memory spread over many processes, each under every per-process limit: at import it forks 12 children one after another, each of which fills 256 MiB of its own (well under RLIMIT_AS) and sleeps; together 3 GiB, three times a 1 GiB limit, while the first process stays small; stubs otherwise.
# HONEST: 0
# EXPECT: the sandbox's processes are counted together (by its cgroup where there is one, else by the zygote's watch, which finds them by PID namespace or user), so it is stopped as over the memory limit; score 0; grader exit status 0.
import os
import time

_EACH, _CHILDREN = 256 << 20, 12
for _ in range(_CHILDREN):
    if os.fork() == 0:
        _held = b"\x01" * _EACH                        # every page touched
        while True:
            time.sleep(60)
    time.sleep(0.15)
time.sleep(3)


def _stub(*args, **kwargs):
    raise NotImplementedError("not stopped")


head_weight_shape = project = project_heads = split_heads = concat_heads = _stub
masked_softmax = attention_pool = _stub


class MultiHeadAttention:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError
