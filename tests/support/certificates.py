"""A throwaway certificate authority and server certificates, for TLS against real local servers.

Everything is written under a directory the caller owns (a test's ``tmp_path``); keys are EC
P-256 (fast to make), certificates valid for a day, names as subject alternative names.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

LIFETIME = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Issued:
    certificate: Path  # PEM
    key: Path  # PEM, unencrypted, mode 0600 (PostgreSQL refuses a key others can read)


@dataclass(frozen=True)
class Authority:
    certificate: Path  # PEM: what a client is given to verify servers with
    _cert: x509.Certificate
    _key: ec.EllipticCurvePrivateKey

    def issue(self, directory: Path, name: str,
              hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> Issued:
        """A server certificate for ``hosts`` (IP addresses or DNS names), signed by this CA."""
        key = ec.generate_private_key(ec.SECP256R1())
        names = [x509.IPAddress(ipaddress.ip_address(h)) if _is_ip(h) else x509.DNSName(h) for h in hosts]
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
                .issuer_name(self._cert.subject)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + LIFETIME)
                .add_extension(x509.SubjectAlternativeName(names), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .sign(self._key, hashes.SHA256()))
        return Issued(_write_cert(directory / f"{name}.crt", cert),
                      _write_key(directory / f"{name}.key", key))


def authority(directory: Path, name: str = "ca") -> Authority:
    """A new self-signed CA, its certificate written to ``directory/<name>.crt``."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"paycore test {name}")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + LIFETIME)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return Authority(_write_cert(directory / f"{name}.crt", cert), cert, key)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _write_cert(path: Path, cert: x509.Certificate) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)
    return path
