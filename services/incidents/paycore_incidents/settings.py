"""``PAYCORE_INCIDENTS_*`` and ``PAYCORE_CONSOLE_URL``: declared here, each once as the field of
:class:`IncidentSettings` that holds it, validated at start-up."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from paycore.config import ConfigError, KafkaTopic
from paycore.settings_spec import Count, Flag, Group, Number, Url, setting_of
from paycore.settings_spec import load as _load

SECONDS = Number("seconds", maximum=None)

INCIDENTS = Group("`paycore run incidents`: incident grouping of operator alerts (docs/dispatcher.md)")


@dataclass(frozen=True, kw_only=True)
class IncidentSettings:
    threshold: int = INCIDENTS.field(
        "PAYCORE_INCIDENTS_THRESHOLD", Count(maximum=100_000), 20,
        "alerts of one (provider account, reason) within the window that open one incident (at least 2)")
    window_s: float = INCIDENTS.field(
        "PAYCORE_INCIDENTS_WINDOW_S", SECONDS, 300.0, "the sliding window the threshold is counted in")
    quiet_s: float = INCIDENTS.field(
        "PAYCORE_INCIDENTS_QUIET_S", SECONDS, 600.0,
        "an open incident closes after this long without an alert of its key; per-attempt paging resumes")
    tick_s: float = INCIDENTS.field(
        "PAYCORE_INCIDENTS_TICK_S", SECONDS, 10.0, "how often the agent looks for quiet incidents to close")
    app_id: str = INCIDENTS.field(
        "PAYCORE_INCIDENTS_APP_ID", KafkaTopic(), "paycore-incidents",
        "the faust application id: its consumer group and the prefix of its changelog and internal topics")
    session_timeout_s: float = INCIDENTS.field(
        "PAYCORE_INCIDENTS_SESSION_TIMEOUT_S", Number("seconds", maximum=300.0), 10.0,
        "the agent's consumer-group session timeout (the local broker completes a join after half of it)")
    unbatched: bool = INCIDENTS.field(
        "PAYCORE_INCIDENTS_UNBATCHED", Flag(), False,
        "produce every record in a batch of its own: required on the local Tansu broker, whose high "
        "watermark is the last batch's first offset + 1, so faust would stop restoring its table short "
        "of the changelog's end")
    console_url: str | None = INCIDENTS.field(
        "PAYCORE_CONSOLE_URL", Url(), None, "the operator console's base URL, linked from incident pages",
        shown_default="— (pages carry no link)")


def load(env: Mapping[str, str] | None = None) -> IncidentSettings:
    settings = _load(IncidentSettings, os.environ if env is None else env)
    if settings.threshold < 2:  # a threshold of one would turn every alert into an incident
        raise ConfigError(setting_of(IncidentSettings, "threshold").name, "must be at least 2")
    return settings
