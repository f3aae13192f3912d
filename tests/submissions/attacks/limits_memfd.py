# ATTACK: anonymous files no process's size shows: forks 8 children, each of which creates memfds (memfd_create) of 8 MiB (under RLIMIT_FSIZE), fills them with os.write, keeps the descriptors (none mapped, so no RSS and no address space) up to 96 each, 6 GiB in all, and sleeps; the parent waits for them and its stubs report how much was held.
# HONEST: 0
# EXPECT: where a cgroup limits the sandbox the pages are charged to it and the sandbox is stopped as over the memory limit; where none is, memfd_create is refused (EPERM) and nothing is held ("held 0 MiB"); score 0; grader exit status 0.
import os
import time

_EACH, _PER_CHILD, _CHILDREN = 8 << 20, 96, 8
_read, _write = os.pipe()
for _ in range(_CHILDREN):
    if os.fork() == 0:
        fds, block = [], b"\x5a" * _EACH
        try:
            for i in range(_PER_CHILD):
                fd = os.memfd_create(f"hold{i}")
                os.write(fd, block)
                fds.append(fd)
        except OSError:
            pass
        os.write(_write, len(fds).to_bytes(4, "little"))
        while True:
            time.sleep(60)
os.close(_write)
HELD = 0
for _ in range(_CHILDREN):          # one count from each child (EOF if all died)
    chunk = os.read(_read, 4)
    if len(chunk) < 4:
        break
    HELD += int.from_bytes(chunk, "little") * _EACH


def _stub(*args, **kwargs):
    raise ValueError(f"held {HELD >> 20} MiB in memfds")


head_weight_shape = project = project_heads = split_heads = concat_heads = _stub
masked_softmax = attention_pool = _stub


class MultiHeadAttention:
    def __init__(self, *args, **kwargs):
        _stub()
