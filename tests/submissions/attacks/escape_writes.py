# ATTACK: tries to leave a mark outside its sandbox: writes ATTACK_ESCAPE_MARKER files in /, /etc, /usr, /var/tmp, /dev/shm, /tmp, $HOME, next to every mount point it can see and every directory the grader names in /proc, climbs out of its root with chdir("..") and chroot tricks, tries setuid(0), and connects to an abstract Unix socket (@autograder-attack-listener), a Unix socket under /tmp and TCP ports on 127.0.0.1 to report home.
# HONEST: 0
# EXPECT: only the sandbox's private /tmp and /dev/shm are writable and both vanish with it; no marker appears anywhere the grader can see; no listener outside the sandbox receives a connection (own network namespace); score 0; grader exit status 0.
import os
import socket

MARK = "ATTACK_ESCAPE_MARKER"


def _try_write(folder):
    try:
        with open(os.path.join(folder, MARK), "w") as f:
            f.write("escaped\n")
    except OSError:
        pass


def _places():
    places = {"/", "/etc", "/usr", "/var/tmp", "/dev/shm", "/tmp", os.path.expanduser("~"),
              os.getcwd(), "/work", "/root", "/home"}
    try:
        with open("/proc/self/mountinfo") as f:
            places |= {line.split()[4] for line in f}
    except OSError:
        pass
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        for link in ("cwd", "root"):
            try:
                places.add(os.readlink(f"/proc/{pid}/{link}"))
            except OSError:
                pass
    return places


def _climb():
    try:
        os.setuid(0)
    except OSError:
        pass
    try:
        for _ in range(64):
            os.chdir("..")
        _try_write(".")
        os.chroot(".")
    except OSError:
        pass


def _call_home():
    for address in ("\0autograder-attack-listener", "/tmp/autograder-attack.sock"):
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(0.5)
            s.connect(address)
            s.sendall(b"escaped")
        except OSError:
            pass
    for port in (22, 80, 443, 8000, 8080, 8786, 8888):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).sendall(b"escaped")
        except OSError:
            pass


for _folder in _places():
    _try_write(_folder)
_climb()
_call_home()


def _stub(*args, **kwargs):
    raise NotImplementedError


head_weight_shape = project = project_heads = split_heads = concat_heads = _stub
masked_softmax = attention_pool = _stub


class MultiHeadAttention:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError
