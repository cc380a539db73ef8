"""The real Kafka-protocol broker the dispatcher suite uses, for the stack Prometheus scrapes."""

from tests.dispatcher.conftest import kafka_bootstrap, ks

__all__ = ["kafka_bootstrap", "ks"]
