"""``PAYCORE_INCIDENTS_*`` and ``PAYCORE_CONSOLE_URL``: declared here, validated at start-up."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from paycore.config import ConfigError, KafkaTopic
from paycore.settings_spec import Count, Flag, Group, Number, Url

SECONDS = Number("seconds", maximum=None)

INCIDENTS = Group("`paycore run incidents`: incident grouping of operator alerts (docs/dispatcher.md)")
THRESHOLD = INCIDENTS.declare(
    "PAYCORE_INCIDENTS_THRESHOLD", Count(maximum=100_000), 20,
    "alerts of one (provider account, reason) within the window that open one incident (at least 2)")
WINDOW = INCIDENTS.declare(
    "PAYCORE_INCIDENTS_WINDOW_S", SECONDS, 300.0, "the sliding window the threshold is counted in")
QUIET = INCIDENTS.declare(
    "PAYCORE_INCIDENTS_QUIET_S", SECONDS, 600.0,
    "an open incident closes after this long without an alert of its key; per-attempt paging resumes")
TICK = INCIDENTS.declare(
    "PAYCORE_INCIDENTS_TICK_S", SECONDS, 10.0, "how often the agent looks for quiet incidents to close")
APP_ID = INCIDENTS.declare(
    "PAYCORE_INCIDENTS_APP_ID", KafkaTopic(), "paycore-incidents",
    "the faust application id: its consumer group and the prefix of its changelog and internal topics")
SESSION_TIMEOUT = INCIDENTS.declare(
    "PAYCORE_INCIDENTS_SESSION_TIMEOUT_S", Number("seconds", maximum=300.0), 10.0,
    "the agent's consumer-group session timeout (the local broker completes a join after half of it)")
UNBATCHED = INCIDENTS.declare(
    "PAYCORE_INCIDENTS_UNBATCHED", Flag(), False,
    "produce every record in a batch of its own: required on the local Tansu broker, whose high "
    "watermark is the last batch's first offset + 1, so faust would stop restoring its table short "
    "of the changelog's end")
CONSOLE_URL = INCIDENTS.declare(
    "PAYCORE_CONSOLE_URL", Url(), None, "the operator console's base URL, linked from incident pages",
    shown_default="— (pages carry no link)")


@dataclass(frozen=True)
class IncidentSettings:
    threshold: int = THRESHOLD.default
    window_s: float = WINDOW.default
    quiet_s: float = QUIET.default
    tick_s: float = TICK.default
    app_id: str = APP_ID.default
    session_timeout_s: float = SESSION_TIMEOUT.default
    console_url: str | None = None
    unbatched: bool = False


def load(env: Mapping[str, str] | None = None) -> IncidentSettings:
    env = os.environ if env is None else env
    threshold = THRESHOLD.read(env)
    if threshold < 2:  # a threshold of one would turn every alert into an incident
        raise ConfigError(THRESHOLD.name, "must be at least 2")
    return IncidentSettings(threshold=threshold, window_s=WINDOW.read(env), quiet_s=QUIET.read(env),
                            tick_s=TICK.read(env), app_id=APP_ID.read(env),
                            session_timeout_s=SESSION_TIMEOUT.read(env), console_url=CONSOLE_URL.get(env),
                            unbatched=UNBATCHED.read(env))
