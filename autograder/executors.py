"""Where a batch's submissions are graded: here, in threads, or on a Dask cluster.

An executor is built from the batch's grading options and has ``run(tasks)``, which
yields ``(task, outcome)`` as each submission finishes, and ``close()``. An outcome is
``{"report": <the SPEC's JSON>}`` or ``{"error": "<why the grader failed>"}``: a failure
on one submission is data, never an exception that stops the batch.

Both executors grade with ``SharedGrader.grade``, so their results are the same.

Local: threads may share one ``Grader``: each submission runs in its own sandbox process,
the zygote serialises its forks, and the reference cache is guarded by a lock. The host's
own work per submission is small (about a tenth of the sandbox's), so one process with
``workers`` threads keeps ``workers`` sandboxes busy.

Dask: each task carries the submission's file name and bytes (no shared file system is
needed) and the student's variant as plain data (its numbers and seed, derived on the
client: the course's secret never leaves it), and each Dask worker process keeps one
``SharedGrader`` per set of options. The client talks to the scheduler over TLS with
certificates (``security``); a scheduler without them is refused unless the instructor
allows it (``insecure``).
"""
from __future__ import annotations

import os
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from .errors import UsageError
from .sandbox.host import GraderError


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                       # not Linux
        return os.cpu_count() or 1


class SharedGrader:
    """One Grader for many threads; started again if its zygote died."""

    def __init__(self, options: dict):
        self.options = options
        self._lock = threading.Lock()
        self._closed = False
        self._rubric = None
        if options.get("rubric_text") is not None:
            fd, self._rubric = tempfile.mkstemp(prefix="rubric-", suffix=".toml")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(options["rubric_text"])
        self.grader = self._start()

    def _start(self):
        from .api import Grader
        grader = Grader(seed=self.options["seed"], device=self.options.get("device", "auto"),
                        rubric=self._rubric, hide=self.options.get("hide", ()))
        grader.zygote.wait_ready()   # started by this thread: it dies with the thread (PDEATHSIG)
        return grader

    def grade(self, path: str, variant: dict | None = None) -> dict:
        """Grade one file; ``variant``: the student's (``variants.Variant``'s fields), or None."""
        from .variants import Variant
        variant = Variant(**variant) if variant else None
        grader = self.grader
        outcome = _grade_once(grader, path, variant)
        if "error" in outcome and not _alive(grader):
            with self._lock:                     # the zygote died: start one, try once more
                if self._closed:
                    return outcome               # it was closed on purpose (Ctrl-C)
                if self.grader is grader:
                    grader.close()
                    self.grader = self._start()
            outcome = _grade_once(self.grader, path, variant)
        return outcome

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self.grader.close()
        if self._rubric:
            os.unlink(self._rubric)


def _alive(grader) -> bool:
    proc = getattr(grader.zygote, "proc", None)
    return proc is None or proc.poll() is None


def _grade_once(grader, path: str, variant=None) -> dict:
    try:
        return {"report": grader.grade(path, variant).to_dict()}
    except GraderError as e:
        return {"error": f"the grader failed: {e}"}
    except Exception as e:                       # noqa: BLE001 — a grader bug on one submission
        return {"error": f"{type(e).__name__}: {e}"}


class LocalExecutor:
    """Threads on this machine, sharing one Grader (one zygote)."""

    def __init__(self, options: dict, workers: int | None = None):
        self.shared = SharedGrader(options)      # here, in the main thread
        self.pool = ThreadPoolExecutor(max_workers=workers or default_workers(),
                                       thread_name_prefix="grade")

    def run(self, tasks):
        futures = {self.pool.submit(self.shared.grade, t.file, t.variant): t for t in tasks}
        for future in as_completed(futures):
            yield futures[future], future.result()

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.shared.close()                      # kills the sandboxes still running
        self.pool.shutdown(wait=True)


