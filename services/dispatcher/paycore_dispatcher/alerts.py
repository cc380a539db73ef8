"""``paycore run alerts``: deliver each ``ops.alerts`` record once to an HTTP endpoint.

Built on the consumer helper (docs/decisions/0001-alert-consumer.md). Per alert,
in one database transaction: the inbox row for its ``dedup_key`` (a redelivered
alert stops here), one POST to the endpoint, and an ``alert_deliveries`` row.
A 2xx commits; a transport error, 429 or 5xx raises :class:`RetryLater`, which
rolls back and retries after a backoff; another 4xx is a permanent rejection,
recorded as ``rejected`` and logged, so one malformed alert cannot block the rest.

Formats: a Slack-compatible incoming webhook (``{"text": ...}``) or PagerDuty
Events API v2 (``event_action=trigger`` with the alert's ``dedup_key``, which also
makes PagerDuty itself collapse a repeat after a crash between the POST and the
commit -- the one window in which an alert can be posted twice).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from paycore import queries
from paycore.clock import Clock
from paycore.consumer import InboxConsumer, Message, RetryLater
from paycore.kafka import KafkaSettings

log = logging.getLogger("paycore.alerts")

ALERTS_GROUP = "paycore-alerts"

DELIVERIES = queries.load("alert_deliveries", directory=Path(__file__).with_name("queries"))


def _incident_summary(p: dict[str, Any]) -> str:
    """An incident page (``paycore run incidents``): counts and the console link, no attempt ids."""
    where = f"{p.get('reason', '?')} on {p.get('provider_account') or 'no account'}"
    if p.get("alert") == "incident-closed":
        text = (f"paycore incident closed: {where}: {p.get('count', '?')} alerts, "
                f"{p.get('folded', '?')} folded into the incident")
    else:
        text = (f"paycore incident opened: {where}: {p.get('count', '?')} alerts within "
                f"{p.get('window_s', '?')} s; further alerts of it are folded until "
                f"{p.get('quiet_s', '?')} s pass without one")
    return f"{text} {p['console_url']}" if p.get("console_url") else text


def _summary(p: dict[str, Any]) -> str:
    if p.get("kind") == "incident":
        return _incident_summary(p)
    reason = p.get("reason") or p.get("kind") or "alert"
    parts = [f"paycore escalation {p.get('escalation_id', '?')}: {reason}"]
    if p.get("escalation_key"):
        parts.append(f"({p['escalation_key']})")
    if p.get("alert") and p.get("alert") != "initial":
        parts.append(f"[{p['alert']}]")
    if p.get("attempt_id"):
        parts.append(f"attempt {p['attempt_id']}")
    return " ".join(parts)


def slack_body(message: Message) -> dict[str, Any]:
    p = message.payload
    return {"text": _summary(p),
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": f"*{_summary(p)}*"}},
                       {"type": "context", "elements": [
                           {"type": "mrkdwn", "text": f"dedup_key `{message.dedup_key}`"}]}]}


def pagerduty_body(message: Message, routing_key: str) -> dict[str, Any]:
    p = message.payload
    return {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": message.dedup_key,
        "payload": {
            "summary": _summary(p)[:1024],
            "source": "paycore",
            "severity": "critical" if str(p.get("reason", "")).startswith("outbox") else "error",
            "component": "payments",
            "custom_details": {k: v for k, v in p.items() if k != "dedup_key"},
        },
    }


@dataclass
class AlertSender:
    """The handler: POST one alert, record it in the handler's transaction."""

    http: httpx.AsyncClient
    url: str
    clock: Clock
    format: str = "slack"
    routing_key: str | None = None

    async def __call__(self, conn: asyncpg.Connection, message: Message) -> None:
        if self.format == "pagerduty":
            body = pagerduty_body(message, self.routing_key or "")
        else:
            body = slack_body(message)
        try:
            response = await self.http.post(self.url, json=body)
        except httpx.HTTPError as exc:
            raise RetryLater(f"alert endpoint unreachable: {type(exc).__name__}") from exc
        status = response.status_code
        if status == 429 or status >= 500:
            raise RetryLater(f"alert endpoint answered {status}")
        outcome = "delivered" if 200 <= status < 300 else "rejected"
        if outcome == "rejected":
            log.error("alert %s rejected by the endpoint with %d; recorded, not retried",
                      message.dedup_key, status)
        escalation_id = message.payload.get("escalation_id")
        await DELIVERIES.record.execute(
            conn, dedup_key=message.dedup_key,
            escalation_id=int(escalation_id) if isinstance(escalation_id, int) else None,
            endpoint_format=self.format, response_status=status, outcome=outcome, now=self.clock.now())


def alert_consumer(
    pool: asyncpg.Pool, ks: KafkaSettings, sender: AlertSender, clock: Clock, *, topic: str | None = None,
    **options: Any,
) -> InboxConsumer:
    """Delivers ``topic``: ops.alerts, or the pages topic when incidents are grouped
    (``PAYCORE_ALERT_INCIDENT_GROUPING``); the same inbox group either way, so switching
    does not re-deliver what was delivered (per-attempt pages keep their alert's dedup key)."""
    return InboxConsumer(pool=pool, kafka_settings=ks, topics=(topic or ks.alerts_topic,),
                         group_id=options.pop("group_id", ALERTS_GROUP), handler=sender, clock=clock,
                         **options)
