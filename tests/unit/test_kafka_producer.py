"""Every producer paycore makes waits for all in-sync replicas (docs/operations.md, "Kafka")."""

from __future__ import annotations

import pytest

from paycore import kafka
from paycore.kafka import KafkaSettings
from paycore_dispatcher.relay import PRODUCER_OPTIONS


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "local-broker"])
def test_a_producer_is_acknowledged_only_by_all_in_sync_replicas(idempotent: bool) -> None:
    """An outbox row is marked dispatched on its record's acknowledgement: with ``acks=1`` the
    leader alone would acknowledge, and a record it had not replicated is lost with it.
    Not left to the client's default: aiokafka's is ``acks=1`` unless it is idempotent."""
    ks = KafkaSettings(bootstrap="127.0.0.1:9", idempotent=idempotent)
    assert kafka.producer_options(ks)["acks"] == "all"
    dispatcher = kafka.producer_options(ks, **PRODUCER_OPTIONS)  # the relays' producer
    assert dispatcher["acks"] == "all"
    assert dispatcher["enable_idempotence"] is idempotent