class DaskExecutor:
    """Tasks on a Dask distributed cluster; each worker process keeps one SharedGrader.

    ``tls``: (CA file, certificate, key) for a ``tls://`` scheduler (each may be None: then
    Dask's own ``distributed.comm.tls`` configuration). A ``tcp://`` scheduler lets anyone
    who reaches it run code on the workers (and so change grades): refused unless
    ``insecure``."""

    def __init__(self, options: dict, scheduler: str, *, tls=(None, None, None),
                 insecure: bool = False):
        try:
            from distributed import Client
        except ImportError:
            raise UsageError("--executor dask needs Dask distributed: python -m pip install "
                             "distributed (or, in a checkout of the autograder, python -m pip "
                             "install -e \".[distributed]\")") from None
        self.options = options
        security = security_for(scheduler, tls, insecure)
        try:
            self.client = Client(scheduler, timeout="30s", security=security)
        except (OSError, TimeoutError) as e:
            from .outfolder import BatchError
            raise BatchError(f"cannot reach the Dask scheduler at {scheduler}: {e}") from None

    def run(self, tasks):
        from distributed import as_completed as dask_completed
        futures = {}
        for t in tasks:
            data = Path(t.file).read_bytes()
            future = self.client.submit(remote_grade, self.options, Path(t.file).name, data,
                                        t.variant, pure=False, retries=1)
            futures[future] = t
        for future in dask_completed(futures):
            try:
                yield futures[future], future.result()
            except Exception as e:               # noqa: BLE001 — the worker died, the task was lost
                yield futures[future], {"error": f"the Dask task failed: {type(e).__name__}: {e}"}

    def close(self) -> None:
        self.client.close()


def security_for(scheduler: str, tls=(None, None, None), insecure: bool = False):
    """distributed's ``Security`` for this scheduler: TLS with certificates on both sides
    (the scheduler accepts only clients whose certificate its CA signed), or None where the
    instructor allowed a scheduler without authentication."""
    from distributed import Security
    scheme = scheduler.split("://", 1)[0] if "://" in scheduler else "tcp"
    if scheme == "inproc":
        return None
    if scheme != "tls":
        if insecure:
            return None
        raise UsageError(
            f"the Dask scheduler {scheduler} is not authenticated: anyone who can reach it "
            "can run code on its workers and change grades. Start it with TLS certificates "
            "and give tls://HOST:PORT with --tls-ca-file, --tls-cert and --tls-key (README: "
            "'Scale-out'), or, on a network only you can reach, add --insecure-scheduler")
    ca, cert, key = tls
    security = Security(tls_ca_file=ca, tls_client_cert=cert, tls_client_key=key,
                        require_encryption=True) if any(tls) else \
        Security(require_encryption=True)
    missing = [flag for flag, value in (("--tls-ca-file", security.tls_ca_file),
                                        ("--tls-cert", security.tls_client_cert))
               if not value]
    if missing:
        raise UsageError(f"a tls:// scheduler needs the course's certificates: {', '.join(missing)} "
                         "(or Dask's distributed.comm.tls configuration); see README "
                         "'Scale-out'")
    for path in (ca, cert, key):
        if path and not Path(path).is_file():
            raise UsageError(f"{path}: no such certificate or key file")
    return security


_WORKER_GRADERS: dict = {}
_WORKER_LOCK = threading.Lock()


def remote_grade(options: dict, filename: str, data: bytes, variant: dict | None = None) -> dict:
    """Runs on a Dask worker: grade one submission sent as its file's name and bytes, as
    the student's variant (plain numbers and a seed)."""
    key = repr(sorted(options.items()))
    with _WORKER_LOCK:
        shared = _WORKER_GRADERS.get(key)
        if shared is None:
            shared = _WORKER_GRADERS[key] = SharedGrader(options)
    with tempfile.TemporaryDirectory(prefix="submission-") as folder:
        path = Path(folder) / filename
        path.write_bytes(data)
        return shared.grade(str(path), variant)


def make(name: str, options: dict, *, workers: int | None = None, scheduler: str | None = None,
         tls=(None, None, None), insecure: bool = False):
    """The executor a command line asked for."""
    if name == "local":
        return LocalExecutor(options, workers)
    if name == "dask":
        return DaskExecutor(options, scheduler, tls=tls, insecure=insecure)
    raise UsageError(f"unknown executor {name!r}: local or dask")
