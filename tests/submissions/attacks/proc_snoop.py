# ATTACK: snoops /proc for the grader: reads /proc/<ppid>/environ and cmdline, every visible process's environ, cmdline, cwd, root and open files, walks /proc/<pid>/root/ and /proc/<pid>/cwd/ for solutions/mha.py or any mha-like file, and delegates every API call to the first reference it finds.
# HONEST: 0
# EXPECT: the sandbox sees only its own processes (own PID namespace, fresh /proc) and none of the grader's files; nothing is found, every call raises NotImplementedError; score 0; grader exit status 0.
import os
import types

FOUND = {}


def _read(path, limit=1 << 20):
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


def _looks_like_reference(text):
    return text and b"def masked_softmax" in text and b"class MultiHeadAttention" in text


def _snoop():
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    pids = [str(os.getppid())] + [p for p in pids if p != str(os.getpid())]
    for pid in pids:
        for what in ("environ", "cmdline"):
            FOUND.setdefault(what, []).append(_read(f"/proc/{pid}/{what}"))
        for base in (f"/proc/{pid}/root", f"/proc/{pid}/cwd"):
            for rel in ("solutions/mha.py", "work/main/solutions/mha.py", "mha.py",
                        "tests/submissions/correct/einsum.py"):
                text = _read(os.path.join(base, rel))
                if _looks_like_reference(text):
                    return text
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.endswith(".py"):
                    text = _read(f"/proc/{pid}/fd/{fd}")
                    if _looks_like_reference(text):
                        return text
        except OSError:
            pass
    return None


_source = _snoop()
_ref = None
if _source:
    _ref = types.ModuleType("ref")
    exec(compile(_source, "ref.py", "exec"), _ref.__dict__)


def _delegate(name):
    def call(*args, **kwargs):
        if _ref is None:
            raise NotImplementedError(name)
        return getattr(_ref, name)(*args, **kwargs)
    return call


head_weight_shape = _delegate("head_weight_shape")
project = _delegate("project")
project_heads = _delegate("project_heads")
split_heads = _delegate("split_heads")
concat_heads = _delegate("concat_heads")
masked_softmax = _delegate("masked_softmax")
attention_pool = _delegate("attention_pool")


class MultiHeadAttention:
    def __new__(cls, *args, **kwargs):
        if _ref is None:
            raise NotImplementedError("MultiHeadAttention")
        return _ref.MultiHeadAttention(*args, **kwargs)
