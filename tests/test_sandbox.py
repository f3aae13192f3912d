"""The sandbox: what a submission's code can and cannot do, and how the grader survives it.

One zygote serves the whole module (its start-up is the expensive part); every test forks
a fresh sandbox from it, as grading does, with short deadlines.
"""
from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

from autograder import api
from autograder.sandbox import host, probes, protocol, results, spawn
from autograder.sandbox.host import Sandbox, StudentError, Zygote
from sandbox_users import UID_BASE, sandbox_processes

ROOT = api.PROJECT
MEMORY = 1 << 30                     # small, so the memory watchdog is quick to test
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="full isolation needs root here")


@pytest.fixture(scope="module")
def zygote():
    z = Zygote(hide=[str(ROOT / d) for d in ("autograder", "solutions", "tests")],
               memory_bytes=MEMORY)
    z.wait_ready()
    yield z
    z.close()


def sandbox(zygote, source: str, *, rules: bool = False, **options) -> Sandbox:
    """A sandbox for ``source``; without the code rules by default: these tests try the
    isolation itself (the rules are tried in test_rules and through the grader)."""
    config = {"hide": [str(ROOT)], "limits": dict(api.LIMITS, RLIMIT_AS=api.MEMORY),
              "memory_bytes": MEMORY, "host_uid": os.getuid(), "host_gid": os.getgid(),
              "rules": rules}
    options = {"import_timeout": 10.0, "probe_timeout": 3.0, "group_budget": 6.0,
               "budget": 20.0, **options}
    return Sandbox(zygote, textwrap.dedent(source).encode(), "mha.py", config, **options)


def value(box: Sandbox, fn: str = "head_weight_shape", *args, group: str = "g"):
    """Call fn in the sandbox; its return value (the submission reports through it)."""
    answer = box.probe("call", group=group, fn=fn, args=list(args))
    assert "value" in answer, answer
    return answer["value"]


def uids_alive(zygote) -> set[int]:
    """Users of the live processes that belong to this zygote's sandboxes."""
    return set(sandbox_processes(zygote).values())


