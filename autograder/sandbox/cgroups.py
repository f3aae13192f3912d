"""One cgroup per sandbox, where the machine lets the zygote make them: limits that see
every page the sandbox makes (System V and POSIX shared memory, memfd and tmpfs pages
included, which no process's size shows) and every process or thread it starts.

The zygote looks once (``Controllers.find``) for a writable hierarchy below its own
cgroup: a cgroup v2 one with the memory and pids controllers, else the v1 ``memory`` and
``pids`` hierarchies; it proves each by making, limiting and removing a test group. Per
sandbox it makes a group (``make``), steps into it for the fork so the sandbox is born
inside it (``enter``, then ``leave``: nothing to race), and removes it once the sandbox's processes
are gone (``Group.remove``, retried until the kernel agrees). A sandbox the kernel's OOM
killer stopped in its group is reported as killed for memory (``Group.oom_kills``).

Without such a hierarchy (typically: not root) there are no groups, and the sandbox caps
what would escape the other limits itself (``jail.cap_sysv_shm``, ``jail.refuse_memfd``).

Imported inside the zygote as the top-level module ``cgroups``: it imports nothing from
the grader.
"""
from __future__ import annotations

import os

PREFIX = "autograder-"


class Group:
    """One sandbox's cgroup: a folder in each hierarchy used."""

    def __init__(self, folders: list[str], events: str | None):
        self.folders = folders
        self.events = events         #: the file that counts OOM kills in this group

    def oom_kills(self) -> int:
        """How many processes of this group the kernel's OOM killer has killed."""
        if not self.events:
            return 0
        try:
            with open(self.events) as f:
                for line in f:
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
        except (OSError, ValueError):
            pass
        return 0

    def remove(self) -> bool:
        """Remove the group; False while a process of it is still alive (retry later)."""
        left = []
        for folder in self.folders:
            try:
                os.rmdir(folder)
            except FileNotFoundError:
                pass
            except OSError:
                left.append(folder)
        self.folders = left
        return not left


class Controllers:
    """Where this process may make groups: (kind, parent folder) per hierarchy used."""

    def __init__(self, kind: str, parents: dict[str, str]):
        self.kind, self.parents = kind, parents      # kind "v2": {"": folder}; "v1": by controller
        self.counter = 0

    @classmethod
    def find(cls) -> "Controllers | None":
        """The first usable hierarchy (v2, else v1 memory + pids), or None."""
        mounts, mine = _mounts(), _own_cgroups()
        candidates = []
        if "" in mine and "cgroup2" in mounts:
            candidates.append(cls("v2", {"": _folder(mounts["cgroup2"], mine[""])}))
        if all(c in mounts and c in mine for c in ("memory", "pids")):
            candidates.append(cls("v1", {c: _folder(mounts[c], mine[c])
                                         for c in ("memory", "pids")}))
        for found in candidates:
            if found.usable():
                return found
        return None

    def usable(self) -> bool:
        if self.kind == "v2":
            parent = self.parents[""]
            try:
                with open(os.path.join(parent, "cgroup.controllers")) as f:
                    if not {"memory", "pids"} <= set(f.read().split()):
                        return False
                _enable_v2(parent)
            except OSError:
                return False
        group = self.make(f"probe-{os.getpid()}", 64 << 20, 16)
        if group is None:
            return False
        return group.remove()

    def make(self, name: str, memory: int, pids: int) -> Group | None:
        """A new group holding at most `memory` bytes (swap included) and `pids` tasks."""
        made = []
        try:
            for controller, parent in self.parents.items():
                folder = os.path.join(parent, PREFIX + name)
                os.mkdir(folder)
                made.append(folder)
                for setting, value in _settings(self.kind, controller, memory, pids):
                    _set(folder, setting, value)
        except OSError:
            Group(made, None).remove()
            return None
        events = "memory.events" if self.kind == "v2" else "memory.oom_control"
        memory_folder = made[0] if self.kind == "v2" else made[list(self.parents).index("memory")]
        return Group(made, os.path.join(memory_folder, events))

    def enter(self, group: Group) -> bool:
        """Step into `group` (so a child forked now is born there); False, and back in our
        own groups, if that could not be done."""
        try:
            for folder in group.folders:
                _set(folder, "cgroup.procs", str(os.getpid()))
            return True
        except OSError:
            self.leave()
            return False

    def leave(self) -> None:
        """Step back into this process's own groups."""
        for parent in self.parents.values():
            try:
                _set(parent, "cgroup.procs", str(os.getpid()))
            except OSError:
                pass


def _settings(kind: str, controller: str, memory: int, pids: int):
    if kind == "v2":
        return [("memory.max", memory), ("memory.swap.max?", 0), ("pids.max", pids)]
    if controller == "memory":
        return [("memory.limit_in_bytes", memory), ("memory.memsw.limit_in_bytes?", memory)]
    return [("pids.max", pids)]


def _set(folder: str, setting: str, value) -> None:
    """Write a setting; one whose name ends in '?' may be missing (e.g. no swap accounting)."""
    optional = setting.endswith("?")
    try:
        with open(os.path.join(folder, setting.rstrip("?")), "w") as f:
            f.write(str(value))
    except FileNotFoundError:
        if not optional:
            raise


def _enable_v2(parent: str) -> None:
    """Let the groups below `parent` use memory and pids. cgroup v2 allows that only for a
    group without processes of its own (or the root): where the zygote's group holds
    processes, this fails and v2 is not used."""
    with open(os.path.join(parent, "cgroup.subtree_control")) as f:
        enabled = set(f.read().split())
    if not {"memory", "pids"} <= enabled:
        _set(parent, "cgroup.subtree_control", "+memory +pids")


def _mounts() -> dict[str, tuple[str, str]]:
    """controller (or "cgroup2") -> (the mount's root in the hierarchy, its mount point)."""
    found: dict[str, tuple[str, str]] = {}
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, extra = left.split(), right.split()
        if len(fields) < 5 or len(extra) < 3:
            continue
        root, point = fields[3], fields[4]
        if extra[0] == "cgroup2":
            found.setdefault("cgroup2", (root, point))
        elif extra[0] == "cgroup":
            for option in extra[2].split(","):
                if option in ("memory", "pids"):
                    found.setdefault(option, (root, point))
    return found


def _own_cgroups() -> dict[str, str]:
    """controller ("" for v2) -> this process's group path, from /proc/self/cgroup."""
    found = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for controller in controllers.split(",") if controllers else [""]:
                    found[controller] = path
    except (OSError, ValueError):
        pass
    return found


def _folder(mount: tuple[str, str], path: str) -> str:
    root, point = mount
    if root != "/" and (path + "/").startswith(root.rstrip("/") + "/"):
        path = path[len(root.rstrip("/")):]
    return point.rstrip("/") + "/" + path.lstrip("/")
