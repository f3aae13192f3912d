"""Dask without open doors (issue 21, 5-6): a tcp:// scheduler is refused unless the
instructor allows it, a TLS cluster accepts only certificates its CA signed, and the
course's secret never travels to the workers (each task carries the student's variant,
derived on the client)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import dask_certs
from autograder import executors, variants
from autograder.cli import main
from autograder.errors import UsageError

distributed = pytest.importorskip("distributed", reason="the 'distributed' extra is not installed")
ROOT = Path(__file__).resolve().parent.parent
SECRET = "the course's secret: never on a worker"


def test_an_unauthenticated_scheduler_is_refused_unless_allowed():
    """Is tcp:// (or no scheme) a usage error naming TLS and the flag, and allowed with it?"""
    for address in ("tcp://10.0.0.5:8786", "10.0.0.5:8786", "tcp://127.0.0.1:8786"):
        with pytest.raises(UsageError, match="not authenticated.*--insecure-scheduler"):
            executors.security_for(address)
        assert executors.security_for(address, insecure=True) is None


def test_tls_needs_the_certificates(tmp_path):
    """Does a tls:// scheduler without a CA and certificate say which options are missing,
    and a named file that is not there say so?"""
    with pytest.raises(UsageError, match="--tls-ca-file, --tls-cert"):
        executors.security_for("tls://127.0.0.1:8786")
    certs = dask_certs.make(tmp_path)
    with pytest.raises(UsageError, match="no such certificate"):
        executors.security_for("tls://h:1", (certs["ca"], str(tmp_path / "none.pem"), None))
    security = executors.security_for("tls://h:1", (certs["ca"], certs["cert"], certs["key"]))
    assert security.require_encryption and security.tls_ca_file == certs["ca"]


def test_the_command_line_refuses_a_tcp_scheduler(tmp_path, capsys):
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "a.py").write_text("x = 1\n")
    assert main(["batch", str(tmp_path / "class"), "--output", str(tmp_path / "out"),
                 "--executor", "dask", "--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert "not authenticated" in capsys.readouterr().err


def test_the_secret_never_reaches_a_worker(tmp_path, monkeypatch):
    """With variants on, does every task sent to Dask carry the student's numbers and seed
    but not the secret (here a fake client records what would be sent)?"""
    sent = []

    class Future:
        def __init__(self, args):
            self.args = args

        def result(self):
            return {"report": {"score": 0.0, "max_score": 1.0, "checks": [], "diagnoses": []}}

    class Client:
        def __init__(self, *args, **kwargs):
            pass

        def submit(self, fn, *args, **kwargs):
            sent.append(args)
            return Future(args)

        def close(self):
            pass
    monkeypatch.setattr(distributed, "Client", Client)
    monkeypatch.setattr(distributed, "as_completed", lambda futures: list(futures))
    monkeypatch.setenv(variants.ENV, SECRET)
    for student in ("alice", "bob"):
        (tmp_path / "class" / student).mkdir(parents=True)
        (tmp_path / "class" / student / "mha.py").write_text("x = 1\n")
    status = main(["batch", str(tmp_path / "class"), "--output", str(tmp_path / "out"),
                   "--executor", "dask", "--scheduler", "tcp://127.0.0.1:1",
                   "--insecure-scheduler"])
    assert status == 0 and len(sent) == 2
    assert SECRET not in repr(sent) and not any("secret" in key for a in sent for key in a[0])
    seeds = sorted(a[3]["seed"] for a in sent)
    assert seeds == sorted(variants.derive(s, SECRET).seed for s in ("alice", "bob"))


@pytest.mark.slow
def test_a_tls_cluster_grades_and_refuses_strangers(tmp_path, monkeypatch):
    """Over TLS with the course's certificates a batch grades on the cluster (each student
    against their own variant); a client with no certificate, or one from another CA,
    cannot connect (so cannot patch the workers or read anything)."""
    certs = dask_certs.make(tmp_path / "course")
    stranger = dask_certs.make(tmp_path / "stranger", name="stranger")
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "alice.py").write_text((ROOT / "solutions" / "mha.py").read_text())
    monkeypatch.setenv(variants.ENV, SECRET)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  protocol="tls://", host="127.0.0.1",
                                  security=dask_certs.security(certs),
                                  dashboard_address=":0", silence_logs=40) as cluster:
        address = cluster.scheduler_address
        for security in (None, dask_certs.security(stranger)):
            with pytest.raises((OSError, TimeoutError, TypeError)):    # TypeError: no TLS at all
                distributed.Client(address, security=security, timeout="3s")
        status = main(["batch", str(tmp_path / "class"), "--output", str(tmp_path / "out"),
                       "--executor", "dask", "--scheduler", address, "--tls-ca-file",
                       certs["ca"], "--tls-cert", certs["cert"], "--tls-key", certs["key"],
                       "--device", "cpu"])
    assert status == 0
    result = json.loads((tmp_path / "out" / "results" / "alice.json").read_text())
    assert result["score"] == result["max_score"] > 0
    assert result["seed"] == variants.derive("alice", SECRET).seed