def wait_until(predicate, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


# -- deadlines and crashes ---------------------------------------------------------------

def test_a_hanging_call_is_killed_and_its_group_fails_fast(zygote):
    """Does a call that never returns end on the grader's clock, and the rest of its part at once?"""
    box = sandbox(zygote, """
        def head_weight_shape(*a):
            while True:
                pass
        def project(*a):
            return 1
    """)
    start = time.monotonic()
    with pytest.raises(StudentError, match="timed out during the check"):
        value(box, group="shape")
    assert time.monotonic() - start < 6
    start = time.monotonic()
    with pytest.raises(StudentError, match="earlier check of this part timed out"):
        value(box, group="shape")
    assert time.monotonic() - start < 0.5
    assert value(box, "project", group="project") == 1          # another part: a new worker
    box.close()


def test_an_endless_import_is_killed_once(zygote):
    """Is an import that never ends killed, and reported to every check without waiting again?"""
    start = time.monotonic()
    box = sandbox(zygote, "while True:\n    pass\n", import_timeout=2.0)
    assert "timed out while importing" in box.load_problem
    assert time.monotonic() - start < 5
    start = time.monotonic()
    for group in ("a", "b"):
        with pytest.raises(StudentError, match="timed out while importing"):
            value(box, group=group)
    assert time.monotonic() - start < 0.5
    box.close()


def test_sys_exit_at_import_is_named(zygote):
    """Does sys.exit(0) while importing read as that, not as a pass?"""
    box = sandbox(zygote, "import sys\nprint('{\"score\": 100}')\nsys.exit(0)\n")
    assert "exited while importing (SystemExit 0)" in box.load_problem
    box.close()


def test_a_crashing_worker_is_restarted_up_to_a_cap(zygote):
    """Does os._exit in a call give a clear error, a fresh worker, and a cap on restarts?"""
    box = sandbox(zygote, """
        import os
        def head_weight_shape(*a):
            os.write(1, b"PASSED\\n")
            os._exit(0)
        def project(*a):
            return 2
    """, restarts=2)
    with pytest.raises(StudentError, match=r"exited \(status 0\) during the check"):
        value(box, group="a")
    assert value(box, "project", group="b") == 2
    for _ in range(2):
        with pytest.raises(StudentError, match="exited"):
            value(box, group="c")
    with pytest.raises(StudentError, match="crashed too often"):
        value(box, "project", group="d")
    box.close()


def test_the_submission_budget_bounds_everything(zygote):
    """Once a submission has used its time, does every further probe fail at once?"""
    box = sandbox(zygote, """
        import time
        def head_weight_shape(*a):
            time.sleep(60)
    """, budget=2.0, probe_timeout=10.0)
    with pytest.raises(StudentError, match="timed out"):
        value(box, group="a")
    start = time.monotonic()
    with pytest.raises(StudentError, match="time budget"):
        value(box, group="b")
    assert time.monotonic() - start < 0.5
    box.close()


def test_memory_error_is_named(zygote):
    """Is running into the address-space limit reported as the memory limit?"""
    box = sandbox(zygote, """
        def head_weight_shape(*a):
            return bytearray(8 << 30)
    """)
    raised = box.probe("call", group="g", fn="head_weight_shape", args=[])["raised"]
    assert raised["type"] == "MemoryError" and "memory limit" in raised["message"]
    box.close()


def test_the_memory_watchdog_kills_a_hog(zygote):
    """Is a sandbox that holds more memory than allowed (whatever its rlimits) killed?"""
    box = sandbox(zygote, """
        def head_weight_shape(*a):
            chunks = []
            while True:
                chunks.append(bytearray(64 << 20))
    """, probe_timeout=10.0)
    with pytest.raises(StudentError, match="memory limit"):
        value(box)
    box.close()


# -- output --------------------------------------------------------------------------------

def test_a_print_flood_is_drained_and_capped(zygote):
    """Does a submission printing 50 MB neither block the grader nor fill its memory?"""
    box = sandbox(zygote, """
        import os
        os.write(1, b"x" * (30 << 20))
        os.write(2, b"\\x1b[2K\\r\\x00" * (2 << 20))
        def head_weight_shape(*a):
            print("y" * 100000)
            return 3
    """)
    assert value(box) == 3
    text = box.output()
    assert len(text) < 300_000 and "bytes left out" in text
    assert "\x1b" not in text and "\x00" not in text and "\r" not in text
    box.close()


# -- what the sandbox can see and touch -----------------------------------------------------

REPORT = """
    import os, sys, socket
    def head_weight_shape(*a):
        def readable(path):
            try:
                with open(path, "rb") as f:
                    return len(f.read(10)) >= 0
            except OSError:
                return False
        def writable(folder):
            try:
                with open(os.path.join(folder, "SANDBOX_TEST_MARKER"), "w") as f:
                    f.write("x")
                return True
            except OSError:
                return False
        return (
            str(sorted(p for p in os.listdir("/proc") if p.isdigit())),
            os.getppid(), os.getuid(), os.getcwd(),
            str(sorted(os.environ)),
            str(sorted(os.listdir("/proc/self/fd"))),
            str([p for p in ARGS if readable(p)]),
            str([p for p in ("/", "/etc", "/usr", "/var/tmp", "/root", ROOT) if writable(p)]),
            writable("/tmp"), writable("/dev/shm"),
            str([m for m in sys.modules if m.startswith(("autograder", "solutions", "checks"))]),
            str([name for _, name in socket.if_nameindex()]),
        )
"""


@needs_root
def test_the_sandbox_sees_only_itself(zygote):
    """Own PID namespace, own user, scrubbed environment, no inherited descriptors, no
    grader files, nothing writable but its private /tmp and /dev/shm, no network."""
    secret = [str(ROOT / "solutions" / "mha.py"), str(ROOT / "autograder" / "rubric.toml"),
              str(ROOT / "tests" / "test_sandbox.py"), "/etc/shadow", f"/proc/{os.getpid()}/environ",
              f"/proc/{zygote.proc.pid}/cmdline"]
    box = sandbox(zygote, f"ARGS = {secret!r}\nROOT = {str(ROOT)!r}\n" + textwrap.dedent(REPORT))
    (procs, ppid, uid, cwd, env, fds, readable, writable, tmp, shm, modules, nets) = value(box)
    assert procs == "['1']" and ppid == 0                      # nothing of the host's
    assert uid >= UID_BASE and cwd == "/tmp"
    assert env == str(sorted(["HOME", "LANG", "LOGNAME", "MKL_NUM_THREADS", "OMP_NUM_THREADS",
                              "PATH", "USER"]))
    assert len(eval(fds)) <= 5                                  # 0, 1, 2, the channel, listdir's
    assert readable == "[]"
    assert writable == "[]" and tmp and shm
    assert modules == "[]"
    assert nets == "['lo']"
    assert not (ROOT / "SANDBOX_TEST_MARKER").exists()
    assert not os.path.exists("/tmp/SANDBOX_TEST_MARKER")
    assert not os.path.exists("/dev/shm/SANDBOX_TEST_MARKER")
    reduced = [n for n in box.notes if not n.startswith("sandbox limits in force")]
    assert reduced == []                                        # full isolation: nothing reduced
    box.close()


def test_the_usual_devices_work(zygote):
    """/dev/null, /dev/zero and /dev/urandom behave as everywhere (code may print to null)."""
    box = sandbox(zygote, """
        def head_weight_shape(*a):
            with open("/dev/null", "w") as f:
                f.write("x")
            with open("/dev/urandom", "rb") as f, open("/dev/zero", "rb") as g:
                return len(f.read(8)) + len(g.read(8))
    """)
    assert value(box) == 16
    box.close()


def test_network_is_unreachable(zygote):
    """Can a submission reach a listener of the grader's machine (abstract Unix socket, TCP)?"""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0autograder-test-listener")
    listener.listen(1)
    tcp = socket.create_server(("127.0.0.1", 0))
    port = tcp.getsockname()[1]
    box = sandbox(zygote, f"""
        import socket
        def head_weight_shape(*a):
            reached = []
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect("\\0autograder-test-listener")
                reached.append("unix")
            except OSError:
                pass
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=1)
                reached.append("tcp")
            except OSError:
                pass
            return str(reached)
    """)
    try:
        assert value(box) == "[]"
    finally:
        box.close()
        listener.close()
        tcp.close()


def test_no_process_outlives_its_sandbox(zygote):
    """Are a daemon that ignores SIGTERM and a fork bomb gone once the sandbox is closed?"""
    before = uids_alive(zygote)
    box = sandbox(zygote, """
        import os, signal, time
        def _daemon():
            if os.fork() == 0:
                os.setsid()
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                if os.fork() == 0:
                    while True:
                        time.sleep(1)
                os._exit(0)
        _daemon()
        for _ in range(200):
            try:
                if os.fork() == 0:
                    time.sleep(600)
            except OSError:
                break
        def head_weight_shape(*a):
            return len([p for p in os.listdir("/proc") if p.isdigit()])
    """)
    assert value(box) > 2
    during = uids_alive(zygote) - before
    assert during
    box.close()
    assert wait_until(lambda: not (uids_alive(zygote) & during)), "processes of the sandbox survived it"


# -- the channel ----------------------------------------------------------------------------

def test_forged_frames_on_the_channel_are_rejected(zygote):
    """A thread that answers before the worker, with the run's nonce: does it win anything?"""
    box = sandbox(zygote, """
        import gc, sys, threading, time, torch
        def _forge():
            protocol = sys.modules["protocol"]
            seen = 0
            while True:
                channel = next((o for o in gc.get_objects() if type(o).__name__ == "Channel"), None)
                if channel is not None and channel.seq != seen:
                    seen = channel.seq
                    channel._sendall(protocol.pack({"ok": {"value": 7, "after": []},
                                                    "nonce": channel.nonce, "seq": seen - 1}))
                time.sleep(0.0005)
        threading.Thread(target=_forge, daemon=True).start()
        def head_weight_shape(*a):
            time.sleep(0.2)
            return 1
    """)
    with pytest.raises(StudentError, match="does not answer this request"):
        value(box)
    box.close()


def test_results_of_the_wrong_form_are_the_submissions_fault(zygote):
    """A patched probe that answers a short `runs` list: an error for the submission, not a
    crash of the grader nor a comparison skipped."""
    box = sandbox(zygote, """
        import sys
        sys.modules["probes"].PROBES["mha"] = lambda api, spec: {"params": [], "runs": []}
        def head_weight_shape(*a):
            return 1
    """)
    run = {"queries": torch.zeros(1, 2, 4), "keys": torch.zeros(1, 2, 4),
           "values": torch.zeros(1, 2, 4)}
    with pytest.raises(StudentError, match="wrong form"):
        box.probe("mha", group="mha", spec={"init": {"d_model": 4, "num_heads": 2},
                                             "runs": [run]})
    box.close()


def test_every_probe_has_a_form():
    """Is every probe's answer checked for form before a check reads it?"""
    assert set(probes.PROBES) <= set(results.FORMS)


def test_forms_reject_what_would_crash_or_skip_a_check():
    kw = {"spec": {"init": {"d_model": 4, "num_heads": 2}, "runs": [{}, {}]}}
    with pytest.raises(results.ResultError):
        results.check("mha", kw, {"params": [], "runs": [{"out": torch.zeros(1), "weights": None}]})
    with pytest.raises(results.ResultError):
        results.check("call", {"args": [1]}, {"value": {"a": 1}, "after": [None]})
    with pytest.raises(results.ResultError):       # an input more (or fewer) than was sent
        results.check("call", {"args": [1]}, {"value": 1, "after": [None, None]})
    with pytest.raises(results.ResultError):       # the old self-reported verdict is no form
        results.check("call", {"args": [1]}, {"value": 1, "mutated": []})
    with pytest.raises(results.Refused, match="nope"):
        results.check("call", {"args": []}, {"bad": "nope"})
    info = results.check("call", {"args": []}, {"raised": {"type": "X" * 500, "message": "m"}})
    assert len(info["raised"]["type"]) == 100 and info["raised"]["value_error"] is False


def test_the_references_answers_have_their_form():
    """The reference's sandbox answers a carried question with a value and its cost, or one
    gradient (or None) per tensor argument; anything else is refused before it is relayed."""
    value = {"question": {"fn": "split_heads", "mode": "value", "args": [torch.ones(2, 4), 2]}}
    vjp = {"question": dict(value["question"], mode="vjp", grads=[torch.ones(2, 2, 2)])}
    cost = {"ops": {"view": 1}, "flops": 0, "work": 0, "sync": []}   # OpTrace.cost()
    assert results.check("answer", value, {"answer": torch.ones(2, 2, 2), "cost": cost})
    assert results.check("answer", vjp, {"answer": [torch.ones(2, 4)]})
    for kw, forged in [(value, {"answer": torch.ones(1)}),                       # no cost
                       (value, {"answer": torch.ones(1), "cost": dict(cost, flops="0")}),
                       (value, {"answer": [torch.ones(1)], "cost": cost}),       # a list
                       (value, {"answer": torch.ones(1, device="meta"), "cost": cost}),
                       (vjp, {"answer": [torch.ones(2, 4), None]}),              # one too many
                       (vjp, {"answer": [1]})]:
        with pytest.raises(results.ResultError):
            results.check("answer", kw, forged)


def round_trip(value):
    return protocol.unpack(protocol.pack(value)[protocol._PREFIX.size:])


def same(a, b) -> bool:
    """Equal with the types too: a tuple is not a list, 1 is not True nor 1.0."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return (a.dtype, a.shape, a.device) == (b.dtype, b.shape, b.device) and \
            (a.device.type == "meta" or torch.equal(a, b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


def test_the_protocol_gives_back_what_was_sent_types_and_all():
    """Plain values inside lists and dicts take a quicker path than the rest: each kind
    comes back as it went, at the edges of what JSON carries as it is (2**53)."""
    edge = 2**53
    grad = torch.arange(6.0, requires_grad=True) * 2
    values = [None, True, 0, 1.0, "x", b"raw", edge, edge + 1, -edge - 1, float("inf"),
              [True, 1, 1.0, "1", None, edge, edge + 1, -edge - 1, float("-inf")],
              (1, (2, [3, {"a": 4}])), {"k": [edge + 1, (True, 0)], "t": torch.ones(2, 3)},
              torch.arange(6.0).reshape(2, 3).t(), torch.tensor([True, False]),
              torch.ones(2, dtype=torch.bfloat16), torch.zeros(0, 3), torch.tensor(7),
              torch.ones(2, 2, device="meta"), torch.ones(3, dtype=torch.complex64)]
    for value in values:
        assert same(round_trip({"v": value}), {"v": value}), value
    back = round_trip([grad, torch.Size([2, 3]), {1: "one"}])
    assert same(back, [grad.detach(), (2, 3), {"1": "one"}])
    assert round_trip([float("nan")])[0] != round_trip([float("nan")])[0]


def test_the_protocol_limits_depth_for_plain_values_too():
    """A plain value one level too deep is refused, sent alone or among others."""
    nested = 1
    for _ in range(protocol.MAX_DEPTH):
        nested = [nested]
    protocol.pack(nested)                       # the int sits at MAX_DEPTH: allowed
    for too_deep in ([nested], [[nested, "x"]], {"d": nested}):
        with pytest.raises(protocol.ProtocolError, match="too deeply"):
            protocol.pack(too_deep)
    header = {"list": [1]}
    for _ in range(protocol.MAX_DEPTH):
        header = {"list": [header]}
    with pytest.raises(protocol.ProtocolError, match="too deeply"):
        protocol.decode(json.dumps(header).encode(), [])


def test_the_overflow_watch_tells_non_finite_values_in_every_dtype():
    """``probes._infinite`` reads a tensor's float64 sum first: finite values whose sum
    overflows are still finite, a NaN or an infinity anywhere is not."""
    huge = torch.tensor([1e308, 1e308, -1.0], dtype=torch.float64)
    assert not probes._infinite(huge)
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        for bad in (float("nan"), float("inf"), float("-inf")):
            t = torch.zeros(3, 4, dtype=dtype)
            t[2, 1] = bad
            assert probes._infinite(t) and probes._infinite(t.t()), (dtype, bad)
        assert not probes._infinite(torch.full((3,), 100.0, dtype=dtype))
    pair = torch.tensor([float("inf"), float("-inf")])          # a sum of NaN
    assert probes._infinite(pair)
    assert not probes._infinite(torch.ones(2, dtype=torch.int64))
    assert not probes._infinite(torch.ones(2, device="meta"))
    assert probes._infinite(float("nan")) and not probes._infinite(1e308)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert probes._infinite(torch.tensor([1.0, float("nan")], dtype=torch.float16))


def test_sending_a_tensor_is_no_host_read_of_the_students():
    """The protocol reads a tensor's bytes with torch's own method, not the one the probes
    count host reads with (an answer sent while a trace is open counts nothing)."""
    with probes.OpTrace("cpu") as trace:
        protocol.pack({"out": torch.ones(3), "grad": torch.ones(2, requires_grad=True)})
    assert "numpy" not in trace.counts
    with probes.OpTrace("cpu") as trace:
        torch.ones(3).numpy()
    assert trace.counts.get("numpy") == 1


def frame(header: bytes, sizes: bytes = b"[]", blobs: bytes = b"") -> bytes:
    return header + b"\n" + sizes + b"\n" + blobs


@pytest.mark.parametrize("body", [
    frame(b"[" * 100_000 + b"]" * 100_000),                       # nesting deeper than JSON can
    frame(b'{"tensor": {"dtype": "bool", "shape": [2], "blob": 0}}', b"[2]", b"\x00\x07"),
    frame(b'{"tensor": {"dtype": "float64", "shape": [3], "blob": 0}}', b"[8]", b"\x00" * 8),
    frame(b'{"tensor": {"dtype": "object", "shape": [1], "blob": 0}}', b"[8]", b"\x00" * 8),
    frame(b'{"pickle": "gASVAAAAAAAAAACMBXBvc2l4lIwGc3lzdGVtlJOUjAJscpSFlFKULg=="}'),
    frame(b'{"int": "' + b"9" * 5000 + b'"}'),
    frame(b'{"dict": {"a": 1}}', b"[1, 2]", b"x"),
    b"no newlines at all",
])
def test_the_protocol_refuses_malformed_frames(body):
    with pytest.raises(protocol.ProtocolError):
        protocol.unpack(body)


def test_the_protocol_refuses_oversized_frames():
    header = struct.pack(">II", protocol.MAX_FRAME + 1, 0)
    with pytest.raises(protocol.ProtocolError):
        protocol.read_frame(lambda n, data=iter([header]): next(data))


# -- what the zygote holds ------------------------------------------------------------------

def last_line_of_isolated_python(code: str) -> str:
    """Run code in a fresh ``python -I`` (as the zygote is started); its last line of output."""
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         timeout=120, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().split("\n")[-1]


def test_the_zygote_cannot_import_the_grader_however_it_is_installed(tmp_path):
    """Does the zygote's interpreter drop what an installation added for the project (an
    editable install's finder, the project's root on the path), so that it finds none of
    the project's packages, while other finders stay?"""
    site = tmp_path / "site"
    site.mkdir()
    (site / "project_finder.py").write_text(textwrap.dedent(f"""
        import sys
        from importlib.machinery import PathFinder
        class Finder:                      # what pip install -e puts on sys.meta_path
            @classmethod
            def find_spec(cls, name, path=None, target=None):
                if name in ("autograder", "solutions", "assignments"):
                    return PathFinder.find_spec(name, [{str(ROOT)!r}])
        sys.meta_path.append(Finder)
    """))
    (site / "other_finder.py").write_text(textwrap.dedent("""
        import sys
        class Other:                       # somebody else's finder: it must stay
            @classmethod
            def find_spec(cls, name, path=None, target=None):
                return None
        sys.meta_path.append(Other)
    """))
    code = textwrap.dedent(f"""
        import importlib.util, sys
        sys.path.insert(0, {str(site)!r})
        import project_finder, other_finder
        sys.path += [{str(ROOT)!r}]           # an older install: the root on the path
        before = importlib.util.find_spec("solutions") is not None
        sys.path.insert(0, {str(spawn.SANDBOX_DIR)!r})
        import zygote
        found = [n for n in zygote.PROJECT_PACKAGES if importlib.util.find_spec(n)]
        kept = any(type(f).__name__ == "type" and f.__name__ == "Other" for f in sys.meta_path)
        print(before, found, "project_finder" in sys.modules, kept)
    """)
    assert last_line_of_isolated_python(code) == "True [] False True"


