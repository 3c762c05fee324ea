"""Certificates for tests and benchmarks (needs the ``cryptography`` package, a test dependency):
a CA, a server certificate for 127.0.0.1 / localhost and client certificates, written as PEM."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class TestPki:
    ca: str  # CA certificate (PEM file)
    server: str  # server certificate chain + key (PEM file)
    server_cert: str
    server_key: str
    directory: str

    def client(self, common_name: str, organization: str = "cohort-tests") -> tuple[str, str]:
        """(certificate file, key file) for a client with subject CN=<common_name>,O=<organization>."""
        return _client(self, common_name, organization)


def make_pki(directory: str) -> TestPki:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    os.makedirs(directory, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cohort test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=30))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = {name: os.path.join(directory, name) for name in ("ca.pem", "server.pem", "server-cert.pem", "server-key.pem", "ca-key.pem")}
    _write(paths["ca.pem"], _pem_cert(ca))
    _write(paths["ca-key.pem"], _pem_key(ca_key))
    _write(paths["server-cert.pem"], _pem_cert(cert))
    _write(paths["server-key.pem"], _pem_key(key))
    _write(paths["server.pem"], _pem_cert(cert) + _pem_key(key))
    return TestPki(paths["ca.pem"], paths["server.pem"], paths["server-cert.pem"], paths["server-key.pem"], directory)


def _client(pki: TestPki, common_name: str, organization: str) -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    with open(os.path.join(pki.directory, "ca-key.pem"), "rb") as f:
        ca_key = serialization.load_pem_private_key(f.read(), None)
    with open(pki.ca, "rb") as f:
        ca = x509.load_pem_x509_certificate(f.read())
    now = datetime.datetime.now(datetime.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
                                     x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
            .sign(ca_key, hashes.SHA256()))
    cert_path = os.path.join(pki.directory, f"client-{common_name}.pem")
    key_path = os.path.join(pki.directory, f"client-{common_name}-key.pem")
    _write(cert_path, _pem_cert(cert))
    _write(key_path, _pem_key(key))
    return cert_path, key_path


def _pem_cert(cert) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
