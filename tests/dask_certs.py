"""Self-signed certificates for the Dask tests: a course CA and a certificate it signs for
127.0.0.1 (scheduler, workers and client alike), made with ``cryptography`` (in the
``dev`` extra: distributed does not depend on it). Also a second CA, whose certificates the cluster refuses."""
from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path


def _key():
    from cryptography.hazmat.primitives.asymmetric import ec
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key) -> bytes:
    from cryptography.hazmat.primitives import serialization
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert(subject_name: str, key, issuer=None, issuer_key=None, ca: bool = False):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject_name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(name)
               .issuer_name(issuer.subject if issuer else name).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    return builder.sign(issuer_key or key, hashes.SHA256())


def make(folder: Path, name: str = "course") -> dict[str, str]:
    """{"ca": ..., "cert": ..., "key": ...}: PEM files of a CA and of a leaf it signed."""
    from cryptography.hazmat.primitives import serialization
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, key = _key(), _key()
    ca = _cert(f"{name} CA", ca_key, ca=True)
    leaf = _cert("127.0.0.1", key, issuer=ca, issuer_key=ca_key)
    files = {"ca": folder / f"{name}-ca.pem", "cert": folder / f"{name}-cert.pem",
             "key": folder / f"{name}-key.pem"}
    files["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files["cert"].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    files["key"].write_bytes(_pem_key(key))
    return {k: str(v) for k, v in files.items()}


def security(files: dict[str, str]):
    """distributed's Security for every role, from ``make``'s files."""
    from distributed import Security
    return Security(tls_ca_file=files["ca"], tls_scheduler_cert=files["cert"],
                    tls_scheduler_key=files["key"], tls_worker_cert=files["cert"],
                    tls_worker_key=files["key"], tls_client_cert=files["cert"],
                    tls_client_key=files["key"], require_encryption=True)