def test_the_zygote_keeps_a_virtual_environment_made_in_the_clone():
    """A venv made in the clone (``python -m venv .venv``, then the README's commands) holds
    torch in site-packages under the project's folder: does the zygote keep the interpreter's
    own site-packages on the path while it drops the project's root? (Before, it dropped every
    path under the project, could not import torch, and the demo died with a broken pipe.)"""
    venv_site = str(ROOT / ".venv" / "lib" / "python3" / "site-packages")
    code = textwrap.dedent(f"""
        import site, sys
        real = site.getsitepackages()
        site.getsitepackages = lambda: [{venv_site!r}, *real]   # as in a venv in the clone
        sys.path += [{venv_site!r}, {str(ROOT)!r}]
        sys.path.insert(0, {str(spawn.SANDBOX_DIR)!r})
        import zygote
        print({venv_site!r} in sys.path, {str(ROOT)!r} in sys.path)
    """)
    assert last_line_of_isolated_python(code) == "True False"


@pytest.mark.parametrize("refused", [False, True])
def test_built_in_attention_is_watched_even_where_torch_refuses_the_kernels(refused):
    """Are calls of scaled_dot_product_attention noted, by its replaced kernel, or by the
    Python spy where this torch refuses to replace kernels, with the same values either way?"""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(spawn.SANDBOX_DIR)!r})
        import torch, worker
        if {refused!r}:
            def refuse(*args, **kwargs):
                raise RuntimeError("this torch does not let Python replace aten kernels")
            torch.library.Library.impl = refuse
        watched = worker.watch_forbidden_kernels()
        worker._install_spies()
        q = torch.randn(2, 3, 4, 5, dtype=torch.float64)
        keep = torch.rand(2, 1, 4, 4) > 0.3
        keep[..., 0] = True
        out = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=keep)
        w = torch.softmax((q @ q.transpose(-2, -1) / 5 ** 0.5).masked_fill(~keep, -torch.inf), -1)
        print("scaled_dot_product_attention" in watched, sorted(set(worker.FORBIDDEN_HITS)),
              torch.allclose(out, w @ q, atol=1e-12))
    """)
    line = last_line_of_isolated_python(code)
    if refused:
        assert line == "False ['scaled_dot_product_attention'] True"
    else:
        assert line == "True ['aten::scaled_dot_product_attention'] True"


def test_the_zygote_forgets_an_editable_install_of_the_grader():
    """Does the zygote's start drop a finder (as an editable install's .pth installs) that would
    import the grader's packages, its module and its path hooks, and keep the usual finders?"""
    planted = textwrap.dedent(f"""
        import sys, types, importlib.machinery as m, importlib.util
        finder_module = types.ModuleType("__editable___grader_finder")
        class Finder:
            @classmethod
            def find_spec(cls, name, path=None, target=None):
                return m.PathFinder.find_spec(name, [{str(ROOT)!r}]) if name in (
                    "autograder", "solutions") else None
        Finder.__module__ = finder_module.__name__
        def hook(entry):
            raise ImportError
        hook.__module__ = finder_module.__name__
        finder_module.Finder = Finder
        sys.modules[finder_module.__name__] = finder_module
        sys.meta_path.append(Finder)
        sys.path_hooks.append(hook)
        assert importlib.util.find_spec("solutions") is not None
    """)
    check = textwrap.dedent("""
        import importlib.util
        print(importlib.util.find_spec("solutions"), importlib.util.find_spec("autograder"),
              "__editable___grader_finder" in sys.modules,
              any(getattr(h, "__module__", "") == "__editable___grader_finder"
                  for h in sys.path_hooks), importlib.util.find_spec("json") is not None)
    """)
    code = planted + spawn.SOURCE_ONLY.format(folder=str(spawn.SANDBOX_DIR)) + check
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.split() == ["None", "None", "False", "False", "True"], out.stderr


