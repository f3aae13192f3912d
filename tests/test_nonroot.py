"""The sandbox run by a normal user (a TA's laptop, a CI runner) and its limits.

The same attack fixtures (``tests/submissions/attacks/nonroot_*`` and ``limits_*``) are
graded twice through the grader (``nonroot_driver.py``, one Grader per run): as root, and
as an unprivileged user. CI runs as root, so the second run drops to an unused uid with
``setpriv`` (in a private mount namespace where the interpreter is reachable by that uid,
should it live under a folder only root may enter, such as /root); as any other user it
runs as that user. The project is copied to a folder every user can read. In a small batch
of three graded at once, a submission that kills every process it can find sits beside two
correct ones, which must keep full marks.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ATTACKS = ROOT / "tests" / "submissions" / "attacks"
OLDER = ("escape_writes.py", "fork_bomb.py", "kill_everything.py", "proc_snoop.py")
FIXTURES = sorted(ATTACKS.glob("nonroot_*.py")) + sorted(ATTACKS.glob("limits_*.py")) \
    + [ATTACKS / name for name in OLDER]
MEMORY = 1 << 30       # small, so the memory attacks are cheap (the interpreter needs ~0.7 GiB)
USER = 54321           # an unused uid for the non-root run
PLANTED = ("autograder_attack_planted.pth", "ATTACK_ESCAPE_MARKER")


def _tools() -> str | None:
    """Why the non-root run cannot be made here, or None."""
    root = os.geteuid() == 0
    for tool in ("setpriv", "unshare") if root else ("unshare",):
        if shutil.which(tool) is None:
            return f"no {tool} to try user namespaces" + (" as an unprivileged user" * root)
    drop = ["setpriv", "--reuid", str(USER), "--regid", str(USER), "--clear-groups"] * root
    probe = subprocess.run(drop + ["unshare", "-Urm", "--pid", "--fork", "true"],
                           capture_output=True)
    if probe.returncode != 0:
        return "no unprivileged user namespaces on this machine"
    return None


def _readable_copy() -> Path:
    """The project (tracked and new files, no .git) in a folder any user can read."""
    folder = Path(tempfile.mkdtemp(prefix="autograder-nonroot-", dir="/tmp"))
    shutil.copytree(ROOT, folder / "project", ignore=shutil.ignore_patterns(
        ".git", "__pycache__", ".pytest_cache", "*.egg-info", "build", "dist"))
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o644)     # batch files are written here too
    return folder


def _hidden_ancestor(path: str) -> str | None:
    """The outermost folder above `path` that other users may not enter (e.g. /root)."""
    current = ""
    for part in Path(path).parts[1:-1]:
        current += "/" + part
        if not os.stat(current).st_mode & 0o001:
            return current
    return None


def _as_user(command: list[str], cwd: Path) -> list[str]:
    """`command`, run as USER, with the interpreter's folders reachable by that user.

    The folders are the interpreter's, its prefix and base prefix (a virtual environment
    made from a Python kept in a private home: pyenv, conda, a user's own build) and
    where torch and this project's dependencies are installed. Each that lies below a folder
    other users may not enter (e.g. /root) is kept reachable: in a private mount namespace,
    that folder is covered by an empty tmpfs holding only bind mounts of the needed ones."""
    drop = ["setpriv", "--reuid", str(USER), "--regid", str(USER), "--clear-groups",
            "env", "HOME=/tmp", f"PATH={os.path.dirname(sys.executable)}:/usr/bin:/bin"]
    keep = _reachable_pairs()
    if not keep:
        return drop + command
    return ["unshare", "--mount", "--propagation", "private", "--", sys.executable, "-I", "-c",
            UNCOVER, str(cwd), json.dumps(keep)] + drop + command


#: Run as root in the private mount namespace: each hidden folder gets an empty tmpfs in
#: which only the needed folders below it appear (bind mounts), then the command runs.
UNCOVER = """
import json, os, subprocess, sys, tempfile
cwd, keep = sys.argv[1], json.loads(sys.argv[2])
by_hidden = {}
for hidden, inner in keep:
    by_hidden.setdefault(hidden, []).append(inner)
for hidden, inners in by_hidden.items():
    held = []
    for inner in inners:
        spare = tempfile.mkdtemp()
        subprocess.run(["mount", "--bind", os.path.join(hidden, inner), spare], check=True)
        held.append((inner, spare))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", hidden], check=True)
    for inner, spare in held:
        os.makedirs(os.path.join(hidden, inner), exist_ok=True)
        subprocess.run(["mount", "--move", spare, os.path.join(hidden, inner)], check=True)
