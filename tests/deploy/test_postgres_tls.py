"""PostgreSQL over verified TLS, as docs/operations.md tells a deployment to connect.

A PostgreSQL 15 server of this machine's own (initdb in a temporary directory, TLS only, its
certificate signed by a CA made for the test) and paycore's own connection code: a DSN with
``sslmode=verify-full&sslrootcert=<CA file>`` migrates and pools; a CA that did not sign the
server, or a name the certificate does not carry, is refused; and without ``sslrootcert`` in a
process whose home is not a directory (the image's user has ``/nonexistent``) asyncpg refuses to
start, which is why the manifests mount the CA and the DSN names it.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import pwd
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from harness.servers import free_port
from paycore.clock import SystemClock
from paycore.db import create_pool, migrate
from paycore_devstack._process import accepts_connections
from tests.support.certificates import Authority, authority


def server_binaries() -> Path:
    """The directory of a PostgreSQL server built with TLS (Debian's postgresql-15 here)."""
    candidates = [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    pg_config = shutil.which("pg_config")
    if pg_config:
        bindir = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False).stdout
        candidates.insert(0, Path(bindir.strip()))
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "pg_ctl").is_file():
            return directory
    pytest.fail("no PostgreSQL server binaries (initdb, pg_ctl): install Debian's postgresql-15")


@dataclass(frozen=True)
class TlsServer:
    port: int
    ca: Authority

    def dsn(self, query: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres?{query}"


def server_user() -> str | None:
    """PostgreSQL refuses to run as root: then the server runs as an unprivileged system user."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "embedded_postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    pytest.fail("running as root and no unprivileged user (postgres, nobody) to run PostgreSQL as")


def _own(path: Path, user: str | None) -> None:
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)


@pytest.fixture(scope="module")
def tls_server() -> Iterator[TlsServer]:
    """A server that admits TLS connections only (``hostssl``; plain ones are rejected)."""
    user = server_user()
    # Not under pytest's tmp_path (mode 0700, the caller's): the server's user must reach it.
    root = Path(tempfile.mkdtemp(prefix="paycore-pg-tls-"))
    _own(root, user)
    ca = authority(root / "ca")
    issued = ca.issue(root / "ca", "server", hosts=("127.0.0.1",))  # not "localhost": see below
    bindir, data, port = server_binaries(), root / "data", free_port()
    subprocess.run([bindir / "initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync"],
                   check=True, capture_output=True, timeout=120, user=user)
    for source, name in ((issued.certificate, "server.crt"), (issued.key, "server.key")):
        shutil.copy(source, data / name)
        (data / name).chmod(0o600)
        _own(data / name, user)
    with (data / "postgresql.conf").open("a") as conf:
        conf.write(f"listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{root}'\n"
                   "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\nfsync = off\n")
    (data / "pg_hba.conf").write_text("local all all trust\nhostssl all all 127.0.0.1/32 trust\n"
                                      "hostnossl all all 127.0.0.1/32 reject\n")
    subprocess.run([bindir / "pg_ctl", "-D", data, "-l", root / "server.log", "-w", "-t", "60", "start"],
                   check=True, capture_output=True, timeout=90, user=user)
    try:
        deadline = time.monotonic() + 30
        while not accepts_connections("127.0.0.1", port):
            assert time.monotonic() < deadline, (root / "server.log").read_text()
            time.sleep(0.05)  # polling the port, with the deadline above
        yield TlsServer(port, ca)
    finally:
        subprocess.run([bindir / "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"],
                       capture_output=True, timeout=60, check=False, user=user)
        shutil.rmtree(root, ignore_errors=True)


def test_verify_full_with_the_ca_in_the_dsn_migrates_and_pools_over_tls(tls_server: TlsServer) -> None:
    dsn = tls_server.dsn(f"sslmode=verify-full&sslrootcert={tls_server.ca.certificate}")

    async def run() -> tuple[bool, str, list[str]]:
        applied = await migrate(dsn, now=SystemClock().now())  # what the migration Job runs
        pool = await create_pool(dsn, max_size=2)  # what every service opens
        try:
            row = await pool.fetchrow("SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        finally:
            await pool.close()
        assert row is not None
        return bool(row["ssl"]), str(row["version"]), applied

    encrypted, version, applied = asyncio.run(run())
    assert encrypted and version.startswith("TLSv1.")
    assert applied  # the schema went over the encrypted connection


def test_a_server_the_ca_did_not_sign_is_refused(tls_server: TlsServer, tmp_path: Path) -> None:
    other = authority(tmp_path, "other-ca")
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        asyncio.run(_connect(tls_server.dsn(f"sslmode=verify-full&sslrootcert={other.certificate}")))


def test_a_name_the_certificate_does_not_carry_is_refused_by_verify_full(tls_server: TlsServer) -> None:
    """verify-full checks the host name, verify-ca only the chain: the certificate names 127.0.0.1,
    and the same server reached as ``localhost`` is refused by the one and admitted by the other."""
    ca = tls_server.ca.certificate
    by_name = tls_server.dsn("{}").replace("127.0.0.1", "localhost")
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        asyncio.run(_connect(by_name.format(f"sslmode=verify-full&sslrootcert={ca}")))
    asyncio.run(_connect(by_name.format(f"sslmode=verify-ca&sslrootcert={ca}")))


def test_without_sslrootcert_and_without_a_home_the_connection_is_refused_before_any_packet(
        tls_server: TlsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The image's user has no home (/nonexistent): asyncpg cannot find ~/.postgresql/root.crt."""
    monkeypatch.setenv("HOME", "/nonexistent")
    monkeypatch.delenv("PGSSLROOTCERT", raising=False)
    with pytest.raises(asyncpg.exceptions.ClientConfigurationError, match="root certificate file"):
        asyncio.run(_connect(tls_server.dsn("sslmode=verify-full")))
    # PGSSLROOTCERT is the other way to name it (a ConfigMap entry instead of the DSN).
    monkeypatch.setenv("PGSSLROOTCERT", str(tls_server.ca.certificate))
    asyncio.run(_connect(tls_server.dsn("sslmode=verify-full")))


def test_a_connection_without_tls_is_rejected_by_this_server(tls_server: TlsServer) -> None:
    """The server above admits TLS only, so the passing tests did use it."""
    with pytest.raises(asyncpg.exceptions.InvalidAuthorizationSpecificationError, match="no encryption"):
        asyncio.run(_connect(tls_server.dsn("sslmode=disable")))


async def _connect(dsn: str) -> None:
    conn = await asyncpg.connect(dsn, timeout=30)
    await conn.close()