def test_the_zygote_holds_nothing_secret(zygote):
    """Does the process every sandbox is forked from hold no grader module, no reference and
    no environment beyond the few variables it needs?"""
    with open(f"/proc/{zygote.proc.pid}/environ", "rb") as f:
        names = {item.split(b"=", 1)[0].decode() for item in f.read().split(b"\0") if item}
    assert names <= set(spawn.PASSED_ENV) | {"OMP_NUM_THREADS", "LANG"}
    with open(f"/proc/{zygote.proc.pid}/maps") as f:
        assert "/solutions/" not in f.read()
    box = sandbox(zygote, """
        import gc, sys
        def head_weight_shape(*a):
            texts = [o for o in gc.get_objects() if type(o) is dict and "MultiHeadAttention" in o
                     and o.get("__name__") not in (None, "mha")]
            return str(sorted(m for m in sys.modules if "solution" in m or "autograder" in m
                              or m in ("checks", "rubric", "api", "runner"))) + str(len(texts))
    """)
    assert value(box) == "[]0"
    box.close()


@needs_root
def test_reduced_isolation_is_reported():
    """Where no namespace can be made, does the sandbox say that the reference is not hidden?"""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                      # a child of the test stands in for a sandbox
        status = 1
        try:
            import sys
            sys.path.insert(0, str(ROOT / "autograder" / "sandbox"))
            import jail
            import worker
            jail.unshare = lambda flags: False          # as where namespaces are refused
            notes = worker.isolate({"uid": UID_BASE + 999_999, "root_ready": False,
                                    "limits": {}})
            notes.append(f"cwd {os.getcwd()}")
            os.rmdir(os.getcwd())
            os.write(write, json.dumps(notes).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    notes = json.loads(os.read(read, 100_000) or b"[]")
    os.waitpid(pid, 0)
    assert any("reference confidentiality is not enforced" in n for n in notes)
    assert any("no PID namespace" in n for n in notes)
    assert any(n.startswith("cwd /tmp/autograder-sandbox-") for n in notes)   # its own cwd


#: In a child: the io_uring calls and a new socket before and after the sandbox's seccomp
#: filter (as installed where no cgroup counts a sandbox's pages), and a socket pair made
#: before it (the sandbox's channel) still carrying bytes after.
SECCOMP_CHILD = """
import ctypes, json, socket, sys
sys.path.insert(0, sys.argv[1])
import jail
libc = jail.libc
def calls():
    seen = {}
    for nr, args in ((425, (1, None)), (426, (-1, 0, 0, 0, None, 0)), (427, (-1, 0, None, 0))):
        seen[nr] = ctypes.get_errno() if libc.syscall(nr, *args) == -1 else 0
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
        seen["socket"] = 0
    except OSError as e:
        seen["socket"] = e.errno
    return seen
channel = socket.socketpair()
before = calls()
jail.refuse_memfd()
after = calls()
channel[0].sendall(b"ok")
print(json.dumps({"before": before, "after": after, "channel": channel[1].recv(2).decode()}))
"""


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="the filter's "
                    "tables know x86_64 and aarch64")
