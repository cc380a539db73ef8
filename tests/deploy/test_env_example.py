"""deploy/env.example, the production settings' example, agrees with the settings' rules: its
retention chain and its Kafka security settings pass the validation the processes run (the
provider and secret placeholders aside, which only a real secret store fills in)."""

from __future__ import annotations

from pathlib import Path

from paycore.config import load_settings
from paycore.kafka import kafka_settings
from paycore_dispatcher.settings import load_dispatcher_settings
from tools.deploy_check.compose_file import read_env_file

ENV_EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "env.example"


def test_the_example_keeps_the_retention_chain_and_a_valid_kafka_security() -> None:
    env = {k: v for k, v in read_env_file(ENV_EXAMPLE).items()
           if not k.startswith(("PAYCORE_CARDCO_", "PAYCORE_ALERT_", "PAYCORE_CONSOLE_"))}
    settings = load_settings(env, require_account=False)
    dispatcher = load_dispatcher_settings(settings, env)
    assert dispatcher.outbox_retention_s <= settings.kafka_retention_s < dispatcher.consumer_inbox_retention_s
    ks = kafka_settings(settings)
    assert (ks.security.protocol, ks.security.mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert "sslmode=verify-full&sslrootcert=" in (settings.database_url or "")