os.chdir(cwd)
os.execvp(sys.argv[3], sys.argv[3:])
"""


def _needed_folders() -> set[str]:
    """What the grader's interpreter reads: its binary, its prefixes, its packages."""
    import site
    import sysconfig
    import torch
    folders = {os.path.dirname(os.path.realpath(sys.executable)), sys.prefix, sys.base_prefix,
               sys.exec_prefix, sys.base_exec_prefix, sysconfig.get_paths()["stdlib"],
               sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
               os.path.dirname(os.path.dirname(os.path.realpath(torch.__file__)))}
    folders |= set(site.getsitepackages())
    return {os.path.realpath(f) for f in folders if f and os.path.isdir(f)}


def _reachable_pairs() -> list[list[str]]:
    """[hidden folder, its child to keep] for every needed folder below a hidden one."""
    pairs = set()
    for folder in _needed_folders():
        hidden = _hidden_ancestor(os.path.join(folder, "x"))
        inner = os.path.relpath(folder, hidden).split(os.sep)[0] if hidden else "."
        if inner not in (".", ".."):
            pairs.add((hidden, inner))
    return sorted([list(p) for p in pairs])


#: Run before the driver: no user namespace can be made from then on (a seccomp filter
#: that refuses CLONE_NEWUSER, the sandbox's own), as on a machine that has none.
NO_USERNS = ("import os, sys; sys.path.insert(0, 'autograder/sandbox'); import jail; "
             "jail.refuse_memfd(sockets=False); "
             "os.execv(sys.executable, [sys.executable] + sys.argv[1:])")


def _grade_all(mode: str, fixtures=None, without_namespaces: bool = False) -> dict:
    fixtures = FIXTURES if fixtures is None else fixtures
    folder = _readable_copy()
    project = folder / "project"
    batch = [project / "tests/submissions/attacks/nonroot_kill_neighbours.py"]
    for name in ("alice", "bob"):
        (folder / name).mkdir(mode=0o777)
        shutil.copy(ROOT / "solutions" / "mha.py", folder / name / "mha.py")
        os.chmod(folder / name / "mha.py", 0o644)
        batch.append(folder / name / "mha.py")
    out = folder / "result.json"
    command = [sys.executable, "tests/nonroot_driver.py", str(out), str(MEMORY),
               ",".join(map(str, batch)) if fixtures else "", "solutions/mha.py",
               *(f"tests/submissions/attacks/{p.name}" for p in fixtures)]
    if without_namespaces:
        command = [sys.executable, "-c", NO_USERNS] + command[1:]
    if mode == "nonroot" and os.geteuid() == 0:
        command = _as_user(command, project)
    try:
        run = subprocess.run(command, cwd=project, capture_output=True, timeout=900,
                             stdin=subprocess.DEVNULL)
        assert run.returncode == 0, run.stderr.decode("utf-8", "replace")[-3000:]
        result = json.loads(out.read_text())
        result["site"] = _planted() + _markers(project)
        return result
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _markers(project: Path) -> list[str]:
    """Marker files the escape attacks write, wherever the grader could see them."""
    places = [project, project / "solutions", Path("/"), Path("/tmp"), Path("/var/tmp"),
              Path("/dev/shm"), Path("/etc")]
    return [str(p / m) for p in places for m in ("ATTACK_ESCAPE_MARKER", "ATTACK_SIDE_MARKER")
            if (p / m).exists()]


def _planted() -> list[str]:
    """Files the remount attack would have planted, where the grader's interpreter looks."""
    import site
    import sysconfig
    folders = set(sys.path) | set(site.getsitepackages()) | {sysconfig.get_paths()["purelib"],
                                                             sysconfig.get_paths()["stdlib"]}
    return [os.path.join(f, n) for f in folders if f.startswith("/") for n in PLANTED
            if os.path.exists(os.path.join(f, n))]


@pytest.fixture(scope="module", params=["root", "nonroot"])
def graded(request):
    if request.param == "root" and os.geteuid() != 0:
        pytest.skip("the root run needs root")
    if request.param == "nonroot" and (why := _tools()):
        pytest.skip(why)
    return request.param, _grade_all(request.param)


def _report(graded, name: str) -> dict:
    return graded[1]["reports"][name]


def test_it_ran_as_who_it_should(graded):
    mode, result = graded
    assert (result["uid"] == 0) == (mode == "root")


def test_the_reference_gets_full_marks(graded):
    """The grader works in this mode: the sandbox is no obstacle to correct code."""
    r = _report(graded, "mha.py")
    assert r["score"] == r["max"] > 0, r["feedback"]


