"""Incident grouping as a pure state machine: one state per (provider account, reason).

The faust agent (:mod:`.app`) keeps these states in a changelogged table and applies
:func:`observe` to each alert and :func:`expire` on a timer. Everything here is a
function of the state, the alert and a time, so a record that is processed again after
a crash produces the same pages with the same dedup keys -- which the inbox of
``paycore run alerts`` then drops (docs/decisions/0004-incident-grouping.md).

Times are event times in seconds: the Kafka timestamp of the ``ops.alerts`` record,
which a redelivery keeps. Only :func:`expire` looks at the wall clock.

State, JSON-serialisable (it is the table's value)::

    {"recent": [t, ...],          # alert times within the window, oldest first (at most threshold)
     "incident": None | {"opened_at": t, "dedup_key": str, "count": n, "folded": n, "last_at": t}}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from paycore.contracts import SCHEMA_VERSION

State = dict[str, Any]
NO_ACCOUNT = "-"  # an alert that names no provider account is grouped by its reason alone


@dataclass(frozen=True)
class Policy:
    threshold: int  # alerts of one key within the window that open an incident
    window_s: float
    quiet_s: float  # an open incident closes after this long without an alert of its key
    console_url: str | None = None


@dataclass(frozen=True)
class Page:
    """A record for the pages topic: a per-attempt alert passed through, or an incident page."""

    key: str
    payload: dict[str, Any]
    headers: tuple[tuple[str, str], ...]
    passthrough: bool = False


def group_of(payload: dict[str, Any]) -> tuple[str, str]:
    """(provider account, reason) of an alert; reminders group with the alerts they remind of."""
    account = payload.get("provider_account") or NO_ACCOUNT
    reason = payload.get("reason") or payload.get("kind") or "alert"
    return str(account), str(reason)


def group_key(account: str, reason: str) -> str:
    return f"{account}|{reason}"


def console_link(policy: Policy, account: str, reason: str) -> str | None:
    if not policy.console_url:
        return None
    query = {"reason": reason, **({"account": account} if account != NO_ACCOUNT else {})}
    return f"{policy.console_url.rstrip('/')}/escalations?{urlencode(query)}"


def _incident_page(policy: Policy, account: str, reason: str, incident: dict[str, Any], event: str,
                   dedup_key: str) -> Page:
    payload: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "kind": "incident", "alert": event, "dedup_key": dedup_key,
        "reason": reason,
        "provider_account": None if account == NO_ACCOUNT else account,
        "incident_key": incident["dedup_key"], "opened_at": incident["opened_at"],
        "count": incident["count"], "folded": incident["folded"],
        "threshold": policy.threshold, "window_s": policy.window_s, "quiet_s": policy.quiet_s,
        "console_url": console_link(policy, account, reason),
    }
    if event == "incident-closed":
        payload["last_at"] = incident["last_at"]
    return Page(key=f"incident:{account}:{reason}", payload=payload,
                headers=(("kind", "incident"), ("dedup_key", dedup_key)))


def observe(state: State | None, payload: dict[str, Any], headers: tuple[tuple[str, str], ...],
            key: str, at: float, policy: Policy) -> tuple[State, list[Page]]:
    """One alert at event time ``at``: pass it through, open an incident, or fold it."""
    account, reason = group_of(payload)
    state = {"recent": list((state or {}).get("recent", [])), "incident": (state or {}).get("incident")}
    incident = state["incident"]
    if incident is not None:
        incident = {**incident, "count": incident["count"] + 1, "folded": incident["folded"] + 1,
                    "last_at": max(incident["last_at"], at)}
        state["incident"] = incident
        return state, []
    recent = [t for t in state["recent"] if t > at - policy.window_s] + [at]
    if len(recent) < policy.threshold:
        state["recent"] = recent[-policy.threshold:]
        return state, [Page(key=key, payload=payload, headers=headers, passthrough=True)]
    # The threshold-th alert within the window opens the incident; it is itself folded into it.
    opened_at = recent[0]
    dedup_key = f"incident:{account}:{reason}:{opened_at:.3f}"
    incident = {"opened_at": opened_at, "dedup_key": dedup_key, "count": len(recent), "folded": 1,
                "last_at": at}
    return {"recent": [], "incident": incident}, [
        _incident_page(policy, account, reason, incident, "incident-open", dedup_key)]


def expire(state: State | None, group: str, now: float, policy: Policy) -> tuple[State | None, list[Page]]:
    """Close the incident of ``group`` when quiet for ``quiet_s``; forget an idle window.

    Returns (None, ...) when nothing is worth keeping, so the table does not grow with
    every key ever seen.
    """
    if state is None:
        return None, []
    incident = state.get("incident")
    account, _, reason = group.partition("|")
    if incident is not None:
        if now - incident["last_at"] < policy.quiet_s:
            return state, []
        return None, [_incident_page(policy, account, reason, incident, "incident-closed",
                                     f"{incident['dedup_key']}:closed")]
    recent = [t for t in state.get("recent", []) if t > now - policy.window_s]
    if not recent:
        return None, []
    return ({**state, "recent": recent} if recent != state.get("recent") else state), []
