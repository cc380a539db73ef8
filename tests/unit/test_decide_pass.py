"""paycore.domain.decide_pass, pure: one recovery pass as a table, row by row, without a database.

The rescuers (services/recovery/paycore_recovery/rescuers) gather what it asks for and do what it
decides; the matrix tests (tests/matrix/test_recovery_*.py) run the same rows against PostgreSQL
and the sandbox. These pin the rows the reference states -- never a resend for a NotStarted
attempt, a pending customer action, past the deadline, after a refused resend or a failing
condition; a failed lookup is not "not found"; a miss inside the search lag concludes nothing.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest

from paycore.domain import (
    Attempt,
    AttemptState,
    EscalationReason,
    Lookups,
    Pass,
    PassDecision,
    PassFacts,
    PassKind,
    Step,
    Timing,
    decide_pass,
    kind_of,
)

S = AttemptState
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TIMING = Timing(abandonment_s=120, settle_s=40, action_poll_s=300, slow_cadence_s=3600,
                backoff_s=(10, 60, 600))
DEADLINE = NOW + timedelta(hours=22)
ATTEMPT = Attempt(
    attempt_id=uuid4(), order_id="ord_1", customer_id="cus_1", attempt_number=1,
    provider_account="cardco:acct_store:test", endpoint="https://api.cardco.example/v1/payments",
    api_version="2026-11-01", client_reference="ord_1-a1", idempotency_key="k", request_body="{}",
    amount_minor=4999, currency="EUR", state=S.UNKNOWN, provider_status=None, next_action=None,
    next_action_expires_at=None, outcome_reason=None, created_at=NOW - timedelta(hours=1),
    first_sent_at=NOW - timedelta(hours=1), escalation_deadline=DEADLINE, provider_payment_id=None,
    recovery_owner=None, lease_token=None, lease_acquired_at=None, lease_expires_at=None,
    next_check_at=NOW, version=1)
GATHERED = PassFacts(lookups_so_far=0)  # history read, nothing paused
NOT_FOUND = Lookups("not_found")
CHECKED = dataclasses.replace(GATHERED, lookups=NOT_FOUND, resend_was_rejected=False,
                              resend_conditions_checked=True)


def attempt(**changes: object) -> Attempt:
    return dataclasses.replace(ATTEMPT, **changes)  # type: ignore[arg-type]


def decide(a: Attempt = ATTEMPT, facts: PassFacts = GATHERED, now: datetime = NOW) -> PassDecision:
    return decide_pass(a, facts, now, TIMING)


def escalated(d: PassDecision) -> str | None:
    return d.escalation.text if d.escalation is not None else None


# -- which rescuer --------------------------------------------------------------------------------

def test_each_attempt_goes_to_the_rescuer_of_its_kind() -> None:
    fresh = NOW - timedelta(seconds=5)
    assert kind_of(attempt(state=S.NOT_STARTED), NOW, 40) is PassKind.NOT_STARTED
    assert kind_of(attempt(state=S.STARTED, first_sent_at=fresh), NOW, 40) is PassKind.SETTLING
    assert kind_of(attempt(state=S.STARTED), NOW, 40) is PassKind.UNKNOWN  # stalled past settling
    assert kind_of(attempt(state=S.UNKNOWN, first_sent_at=fresh), NOW, 40) is PassKind.UNKNOWN
    current = attempt(state=S.STARTED, next_action={"type": "redirect"},
                      next_action_expires_at=NOW + timedelta(minutes=5))
    assert kind_of(current, NOW, 40) is PassKind.CUSTOMER_ACTION
    expired = dataclasses.replace(current, next_action_expires_at=NOW - timedelta(seconds=1))
    assert kind_of(expired, NOW, 40) is PassKind.UNKNOWN  # an expired action proves nothing


# -- NotStarted -----------------------------------------------------------------------------------

def test_a_young_not_started_attempt_waits_for_its_endpoint_until_abandonment() -> None:
    d = decide(attempt(state=S.NOT_STARTED, created_at=NOW - timedelta(seconds=20), first_sent_at=None))
    assert (d.step, d.delay_s) == (Step.FINISH, 100)


def test_an_abandoned_not_started_attempt_is_closed_never_resent() -> None:
    a = attempt(state=S.NOT_STARTED, created_at=NOW - timedelta(seconds=120), first_sent_at=None)
    assert decide(a).step is Step.CLOSE_NEVER_SENT
    started = attempt(state=S.STARTED)  # the endpoint's Started committed first
    assert decide(a, PassFacts(lost_close_to=started)) == PassDecision(Step.FINISH, 40,
                                                                       result=Pass.RESCHEDULED)
    unknown = attempt(state=S.UNKNOWN)
    assert decide(a, PassFacts(lost_close_to=unknown)).delay_s == 10
    final = attempt(state=S.SUCCEEDED)
    assert decide(a, PassFacts(lost_close_to=final)).step is Step.DONE


# -- Started: settling, customer action -----------------------------------------------------------

def test_a_started_attempt_whose_answer_may_still_come_waits_out_the_settling_time() -> None:
    d = decide(attempt(state=S.STARTED, first_sent_at=NOW - timedelta(seconds=15)))
    assert (d.step, d.delay_s) == (Step.FINISH, 25)


def test_a_pending_customer_action_is_never_resent_and_waits_for_its_poll_or_expiry() -> None:
    a = attempt(state=S.STARTED, next_action={"type": "redirect"},
                next_action_expires_at=NOW + timedelta(seconds=90))
    assert decide(a, PassFacts()) == PassDecision(Step.FINISH, 90, result=Pass.RESCHEDULED)
    later = dataclasses.replace(a, next_action_expires_at=NOW + timedelta(hours=1))
    assert decide(later, PassFacts()).delay_s == 300
    # An action with an expiry waits for it even when its payment id is known: nothing to ask.
    known = dataclasses.replace(a, provider_payment_id="pay_1")
    assert decide(known, PassFacts()) == PassDecision(Step.FINISH, 90, result=Pass.RESCHEDULED)
    # Expiring within the second: looked at again when it expires, not a second later.
    soon = dataclasses.replace(a, next_action_expires_at=NOW + timedelta(milliseconds=500))
    assert decide(soon, PassFacts()).delay_s == 0.5


def test_a_pending_customer_action_past_the_deadline_is_escalated_not_resent() -> None:
    a = attempt(state=S.STARTED, next_action={"type": "redirect"},
                next_action_expires_at=NOW + timedelta(hours=1), escalation_deadline=NOW)
    d = decide(a, PassFacts())
    assert (d.step, escalated(d)) == (Step.ESCALATE, "deadline")


def test_an_action_without_expiry_is_looked_up_by_its_payment_id_and_applied_when_found() -> None:
    a = attempt(state=S.STARTED, next_action={"type": "redirect"}, provider_payment_id="pay_1")
    assert decide(a, PassFacts()).step is Step.LOOK_UP_ACTION
    assert decide(a, PassFacts(action_status=Lookups("found", ("pay_1",)))).step is Step.APPLY
    assert decide(a, PassFacts(action_status=Lookups("failed"))).step is Step.FINISH
    # With no payment id there is nothing to look up by: it waits for its poll.
    unknown_id = dataclasses.replace(a, provider_payment_id=None)
    assert decide(unknown_id, PassFacts()) == PassDecision(Step.FINISH, 300, result=Pass.RESCHEDULED)


# -- Unknown: lookups -------------------------------------------------------------------------------

def test_an_unknown_pass_reads_its_history_then_looks_up() -> None:
    assert decide(facts=PassFacts()).step is Step.READ_HISTORY
    assert decide().step is Step.LOOK_UP


def test_an_unconfigured_account_is_escalated_at_once() -> None:
    d = decide(facts=PassFacts(account_configured=False, lookups_so_far=0))
    assert (d.step, escalated(d)) == (Step.ESCALATE, "resend-not-safe:account-not-configured")


def test_a_paused_account_looks_up_nothing_until_the_pause_ends() -> None:
    d = decide(facts=PassFacts(lookups_so_far=0, paused_until=NOW + timedelta(seconds=30)))
    assert (d.step, d.delay_s, d.result) == (Step.FINISH, 30, "paused")


def test_one_payment_found_is_applied_and_two_go_to_a_person() -> None:
    one = dataclasses.replace(GATHERED, lookups=Lookups("found", ("pay_1",)))
    assert (decide(facts=one).step, decide(facts=one).delay_s) == (Step.APPLY, 10)
    two = dataclasses.replace(GATHERED, lookups=Lookups("found", ("pay_1", "pay_2")))
    d = decide(facts=two)
    assert (d.step, escalated(d), d.delay_s) == (Step.ESCALATE, "multiple-provider-payments", 3600)
    assert d.escalation is not None and d.escalation.detail == {"provider_payment_ids": ["pay_1", "pay_2"]}


@pytest.mark.parametrize(("lookups_so_far", "delay_s"), [(0, 10), (1, 60), (2, 600), (3, 3600), (9, 3600)])
def test_a_failed_lookup_is_not_not_found_and_backs_off_to_the_slow_cadence(
        lookups_so_far: int, delay_s: float) -> None:
    d = decide(facts=PassFacts(lookups_so_far=lookups_so_far, lookups=Lookups("failed")))
    assert (d.step, d.delay_s, d.result) == (Step.FINISH, delay_s, "lookup-failed")


def test_failing_lookups_past_the_deadline_escalate_and_only_read_on_the_slow_cadence() -> None:
    d = decide(attempt(escalation_deadline=NOW), dataclasses.replace(GATHERED, lookups=Lookups("failed")))
    assert (d.step, escalated(d), d.delay_s, d.result) == (Step.ESCALATE, "deadline", 3600, "lookup-failed")


def test_a_429_pauses_the_account_for_its_retry_after_or_one_second_without_one() -> None:
    d = decide(facts=dataclasses.replace(GATHERED, lookups=Lookups("rate_limited", retry_after_s=7)))
    assert (d.step, d.delay_s) == (Step.PAUSE, 7)
    bare = decide(facts=dataclasses.replace(GATHERED, lookups=Lookups("rate_limited")))
    assert (bare.step, bare.delay_s, bare.result) == (Step.PAUSE, 1.0, "paused")


# -- Unknown: nothing found -------------------------------------------------------------------------

def test_nothing_found_past_the_deadline_sends_nothing_and_escalates() -> None:
    past = attempt(escalation_deadline=NOW)
    for facts in (dataclasses.replace(GATHERED, lookups=NOT_FOUND), CHECKED,
                  dataclasses.replace(GATHERED, lookups=Lookups("unsupported"))):
        d = decide(past, facts)
        assert (d.step, escalated(d), d.delay_s) == (Step.ESCALATE, "deadline", 3600)


def test_a_miss_inside_the_search_lag_concludes_nothing_and_looks_again_when_it_will() -> None:
    until = NOW + timedelta(seconds=45)
    d = decide(facts=dataclasses.replace(CHECKED, lookups=Lookups("not_found", inconclusive_until=until)))
    assert (d.step, d.delay_s, d.result) == (Step.FINISH, 45, "inconclusive")
    near = attempt(escalation_deadline=NOW + timedelta(seconds=20))  # the deadline comes first
    assert decide(near, dataclasses.replace(CHECKED, lookups=Lookups("not_found",
                                                                     inconclusive_until=until))).delay_s == 20


def test_nothing_found_checks_the_resend_conditions_then_resends_under_the_key() -> None:
    assert decide(facts=dataclasses.replace(GATHERED, lookups=NOT_FOUND)).step is Step.CHECK_RESEND
    assert decide(facts=CHECKED) == PassDecision(Step.RESEND, 10, result=Pass.RESENT)


def test_a_refused_resend_is_never_repeated() -> None:
    d = decide(facts=dataclasses.replace(CHECKED, resend_was_rejected=True))
    assert (d.step, escalated(d), d.delay_s) == (Step.ESCALATE, "resend-rejected", 3600)


@pytest.mark.parametrize("condition", ["order-not-payable", "token-expired", "account-not-configured",
                                       "endpoint-changed", "request-not-buildable:amount"])
def test_a_failing_resend_condition_is_escalated_by_name_never_resent(condition: str) -> None:
    d = decide(facts=dataclasses.replace(CHECKED, failing_resend_condition=condition))
    assert (d.step, escalated(d)) == (Step.ESCALATE, f"{EscalationReason.RESEND_NOT_SAFE.value}:{condition}")