def test_the_sandbox_has_nothing_left(graded):
    """No capability, no_new_privs, a non-zero uid, only its own processes, the jail's
    mounts unmovable, no System V shared memory; and full isolation (no notes)."""
    mode, result = graded
    probe = result["probe"]
    seen = eval(probe["seen"])                       # a repr of plain data we built
    assert seen["CapEff"] == 0 and seen["CapPrm"] == 0 and seen["NoNewPrivs"] == 1
    assert seen["uid"] != 0 and seen["ppid"] == 0 and seen["procs"] == ["1"]
    assert seen["umount"] == -1 and seen["remount"] == -1 and seen["shm"] == -1
    assert seen["memfd"] == seen["cgroup"]           # refused exactly where no cgroup counts it
    assert seen["socket"] == seen["cgroup"]          # a new socket too; the channel still works
    if not seen["cgroup"]:                           # nor a socket made by an io_uring ring
        assert seen["io_uring"] == "refused", seen
    limits = [n for n in probe["notes"] if n.startswith("sandbox limits in force")]
    assert [n for n in probe["notes"] if n not in limits] == [] and len(limits) == 1
    said = "counted by a cgroup" if seen["cgroup"] else "new sockets and new namespaces refused"
    assert said in limits[0] and "128 open files" in limits[0], limits


@pytest.mark.parametrize("name, said", [
    ("nonroot_unmount_hiding.py", "nothing uncovered (0 unmounted)"),
    ("nonroot_remount_plant_pth.py", "planted in 0 folders"),
    ("nonroot_capabilities.py", "CapEff 0 CapPrm 0"),
    ("nonroot_kill_grader.py", "NotImplementedError"),
    ("nonroot_kill_neighbours.py", "signalled 0 times"),
])
def test_each_attack_earns_nothing_and_says_why(graded, name, said):
    r = _report(graded, name)
    assert r["score"] == 0, r["feedback"]
    assert any(said in f for f in r["feedback"]), r["feedback"][:3]


@pytest.mark.parametrize("name", OLDER)
def test_the_older_attacks_earn_nothing_here_either(graded, name):
    assert _report(graded, name)["score"] == 0


def test_nothing_was_planted_outside(graded):
    assert graded[1]["site"] == []


def test_neighbours_in_a_batch_keep_their_marks(graded):
    """Beside a submission that kills every process it finds, the correct ones get 100."""
    batch = graded[1]["batch"]
    assert len(batch) == 3
    for path, r in batch.items():
        if path.endswith("nonroot_kill_neighbours.py"):
            assert r["score"] == 0
        else:
            assert r["score"] == r["max"] > 0, (path, r["feedback"][:3])


def test_memory_spread_over_processes_is_counted_together(graded):
    """12 processes of 256 MiB each, every one under its own limits: stopped, for memory
    (counted by the cgroup, or by the zygote's watch, which groups them by PID namespace)."""
    r = _report(graded, "limits_many_children.py")
    assert r["score"] == 0
    assert "went over the memory limit (1 GiB)" in " ".join(r["notes"]), r["notes"][:2]


@pytest.mark.parametrize("name", ["limits_sysv_shm.py", "limits_memfd.py",
                                  "limits_own_namespace_tmpfs.py", "limits_unix_sockets.py"])
def test_memory_no_process_shows_is_limited(graded, name):
    """6 GiB of System V shared memory, memfd pages, tmpfs and shared memory in namespaces
    of its own, or the buffers of Unix socket connections nobody accepts, against a 1 GiB
    limit: stopped as a memory problem where a cgroup counts it, refused (nothing held)
    where none does; and the report's notes say which limits held it. (System V shared memory is capped in
    the sandbox's IPC namespace even where a cgroup would count it.)"""
    mode, result = graded
    r = _report(graded, name)
    assert r["score"] == 0
    text = " ".join(r["feedback"] + r["notes"])
    cgroup = eval(result["probe"]["seen"])["cgroup"]
    if name != "limits_sysv_shm.py" and cgroup:
        assert "went over the memory limit (1 GiB)" in text, text[:500]
    else:
        assert "held 0 MiB" in text, text[:500]
    assert "sandbox limits in force: memory 1 GiB" in " ".join(r["notes"]), r["notes"]


def test_root_runs_have_a_cgroup_where_the_machine_has_one(graded):
    """As root on a machine with a writable hierarchy, each sandbox has its group."""
    sys.path.insert(0, str(ROOT / "autograder" / "sandbox"))
    import cgroups
    mode, result = graded
    if mode == "root":
        assert eval(result["probe"]["seen"])["cgroup"] == (cgroups.Controllers.find() is not None)


def test_without_user_namespaces_grading_works_and_says_what_is_reduced():
    """Where no user namespace can be made (here: refused by a seccomp filter), the grader
    still grades, and the sandbox's notes say the reference is not hidden."""
    if why := _tools():
        pytest.skip(why)
    result = _grade_all("nonroot", fixtures=[], without_namespaces=True)
    assert result["uid"] != 0
    r = result["reports"]["mha.py"]
    assert r["score"] == r["max"] > 0, r["feedback"][:3]
    notes = " ".join(result["probe"]["notes"])
    assert "reference confidentiality is not enforced" in notes, notes
    assert eval(result["probe"]["seen"])["CapEff"] == 0
