"""The grouping state machine alone: thresholds, folding, quiet close, deterministic dedup keys."""

from __future__ import annotations

from typing import Any

from paycore_incidents import grouping
from paycore_incidents.grouping import Page, Policy, State

POLICY = Policy(threshold=5, window_s=60.0, quiet_s=30.0, console_url="https://console.test/")


def alert(i: int, account: str = "acct-a", reason: str = "provider-timeout") -> dict[str, Any]:
    return {"escalation_id": i, "reason": reason, "provider_account": account, "alert": "initial",
            "dedup_key": f"escalation:{i}:initial"}


def feed(state: State | None, times: list[float], **kw: Any) -> tuple[State | None, list[Page]]:
    pages: list[Page] = []
    for i, t in enumerate(times):
        payload = alert(i, **kw)
        state, out = grouping.observe(state, payload, (("dedup_key", payload["dedup_key"]),),
                                      f"escalation:{i}", t, POLICY)
        pages += out
    return state, pages


def test_below_the_threshold_every_alert_passes_through_unchanged() -> None:
    _, pages = feed(None, [0, 1, 2, 3])
    assert [p.passthrough for p in pages] == [True] * 4
    assert [p.payload["dedup_key"] for p in pages] == [f"escalation:{i}:initial" for i in range(4)]


def test_the_threshold_within_the_window_opens_one_incident_and_folds_the_rest() -> None:
    state, pages = feed(None, [float(t) for t in range(50)])
    assert sum(p.passthrough for p in pages) == POLICY.threshold - 1
    [opened] = [p for p in pages if not p.passthrough]
    assert opened.payload["alert"] == "incident-open" and opened.payload["count"] == 5
    assert opened.payload["dedup_key"] == "incident:acct-a:provider-timeout:0.000"
    assert opened.payload["console_url"] == ("https://console.test/escalations?"
                                             "reason=provider-timeout&account=acct-a")
    assert state is not None and state["incident"]["count"] == 50 and state["incident"]["folded"] == 46


def test_alerts_spread_wider_than_the_window_never_open_an_incident() -> None:
    _, pages = feed(None, [i * 20.0 for i in range(20)])
    assert all(p.passthrough for p in pages)


def test_a_quiet_incident_closes_with_its_counts_and_per_attempt_paging_resumes() -> None:
    state, _ = feed(None, [float(t) for t in range(10)])
    key = grouping.group_key("acct-a", "provider-timeout")
    still, none = grouping.expire(state, key, 9 + POLICY.quiet_s - 1, POLICY)
    assert still == state and none == []
    gone, [closed] = grouping.expire(state, key, 9 + POLICY.quiet_s, POLICY)
    assert gone is None
    assert closed.payload["alert"] == "incident-closed" and closed.payload["count"] == 10
    assert closed.payload["dedup_key"] == "incident:acct-a:provider-timeout:0.000:closed"
    _, [again] = feed(gone, [100.0])
    assert again.passthrough


def test_replaying_the_same_records_yields_the_same_dedup_keys() -> None:
    times = [1000.0 + t / 10 for t in range(30)]
    assert [p.payload["dedup_key"] for p in feed(None, times)[1]] == [
        p.payload["dedup_key"] for p in feed(None, times)[1]]


def test_groups_are_per_account_and_reason() -> None:
    _, pages_a = feed(None, [0.0, 1.0, 2.0, 3.0], account="acct-a")
    _, pages_b = feed(None, [0.0], account="acct-b")
    assert grouping.group_of(alert(1, account="acct-b")) != grouping.group_of(alert(1))
    assert all(p.passthrough for p in pages_a + pages_b)
    assert grouping.group_of({"reason": "unparseable-notification"}) == (grouping.NO_ACCOUNT,
                                                                         "unparseable-notification")
