"""Settings every service shares, read from PAYCORE_* and validated at start-up."""

from __future__ import annotations

from datetime import timedelta

import pytest

from paycore.config import ConfigError, load_settings
from paycore.kafka import KafkaSettings
from paycore_dispatcher.worker import relay_config


def test_the_reminder_intervals_are_library_settings_every_service_reads() -> None:
    settings = load_settings({"PAYCORE_REMINDER_INTERVAL_S": "120", "PAYCORE_REMINDER_ACK_INTERVAL_S": "600"},
                             require_account=False)
    assert settings.reminder_interval == timedelta(seconds=120)
    assert settings.reminder_ack_interval == timedelta(seconds=600)
    # The dispatcher's dead letters raise their escalations on it too.
    ks = KafkaSettings(bootstrap="127.0.0.1:9")
    assert relay_config(settings, ks).reminder_interval == timedelta(seconds=120)
    defaults = load_settings({}, require_account=False)
    assert (defaults.reminder_interval_s, defaults.reminder_ack_interval_s) == (900.0, 3600.0)


@pytest.mark.parametrize("raw", ["0", "-5", "soon", "nan"])
def test_a_reminder_interval_that_is_not_a_positive_duration_fails_at_start_up(raw: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings({"PAYCORE_REMINDER_INTERVAL_S": raw}, require_account=False)
    assert refused.value.variable == "PAYCORE_REMINDER_INTERVAL_S"