def test_the_seccomp_filter_refuses_io_uring_and_keeps_the_channel():
    """Where no cgroup counts a sandbox's pages, io_uring_setup, _enter and _register get
    EPERM like socket (a ring's IORING_OP_SOCKET makes sockets without the socket call);
    the channel made before the filter still works."""
    import errno
    run = subprocess.run([sys.executable, "-c", SECCOMP_CHILD,
                          str(ROOT / "autograder" / "sandbox")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    seen = json.loads(run.stdout)
    assert seen["after"] == {"425": errno.EPERM, "426": errno.EPERM, "427": errno.EPERM,
                             "socket": errno.EPERM}, seen
    assert seen["before"]["socket"] == 0 and seen["channel"] == "ok", seen
    if seen["before"]["425"] == errno.EPERM:
        pytest.skip("io_uring is disabled on this machine: the refusal is the kernel's here")


def test_outputs_are_drained_concurrently():
    """Two pipes written alternately by a child: both drained while it writes (no deadlock)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    outs = [host._Output(out_r), host._Output(err_r)]

    def write():
        for _ in range(200):
            os.write(out_w, b"a" * 65536)
            os.write(err_w, b"b" * 65536)
        os.close(out_w)
        os.close(err_w)
    t = threading.Thread(target=write)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive()
    for out in outs:
        out.thread.join(timeout=5)
        assert out.total == 200 * 65536 and len(out.head) + len(out.tail) <= (80 << 10)


def test_a_zygote_that_dies_as_it_starts_says_why(monkeypatch, capsys):
    """Where the sandbox's interpreter cannot start (torch missing from the environment, say),
    does the grader say what it printed, rather than fail with a broken pipe?"""
    def launch():
        ours, theirs = socket.socketpair()
        log = __import__("tempfile").TemporaryFile()
        proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stderr.write("
                                 "'ModuleNotFoundError: No module named torch'); sys.exit(1)"],
                                stderr=log, stdin=subprocess.DEVNULL)
        theirs.close()
        proc.wait(timeout=30)
        return proc, ours, log
    monkeypatch.setattr(spawn, "_launch", launch)
    monkeypatch.setattr(spawn, "_PRESTARTED", [])
    with pytest.raises(spawn.GraderError, match="did not start:\nModuleNotFoundError"):
        spawn.Zygote()
    from autograder import cli               # the command line says it too, exit status 1
    assert cli.main(["demo"]) == 1
    assert "did not start:\nModuleNotFoundError: No module named torch" in capsys.readouterr().err
