# ruff: noqa: E501 -- a table of exact source snippets and test ids, kept whole to be greppable
"""The curated mutations ``make mutate`` applies: each breaks one money-guarding condition.

An entry names the file, the exact original text (found exactly once, or the
entry is reported stale), its replacement, and the tests that must fail with it.
SQL mutations keep every bound parameter in use (``(version = :version OR TRUE)``),
so the statement still prepares and only the guard is gone. A mutation of a named
query (paycore/queries/*.sql) is written with :func:`in_query`: the query's whole
text, with every occurrence of a predicate inside it replaced.

Not listed, on purpose: a predicate that is redundant with another one under the
rule "every state change moves ``version``" (all three writers of
``payment_attempts.state`` keep it). Dropping ``state = $3`` alone from
apply_outcome, either half of mark_started or close_never_sent, or the
not-sendable check of a send intent alone is an equivalent mutant: the remaining
predicate refuses the same rows. Those guards are mutated as a whole instead.
See docs/testing.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str  # relative to the repository root
    original: str
    replacement: str
    tests: tuple[str, ...]  # pytest node ids (or files) that must fail
    guards: str  # what the condition protects, in one line


ATTEMPTS = "libs/paycore/paycore/attempts.py"
CARDCO = "libs/paycore/paycore/providers/cardco/client.py"
CARDCO_ANSWERS = "libs/paycore/paycore/providers/cardco/answers.py"
CARDCO_OPERATIONS = "libs/paycore/paycore/providers/cardco/operations.py"
CARDCO_REQUEST = "libs/paycore/paycore/providers/cardco/request.py"
LEASES = "libs/paycore/paycore/leases.py"
RESCUE_UNKNOWN = "services/recovery/paycore_recovery/rescuers/unknown.py"  # gathers an Unknown pass's facts
RESEND = "services/recovery/paycore_recovery/rescuers/resend.py"
HANDLER = "services/webhooks/paycore_webhooks/handler.py"
INTAKE = "services/webhooks/paycore_webhooks/app.py"
RELAY = "services/dispatcher/paycore_dispatcher/relay.py"
CONSUMER = "libs/paycore/paycore/consumer.py"
CONFIG = "libs/paycore/paycore/config.py"
DISPATCHER_SETTINGS = "services/dispatcher/paycore_dispatcher/settings.py"
ACCOUNTS = "libs/paycore/paycore/accounts.py"
EVIDENCE_RULES = "libs/paycore/paycore/evidence.py"
EVENTS = "libs/paycore/paycore/providers/cardco/events.py"
REPLAYS = "libs/paycore/paycore/webhook_replays.py"
ADYEN = "libs/paycore/paycore/providers/adyen/client.py"
STRIPE = "libs/paycore/paycore/providers/stripe/client.py"
GATE = "libs/paycore/paycore/payment_methods.py"
REGISTRY = "libs/paycore/paycore/providers/registry.py"
ADAPTER = "libs/paycore/paycore/providers/adapter.py"  # what every provider client shares
PROVIDER_HTTP = "libs/paycore/paycore/providers/http.py"  # the pool and the stored request's rules
PROVIDER_POOL = "libs/paycore/paycore/providers/aiohttp_pool.py"  # the pool under httpx's transport
SETTLEMENTS = "libs/paycore/paycore/settlements.py"  # one batch against the books
SETTLEMENT_LINES_SQL = "libs/paycore/paycore/queries/settlement_lines.sql"  # matching and judging a line
SETTLEMENT_EXCEPTIONS_SQL = "libs/paycore/paycore/queries/settlement_exceptions.sql"
RECONCILE = "tests/settlement/test_reconcile_batch.py"
POOL_TESTS = "tests/unit/test_aiohttp_pool.py"
DEAD_ENDS = "libs/paycore/paycore/dead_ends.py"
CONFLICTS = "libs/paycore/paycore/conflicts.py"
CHAOS_INVARIANTS = "devstack/paycore_devstack/chaos/invariants.py"  # i9
CHAOS_KILLS = "devstack/paycore_devstack/chaos/kills.py"  # i9
CHAOS_PROVIDERS = "devstack/paycore_devstack/chaos/providers.py"  # i9
SANDBOX_FAULTS = "services/sandbox/paycore_sandbox/faults.py"  # i9

RECORD = "tests/matrix/test_record_outcome.py"
REPO = "tests/matrix/test_live_attempt_repository.py"
REC = "tests/matrix/test_recovery_matrix.py"
REC_NOT_STARTED = "tests/matrix/test_recovery_not_started.py"
REC_CLAIMS = "tests/matrix/test_recovery_claims.py"
REC_BATCHED = "tests/matrix/test_recovery_batched_claims.py"
REC_INTENTS = "tests/matrix/test_recovery_send_intents.py"
REC_ESCALATIONS = "tests/matrix/test_recovery_escalations.py"
REC_SEARCH_LAG = "tests/matrix/test_recovery_search_lag.py"
INTENT = "tests/matrix/test_send_intent.py"
NOTE = "tests/matrix/test_notification_matrix.py"
INBOX_RETENTION = "tests/dispatcher/test_inbox_retention.py"
KAFKA = "libs/paycore/paycore/kafka.py"
KAFKA_SECURITY_TESTS = "tests/dispatcher/test_kafka_security.py"  # i12
CLIENT = "tests/unit/test_cardco_client.py"
CHECKOUT = "tests/matrix/test_checkout_matrix.py"
OUTBOX = "tests/dispatcher/test_outbox_matrix.py"
CONTRACTS = "tests/dispatcher/test_contracts.py"
EVIDENCE = "tests/matrix/test_evidence_about_other_payments.py"
PROVIDER_ACCOUNTS_TESTS = "tests/matrix/test_provider_accounts.py"
ADYEN_CLIENT = "tests/unit/test_adyen_client.py"
STRIPE_CLIENT = "tests/unit/test_stripe_client.py"
CONFORMANCE = "tests/provider_conformance/test_conformance.py"  # every provider's shared lines
INTAKE_ROUTES = "tests/webhooks/test_intake_routes.py"
OPS_DEAD_ENDS = "tests/operators/test_dead_ends.py"
OPS_CONFLICTS = "tests/operators/test_conflicts.py"
CHAOS_CHECKS = "tests/chaos/test_invariants.py"  # i9
CHAOS_STACK = "tests/chaos/test_stack.py"  # i9


# The console's sign-in (issue 13). The migrations' CHECKs are SQL files, not modules whose
# import from the copy the tool can check, and are not listed.
OPERATORS = "libs/paycore/paycore/operators.py"
LOGIN_FAILURES_SQL = "libs/paycore/paycore/queries/operator_login_failures.sql"  # the sign-in throttle's SQL
CONSOLE_AUTH = "services/console/paycore_console/credentials.py"
BEARER = "libs/paycore/paycore/bearer_tokens.py"
OPERATOR_ACCOUNTS_TESTS = "tests/operators/test_operator_accounts.py"
CONSOLE_TESTS = "tests/operators/test_console_auth.py"
# The console service (issue 13): its guards on every POST.
WEB_PAGES = "services/console/paycore_console/pages.py"
WEB_API = "services/console/paycore_console/api.py"
WEB_AUTH = "services/console/paycore_console/auth.py"
WEB_CONTEXT = "services/console/paycore_console/context.py"
WEB_GUARDS = "tests/console/test_guards.py"
WEB_SIGN_IN = "tests/console/test_sign_in.py"
# Issue 8's edges (worktree i8): poison input, outages, identity providers, start and stop.
BODIES = "libs/paycore/paycore/http/bodies.py"
CURRENCIES = "libs/paycore/paycore/currencies.py"
DB_ERRORS = "libs/paycore/paycore/errors.py"
CHECKOUT_AUTH = "services/checkout/paycore_checkout/auth.py"
CHECKOUT_ROUTES = "services/checkout/paycore_checkout/routes.py"
CHECKOUT_APP = "services/checkout/paycore_checkout/app.py"
DISPATCHER_WORKER = "services/dispatcher/paycore_dispatcher/worker.py"
SUPERVISOR = "devstack/paycore_devstack/supervisor.py"
EMBEDDED = "devstack/paycore_devstack/embedded.py"
SUPERVISOR_BETWEEN = (  # supervisor.py from request_stop's last line to write()'s except
    '\n'
    '    @property\n'
    '    def stopping(self) -> bool:\n'
    '        return self._stop.is_set()\n'
    '\n'
    '    # ------------------------------------------------------------------ children\n'
    '\n'
    '    def emit(self, name: str, line: str) -> None:\n'
    '        self.write(f"{name:<{self.prefix_width}} | {line}\\n")\n'
    '\n'
    '    def write(self, text: str) -> None:\n'
    '        """Write to :attr:`out`; never raises. Once a write fails, output is discarded."""\n'
    '        if self._out_lost:\n'
    '            return\n'
    '        try:\n'
    '            self.out.write(text)\n'
    '            self.out.flush()\n'
)
HTTP_EDGES = "tests/checkout/test_http_edges.py"
IDENTITY_PROVIDERS = "tests/checkout/test_identity_providers.py"
INTAKE_EDGES = "tests/webhooks/test_intake_edges.py"
DATABASE_OUTAGE = "tests/checkout/test_database_outage.py"
CRASHED_LOOPS = "tests/unit/test_loops_outlive_a_database_crash.py"
KAFKA_PRODUCER = "tests/unit/test_kafka_producer.py"
SETTINGS_TESTS = "tests/unit/test_settings.py"
CLI_TESTS = "tests/unit/test_cli.py"
EMBEDDED_TESTS = "tests/unit/test_embedded.py"
WEB_APP = "services/console/paycore_console/app.py"
WEB_OUTAGE = "tests/console/test_database_outage.py"
DOMAIN = "libs/paycore/paycore/domain.py"
NOTIFICATIONS = "libs/paycore/paycore/notifications.py"
ATTACH_PREVIEW = "tests/operators/test_attach_preview.py"
ATTEMPTS_SQL = "libs/paycore/paycore/queries/payment_attempts.sql"  # every statement on the attempts table
EVENTS_SQL = "libs/paycore/paycore/queries/payment_attempt_events.sql"  # the history, notifications, evidence
ESCALATIONS_SQL = "libs/paycore/paycore/queries/payment_escalations.sql"  # every statement on escalations
OUTBOX_SQL = "libs/paycore/paycore/queries/outbox_messages.sql"  # the outbox's, the relay's claims too
OPERATIONS_SQL = "libs/paycore/paycore/queries/payment_operations.sql"  # issue 29: recording under the lock
OPERATIONS_REPO = "libs/paycore/paycore/operations.py"  # issue 29: recording an operation
RECORD_OPERATION = "tests/matrix/test_record_operation.py"
OPERATION_WRITES = "tests/matrix/test_operation_writes.py"  # issue 29: start and apply, conditional
WRITER = "libs/paycore/paycore/writer.py"  # issue 28: the one writer
DECIDE = "tests/unit/test_decide_outcome.py"  # issue 28: decide_outcome as a table
DECIDE_PASS = "tests/unit/test_decide_pass.py"  # issue 28: decide_pass as a table
OPERATION_RULES = "tests/unit/test_operation_rules.py"
DECIDE_OPERATION = "tests/unit/test_decide_operation_outcome.py"  # issue 29: an operation's outcome, as a table
REFUND_SENDS = "tests/operations/test_refund_sends.py"  # issue 29: refunds sent and applied
REFUND_RECOVERY = "tests/operations/test_refund_recovery.py"  # issue 29: unanswered refunds resolved
REFUND_NOTIFICATIONS = "tests/operations/test_refund_notifications.py"  # issue 29: refund webhooks
RESCUE_OPERATIONS = "services/recovery/paycore_recovery/rescuers/operations.py"
OPERATION_HANDLER = "services/webhooks/paycore_webhooks/operation_handler.py"
OPERATION_CLIENT = "tests/unit/test_cardco_operations_client.py"  # issue 29: Cardco's after-payment calls  # issue 29: never more back than was taken
# Issue 26: the guards an outside mutation audit found unprotected.
STRIPE_WIRE = "libs/paycore/paycore/providers/stripe/wire.py"
STRIPE_EVENTS = "libs/paycore/paycore/providers/stripe/events.py"
SIGNATURES = "libs/paycore/paycore/webhook_signatures.py"
REC_LOOKUPS = "tests/matrix/test_recovery_lookups.py"
SECRET_ROTATION = "tests/providers/test_secret_rotation.py"
CHECKOUT_HTTP = "tests/checkout/test_http_api.py"
INTAKE_HTTP = "tests/webhooks/test_intake_http.py"
STRIPE_EVENT_TESTS = "tests/unit/test_stripe_events.py"


def in_query(file: str, name: str, old: str, new: str) -> tuple[str, str]:
    """(original, replacement) for every ``old`` inside the named query ``name`` of ``file``: the
    query's whole text, so the mutation touches that statement only, wherever else ``old`` is."""
    text = Path(__file__).resolve().parents[1].joinpath(file).read_text(encoding="utf-8")
    start = text.index(f"-- name: {name}\n")
    end = text.find("\n-- name: ", start + 1)
    body = text[start:] if end < 0 else text[start:end]
    if old not in body:
        raise ValueError(f"{file}: query {name} has no {old!r}")
    return body, body.replace(old, new)


def t(file: str, *names: str) -> tuple[str, ...]:
    return tuple(f"{file}::{name}" for name in names)


MUTATIONS: tuple[Mutation, ...] = (
    # -- conditional writes ------------------------------------------------------------------------
    Mutation(
        "apply-outcome-version", ATTEMPTS_SQL,
        *in_query(ATTEMPTS_SQL, 'apply_outcome', 'version = :version', '(version = :version OR TRUE)'),
        t(RECORD, "test_a_notification_racing_a_started_status_update_that_records_another_payment_id_is_escalated"),
        "an outcome write never lands on a version it did not read (Started -> Started races)",
    ),
    Mutation(
        "lost-race-reapplies", ATTEMPTS,
        """        except LostRace:
            log.info("outcome write for %s lost a race; reapplying", attempt_id)""",
        """        except LostRace:
            raise OutcomeNotConfirmed("mutated: no reapply") from None""",
        t(RECORD, "test_an_outcome_write_that_loses_a_race_to_an_unknown_winner_is_reapplied_and_ends_succeeded",
          "test_a_reapplied_outcome_write_records_one_send_result_for_its_one_send"),
        "an outcome write that lost a race is reapplied on the winner's version, its first try's"
        " writes rolled back (evidence is not dropped because another writer moved first)",
    ),
    Mutation(
        "apply-outcome-guard", ATTEMPTS_SQL,
        *in_query(ATTEMPTS_SQL, 'apply_outcome', 'AND version = :version AND state = :state', 'AND (version = :version OR TRUE) AND (state = :state OR TRUE)'),
        t(RECORD, "test_an_outcome_write_that_loses_a_race_to_a_succeeded_winner_returns_the_winner",
          "test_a_notification_racing_a_started_status_update_that_records_another_payment_id_is_escalated"),
        "an outcome write never overwrites a winner it did not read",
    ),
    Mutation(
        "apply-outcome-keeps-payment-id", ATTEMPTS_SQL,
        "provider_payment_id = COALESCE(provider_payment_id, :payment_id),",
        "provider_payment_id = COALESCE(:payment_id, provider_payment_id),",
        t(RECORD, "test_the_outcome_write_keeps_a_recorded_provider_payment_id_whatever_it_is_handed"),
        "an outcome write never replaces the provider payment id an attempt recorded (found by the "
        "generated run's sitting on the named queries)",
    ),
    Mutation(
        "mark-started-guard", ATTEMPTS_SQL,
        "WHERE a.attempt_id = :attempt_id AND a.version = :version AND a.state = 'NotStarted'",
        "WHERE a.attempt_id = :attempt_id AND (a.version = :version OR TRUE) AND (a.state = 'NotStarted' OR TRUE)",
        t(REPO, "test_exactly_one_of_two_concurrent_starts_with_the_same_version_wins"),
        "exactly one caller moves NotStarted -> Started and may send",
    ),
    Mutation(
        "close-never-sent-guard", ATTEMPTS_SQL,
        *in_query(ATTEMPTS_SQL, 'close_never_sent', "AND version = :version AND state = 'NotStarted'", "AND (version = :version OR TRUE) AND (state = 'NotStarted' OR TRUE)"),
        t(REC_NOT_STARTED, "test_a_stale_not_started_attempt_the_endpoint_starts_as_recovery_closes_it_is_rescheduled_not_closed"),
        'recovery closes only the NotStarted attempt it read, at the version it read',
    ),
    Mutation(
        "close-never-sent-lease", ATTEMPTS_SQL,
        *in_query(ATTEMPTS_SQL, 'close_never_sent', 'AND recovery_owner = :owner AND lease_token = :token AND lease_expires_at > :now', 'AND (recovery_owner = :owner AND lease_token = :token AND lease_expires_at > :now OR TRUE)'),
        t(REC_NOT_STARTED, "test_a_worker_whose_lease_was_reclaimed_cannot_close_the_not_started_attempt"),
        'a worker whose lease was reclaimed cannot close the attempt',
    ),
    Mutation(
        "finish-ownership", ATTEMPTS_SQL,
        *in_query(ATTEMPTS_SQL, 'finish', 'AND recovery_owner = :owner AND lease_token = :token AND lease_expires_at > :now', 'AND (recovery_owner = :owner AND lease_token = :token AND lease_expires_at > :now OR TRUE)'),
        t(REC_CLAIMS, "test_a_stale_worker_cannot_release_the_new_owners_lease"),
        "ownership (one predicate): only the owner's unexpired lease finishes, escalates or sends",
    ),
    Mutation(
        "finish-token", ATTEMPTS_SQL,
        *in_query(ATTEMPTS_SQL, 'finish', 'lease_token = :token', '(lease_token = :token OR TRUE)'),
        t(REC_CLAIMS, "test_a_stale_worker_cannot_release_the_new_owners_lease"),
        'a stale worker with the same name but an old token owns nothing',
    ),
    Mutation(
        "owns-ownership", ATTEMPTS_SQL,
        *in_query(ATTEMPTS_SQL, 'owns', 'AND recovery_owner = :owner AND lease_token = :token AND lease_expires_at > :now', 'AND (recovery_owner = :owner AND lease_token = :token AND lease_expires_at > :now OR TRUE)'),
        t(REC, "test_a_worker_whose_lease_was_reclaimed_before_its_final_check_records_send_abandoned_sends_nothing"),
        "the final local check before a resend asks whether this worker still owns the lease",
    ),
    Mutation(
        "lock-owned-ownership", ATTEMPTS_SQL,
        *in_query(ATTEMPTS_SQL, 'lock_owned', 'AND recovery_owner = :owner AND lease_token = :token AND lease_expires_at > :now', 'AND (recovery_owner = :owner AND lease_token = :token AND lease_expires_at > :now OR TRUE)'),
        t("tests/matrix/test_send_intent.py", "test_the_repository_cannot_commit_a_send_intent_without_the_recovery_owners_lease"),
        "a send intent (and an escalate-and-finish) is committed only under the worker's own lease",
    ),
    Mutation(
        "claim-next-due-lease", ATTEMPTS_SQL,
        *in_query(ATTEMPTS_SQL, 'claim_due', ' AND (recovery_owner IS NULL OR lease_expires_at <= :now)', ''),
        t(REC_INTENTS, "test_an_unconfirmed_send_intent_write_sends_nothing_and_leaves_the_lease_to_expire"),
        'a claim never takes an attempt whose lease is held and unexpired',
    ),
    Mutation(
        "claim-lease", ATTEMPTS_SQL,
        *in_query(ATTEMPTS_SQL, 'claim', '(recovery_owner IS NULL OR lease_expires_at <= :now)', '(recovery_owner IS NULL OR lease_expires_at <= :now OR TRUE)'),
        t(REC_CLAIMS, "test_a_stale_worker_cannot_release_the_new_owners_lease"),
        'a claim of one attempt never takes a lease another worker holds',
    ),
    Mutation(
        "claim-next-due-live-states", ATTEMPTS_SQL,
        *in_query(ATTEMPTS_SQL, 'claim_due', "state IN ('NotStarted', 'Started', 'Unknown')", 'TRUE'),
        t(REC_CLAIMS, "test_a_sweep_never_claims_a_resolved_attempt_even_when_its_next_check_time_has_passed"),
        'a sweep never claims a resolved attempt',
    ),
    Mutation(
        "claim-next-due-inner-states", ATTEMPTS_SQL,
        *in_query(ATTEMPTS_SQL, 'claim_due', "        WHERE state IN ('NotStarted', 'Started', 'Unknown')\n", '        WHERE TRUE\n'),
        t(REC_CLAIMS, "test_a_sweep_never_claims_a_resolved_attempt_even_when_its_next_check_time_has_passed"),
        'the next-due sub-select picks only live attempts',
    ),
    Mutation(
        "claim-due-own-token", ATTEMPTS_SQL,
        'SET recovery_owner = :owner, lease_token = due.token, lease_acquired_at = :now',
        'SET recovery_owner = :owner, lease_token = (:tokens::uuid[])[1], lease_acquired_at = :now',
        t(REC_BATCHED, "test_one_claim_statement_gives_each_attempt_its_own_token_and_two_owners_never_share_one"),
        'attempts claimed in one statement never share a lease token',
    ),
    # -- lease, deadline and cancellation checks ---------------------------------------------------
    Mutation(
        "intent-order-not-payable", ATTEMPTS,
        'if order.not_payable_reason is not None:\n            return IntentResult.REFUSED, "order-not-payable"',
        'if False:\n            return IntentResult.REFUSED, "order-not-payable"',
        t(INTENT, "test_a_send_intent_is_refused_once_the_order_cancellation_has_committed"),
        "no resend intent after the order's cancellation committed",
    ),
    Mutation(
        "intent-changed", ATTEMPTS,
        'if current.version != attempt.version:',
        'if False:',
        t(INTENT, "test_a_send_intent_is_refused_for_an_attempt_changed_since_it_was_read"),
        'no resend intent for an attempt changed since it was read',
    ),
    Mutation(
        "intent-lease", ATTEMPTS,
        'current = await leases.lock_owned(conn, attempt.attempt_id, lease, now)',
        'current = await get_attempt(conn, attempt.attempt_id)',
        t(INTENT, "test_the_repository_cannot_commit_a_send_intent_without_the_recovery_owners_lease"),
        'no resend intent without the lease',
    ),
    Mutation(
        "intent-deadline", ATTEMPTS,
        'if current.past_deadline(now):',
        'if False:',
        t(INTENT, "test_a_send_intent_commit_attempted_after_the_escalation_deadline_is_refused"),
        'no resend intent at or after the stamped escalation deadline',
    ),
    Mutation(
        "start-order-not-payable", DOMAIN,
        '    if not order_payable:\n        return _refused(attempt, "order-not-payable")',
        '    if False:\n        return _refused(attempt, "order-not-payable")',
        t(REPO, "test_an_order_cancelled_before_the_started_transition_prevents_the_send"),
        "the first send's Started transition re-checks, under the order lock, that the order is payable",
    ),
    Mutation(
        "loop-order-not-payable", RESCUE_UNKNOWN,
        'if order is None or order.not_payable_reason is not None:',
        'if order is None:',
        t(REC_INTENTS, "test_an_order_cancelled_before_the_send_intent_prevents_the_resend_and_escalates"),
        'recovery never resends for a cancelled or paid order',
    ),
    Mutation(
        "loop-deadline-before-resend", DOMAIN,
        '    if attempt.past_deadline(now):\n        # Past the safe cutoff',
        '    if False:\n        # Past the safe cutoff',
        t(REC, "test_resend_after_the_key_window_never_happens_escalates_and_later_evidence_still_resolves"),
        "past the key window nothing is resent, and a person is told",
    ),
    Mutation(
        "search-lag-inconclusive-miss", DOMAIN,
        'if found.inconclusive_until is not None and found.kind == "not_found":',
        'if False:',
        t(REC_SEARCH_LAG, "test_a_search_miss_inside_the_lag_concludes_nothing_and_the_next_look_finds_the_payment",
          "test_a_search_miss_inside_the_lag_does_not_escalate_a_failing_resend_condition"),
        "a search miss inside the lag after the last send concludes nothing: no resend, no not-found escalation",
    ),
    Mutation(
        "search-lag-from-last-send", RESCUE_UNKNOWN,
        'sent_at = began or attempt.first_sent_at or attempt.created_at',
        'sent_at = attempt.first_sent_at or began or attempt.created_at',
        t(REC_SEARCH_LAG, "test_the_lag_counts_from_the_last_send_not_the_first"),
        "the search lag runs from the attempt's last send (a resend's payment may be unindexed too)",
    ),
    Mutation(
        "final-check-lease", RESEND,
        'if not await leases.owns(w.pool, attempt_id, lease, now):',
        'if False and not await leases.owns(w.pool, attempt_id, lease, now):',
        t(REC, "test_a_worker_whose_lease_was_reclaimed_before_its_final_check_records_send_abandoned_sends_nothing"),
        'a worker whose lease was taken after its intent sends nothing',
    ),
    Mutation(
        "final-check-deadline", RESEND,
        '    if attempt.past_deadline(now):\n        await attempts.record_send_abandoned(w.pool, attempt_id, now, w.actor, "deadline-passed")',
        '    if False:\n        await attempts.record_send_abandoned(w.pool, attempt_id, now, w.actor, "deadline-passed")',
        t(REC, "test_a_worker_paused_before_its_final_check_past_the_deadline_records_send_abandoned"),
        'no send once the deadline passed after the intent',
    ),
    Mutation(
        "refused-intent-finish", RESEND,
        '        await leases.finish(w.pool, attempt_id, lease, w.clock.now(), backoff)\n        return Pass.INTENT_REFUSED',
        '        return Pass.INTENT_REFUSED',
        t(REC_INTENTS, "test_a_refused_send_intent_reschedules_on_the_backoff_and_releases_the_lease"),
        "a refused intent reschedules and releases the lease (M50 / C19)",
    ),
    # -- same-key resend ---------------------------------------------------------------------------
    Mutation(
        "resend-first-send", RESEND,
        'budget_s=w.settings.budgets.call_s, first_send=False)',
        'budget_s=w.settings.budgets.call_s, first_send=True)',
        t(REC, "test_a_resend_answered_400_with_a_documented_rejection_code_leaves_the_attempt_unknown",
          "test_a_resend_answered_429_leaves_the_attempt_unknown"),
        "a rejected resend proves nothing about the earlier send: Unknown, never NotApplied (M14)",
    ),
    Mutation(
        "resend-new-key", RESEND,
        'w.client.create_payment(StoredRequest.from_attempt(attempt),',
        'w.client.create_payment(StoredRequest.from_record(\n            {**StoredRequest.from_attempt(attempt).__dict__, "idempotency_key": str(attempt.attempt_id)}),',
        t(REC, "test_a_recovery_resend_carries_the_first_sends_key_endpoint_headers_and_identical_bytes"),
        "a resend carries the attempt's own key",
    ),
    Mutation(
        "resend-body-reserialized", RESEND,
        'w.client.create_payment(StoredRequest.from_attempt(attempt),',
        'w.client.create_payment(StoredRequest.from_record(\n            {**StoredRequest.from_attempt(attempt).__dict__, "request_body": attempt.request_body.replace(",", ", ")}),',
        t(REC, "test_a_recovery_resend_carries_the_first_sends_key_endpoint_headers_and_identical_bytes"),
        'a resend carries the stored bytes unchanged',
    ),
    Mutation(
        "client-version-from-config", CARDCO_REQUEST,
        "**auth_headers(acct, stored.api_version),",
        "**auth_headers(acct, acct.api_version),",
        t(CLIENT, "test_a_send_carries_the_stored_api_version_after_the_account_moved_to_a_newer_one"),
        "every send carries the API version stored with the attempt, not today's configuration",
    ),
    # -- account scoping ---------------------------------------------------------------------------
    Mutation(
        "intake-account-from-verifier", INTAKE,
        "account, header_id = delivery.account, delivery.delivery_id",
        "account, header_id = intake.settings.accounts[0], delivery.delivery_id",
        t(NOTE, "test_a_notification_verified_by_another_accounts_secret_never_matches_the_default_accounts_attempt"),
        "a notification's account is the one whose secret verified it (C8)",
    ),
    Mutation(
        "find-by-reference-account", ATTEMPTS_SQL,
        'WHERE provider_account = :account AND (client_reference = :reference OR provider_payment_id = :payment_id)',
        'WHERE (:account::text IS NOT NULL) AND (client_reference = :reference OR provider_payment_id = :payment_id)',
        t(NOTE, "test_a_notification_verified_by_another_accounts_secret_never_matches_the_default_accounts_attempt",
          "test_test_and_live_attempts_with_the_same_reference_do_not_collide"),
        "notifications match attempts of the verified account only (C8)",
    ),
    Mutation(
        "handler-payload-environment", EVIDENCE_RULES,
        'if any(m != live for m in claim.livemodes):',
        'if False:',
        t(NOTE, "test_a_payload_naming_another_environment_raises_an_alert_and_resolves_nothing"),
        'evidence of another mode (test vs live) is never about this attempt',
    ),
    Mutation(
        "handler-payment-object-fields", EVENTS,
        '        said, accounts=said.accounts + ((account,) if account is not None else ()),\n        livemodes=said.livemodes + ((livemode,) if livemode is not None else ()))',
        '        said, accounts=((account,) if account is not None else ()),\n        livemodes=((livemode,) if livemode is not None else ()))',
        t(NOTE, "test_a_payment_object_of_another_account_or_mode_inside_a_correct_envelope_resolves_nothing"),
        "the payment object's own account and mode are judged too, not only the envelope's",
    ),
    Mutation(
        "intake-replay-window", REPLAYS,
        "    return await SEEN.insert_seen.fetchval(",
        "    return True or await SEEN.insert_seen.fetchval(",
        t(NOTE, "test_a_byte_identical_replay_inside_the_signature_tolerance_is_a_duplicate_never_recorded_again"),
        "a replayed signed delivery is never applied twice",
    ),
    # -- evidence about another payment ------------------------------------------------------------
    Mutation(
        "create-mismatch-escalates", DOMAIN,
        '    if not verdict.accepted:\n        assert verdict.reason is not None',
        '    if False:\n        assert verdict.reason is not None',
        t(EVIDENCE, "test_a_create_answer_naming_another_payment_stays_unknown_without_its_id_and_escalates_mismatch"),
        'the one writer of outcomes enforces the evidence verdict',
    ),
    Mutation(
        "create-mismatch-keeps-foreign-id", CARDCO,
        'detail={"reported_payment": payment.evidence()}, **meta,',
        'provider_payment_id=payment.id, provider_status=payment.status, **meta,',
        t(EVIDENCE, "test_a_create_answer_naming_another_payment_stays_unknown_without_its_id_and_escalates_mismatch"),
        "another payment's id is never recorded on this attempt",
    ),
    Mutation(
        "lookup-mismatch-escalates", EVIDENCE_RULES,
        '    if mismatch is not None:\n        return Verdict(EscalationReason.MISMATCH',
        '    if False:\n        return Verdict(EscalationReason.MISMATCH',
        t(EVIDENCE, "test_a_lookup_finding_a_payment_that_is_not_this_attempts_escalates_at_once_and_records_it"),
        'a payment of another account, mode, reference, amount or currency is never evidence',
    ),
    Mutation(
        "lookup-failed-slow-cadence-past-deadline", DOMAIN,
        'return PassDecision(Step.ESCALATE, slow, Escalation(EscalationReason.DEADLINE),',
        'return PassDecision(Step.ESCALATE, backoff, Escalation(EscalationReason.DEADLINE),',
        t(REC_ESCALATIONS, "test_failing_lookups_past_the_deadline_are_made_on_the_slow_read_only_cadence"),
        "past the deadline, failing lookups only read, on the slow cadence",
    ),
    Mutation(
        "resend-rejected-escalates", DOMAIN,
        "    if outcome.kind is OutcomeKind.UNKNOWN and outcome.request_rejected:",
        "    if False:",
        t(REC_ESCALATIONS, "test_a_resend_refused_before_execution_is_escalated_at_once_and_never_repeated"),
        "a resend refused before execution reaches a person at once",
    ),
    Mutation(
        "resend-rejected-never-repeated", RESCUE_UNKNOWN,
        'rejected = await events.resend_was_rejected(w.pool, attempt.attempt_id)',
        'rejected = False',
        t(REC_ESCALATIONS, "test_a_resend_refused_before_execution_is_escalated_at_once_and_never_repeated"),
        'bytes the provider refused are never resent',
    ),
    # -- one source of truth for account settings --------------------------------------------------
    Mutation(
        "account-settings-differ-refused", ACCOUNTS,
        "    if found:\n        raise AccountConfigurationDiffers(found)",
        "    if False:\n        raise AccountConfigurationDiffers(found)",
        t(PROVIDER_ACCOUNTS_TESTS, "test_a_start_with_settings_that_differ_from_the_registered_account_is_refused_naming_each"),
        "a service configured otherwise never moves the deadlines every attempt is stamped with",
    ),
    # -- outbox eligibility ------------------------------------------------------------------------
    Mutation(
        "relay-earliest-unfinished", OUTBOX_SQL,
        *in_query(OUTBOX_SQL, 'claim_heads',
                  "  AND NOT EXISTS (\n"
                  "      SELECT 1 FROM outbox_messages p\n"
                  "      WHERE p.ordering_key = m.ordering_key\n"
                  "        AND p.message_id < m.message_id\n"
                  "        AND p.dispatched_at IS NULL)\n",
                  ""),
        t(OUTBOX, "test_a_refund_queued_after_a_confirmation_for_the_same_attempt_is_never_delivered_before_it",
          "test_a_relay_that_finds_the_earliest_row_locked_does_not_deliver_the_later_row"),
        "a row is published only after every earlier row of its attempt",
    ),
    Mutation(
        "relay-dead-letter-blocks", OUTBOX_SQL,
        *in_query(OUTBOX_SQL, 'claim_heads', "        AND p.dispatched_at IS NULL)\n",
                  "        AND p.dispatched_at IS NULL AND p.dead_lettered_at IS NULL)\n"),
        t(OUTBOX, "test_a_dead_lettered_confirmation_blocks_its_refund_until_an_operator_requeues_it"),
        "a dead-lettered row blocks its successors until an operator decides",
    ),
    Mutation(
        "relay-backing-off-blocks", OUTBOX_SQL,
        *in_query(OUTBOX_SQL, 'claim_heads', "        AND p.dispatched_at IS NULL)\n",
                  "        AND p.dispatched_at IS NULL AND p.next_attempt_at <= :now)\n"),
        t(OUTBOX, "test_a_confirmation_backing_off_still_blocks_its_refund_while_other_attempts_rows_are_delivered"),
        "a row backing off after a failed publish still blocks its successors",
    ),
    Mutation(
        "relay-contract-check", RELAY,
        "    contracts.check(payload)\n",
        "",
        t(CONTRACTS, "test_the_relay_dead_letters_a_row_that_breaks_its_contract_at_once_and_never_publishes_it"),
        "a row whose payload breaks its contract is never published",
    ),
    Mutation(
        "relay-contract-dead-letters-at-once", RELAY,
        "        if attempts < self.config.max_delivery_attempts and not permanent:\n",
        "        if attempts < self.config.max_delivery_attempts:\n",
        t(CONTRACTS, "test_the_relay_dead_letters_a_row_that_breaks_its_contract_at_once_and_never_publishes_it"),
        "a contract violation is dead-lettered and escalated at once, not retried",
    ),
    Mutation(
        "consumer-contract-check", CONSUMER,
        "        if dedup_key is None or problems:\n",
        "        if dedup_key is None:\n",
        t(CONTRACTS, "test_the_consumer_helper_escalates_and_skips_poison_and_handles_compatible_records"),
        "a consumer never hands a record that breaks its contract to its handler",
    ),
    # -- Unknown classification --------------------------------------------------------------------
    Mutation(
        "client-5xx-unknown", CARDCO_ANSWERS,
        'return ErrorAnswer(f"provider.http-{status}", meta=meta)',
        'return ErrorAnswer(f"provider.http-{status}", "server_error", meta=meta)',
        t(CLIENT, "test_classification"),
        "a 5xx answer may hide a payment: Unknown",
    ),
    Mutation(
        "client-409-unknown", CARDCO_ANSWERS,
        'return ErrorAnswer("provider.in-progress", meta=meta)',
        'return ErrorAnswer("provider.in-progress", "in_progress", meta=meta)',
        t(CLIENT, "test_classification"),
        "a 409 (the key's first request still running) is Unknown",
    ),
    Mutation(
        "client-timeout-unknown", ADAPTER,
        "        if isinstance(answer, str):  # no answer: timeout, transport error, unreadable answer\n"
        "            return self._logged(stored, ProviderOutcome.unknown(answer))",
        "        if isinstance(answer, str):  # no answer: timeout, transport error, unreadable answer\n"
        "            return self._logged(stored, ProviderOutcome.failed(answer))",
        t(CONFORMANCE, "test_each_ending_without_an_answer_is_unknown_never_a_failure"),
        "no answer within the budget is Unknown, never Failed",
    ),
    Mutation(
        "refused-before-execution-only-send", DOMAIN,
        '        if first_send and not kw.get("replayed", False):\n            return cls.not_applied(f"rejected:{code}", **kw)',
        '        if not kw.get("replayed", False):\n            return cls.not_applied(f"rejected:{code}", **kw)',
        (*t(CLIENT, "test_classification"), STRIPE_CLIENT, ADYEN_CLIENT),
        "a refusal before execution proves nothing happened on the only send only (every provider)",
    ),
    Mutation(
        "refused-before-execution-not-replayed", DOMAIN,
        '        if first_send and not kw.get("replayed", False):\n            return cls.not_applied(f"rejected:{code}", **kw)',
        '        if first_send:\n            return cls.not_applied(f"rejected:{code}", **kw)',
        (*t(CLIENT, "test_classification"), STRIPE_CLIENT),
        "an answer replayed from the key proves nothing about this send",
    ),
    Mutation(
        "client-refused-only-send", CARDCO,
        "                error.refused_code, first_send=first_send, resend_reason=error.reason,",
        "                error.refused_code, first_send=True, resend_reason=error.reason,",
        t(CLIENT, "test_classification"),
        "a documented 400 or a 429 is NotApplied only on the only send",
    ),
    Mutation(
        "client-429-refused", CARDCO_ANSWERS,
        'return ErrorAnswer("provider.rate-limited", "rate_limited", meta=meta)',
        'return ErrorAnswer("provider.rate-limited", meta=meta)',
        t(CLIENT, "test_classification"),
        "a 429 on the only send was refused before execution: NotApplied, not Unknown",
    ),
    # -- Stripe and Adyen (issue 11) ---------------------------------------------------------------
    Mutation(
        "adyen-transient-error", ADYEN,
        "        if status == 200 and not is_transient(response):\n",
        "        if status == 200:\n",
        (ADYEN_CLIENT,),
        "an answer with Transient-Error: true is Unknown, whatever its status says",
    ),
    Mutation(
        "adyen-validation-only-send", ADYEN,
        'error.refused_code, first_send=first_send, resend_reason=error.reason,',
        'error.refused_code, first_send=True, resend_reason=error.reason,',
        (ADYEN_CLIENT,),
        "a validation rejection is NotApplied only on the only send",
    ),
    Mutation(
        "stripe-validation-only-send", STRIPE,
        'reason + (f":{error.param}" if error.param else ""), first_send=first_send,',
        'reason + (f":{error.param}" if error.param else ""), first_send=True,',
        (STRIPE_CLIENT,),
        "a Stripe 400 is NotApplied only on the only send",
    ),
    Mutation(
        "stripe-no-sdk-retries", STRIPE,
        "max_network_retries=0,",
        "max_network_retries=2,",
        (STRIPE_CLIENT,),
        "the SDK never resends on its own: recovery alone decides resends",
    ),
    Mutation(
        "card-data-gate", GATE,
        "            if len(value) > MAX_VALUE_CHARS or contains_card_number(value):\n",
        "            if len(value) > MAX_VALUE_CHARS:\n",
        ("tests/unit/test_payment_methods.py",),
        "a card number is refused before anything is recorded",
    ),
    Mutation(
        "intake-every-batch-item", INTAKE,
        "    for delivery in deliveries:\n        try:\n",
        "    for delivery in deliveries[:1]:\n        try:\n",
        (INTAKE_ROUTES,),
        "every notification of a batch is recorded before [accepted]",
    ),
    Mutation(
        "router-by-account", REGISTRY,
        "        return self.adapters.get(provider_name(provider_account)) or next(iter(self.adapters.values()))\n",
        "        return next(iter(self.adapters.values()))\n",
        ("tests/unit/test_provider_router.py",),
        "each call goes to its own account's provider, never another's",
    ),
    # -- operator actions that change attempts (issue 13) ------------------------------------------
    Mutation(
        "close-unknown-only", DOMAIN,
        '    if attempt.state is not AttemptState.UNKNOWN or not can_transition(attempt.state, target):\n',
        '    if not can_transition(attempt.state, target):\n',
        t(OPS_DEAD_ENDS, "test_a_started_attempt_is_refused_even_when_escalated"),
        "an operator closes only an Unknown attempt as not charged, never a Started one",
    ),
    Mutation(
        "close-version", ATTEMPTS_SQL,
        *in_query(ATTEMPTS_SQL, 'close_as_not_charged', 'version = :version', '(version = :version OR TRUE)'),
        t(OPS_DEAD_ENDS, "test_a_write_between_the_read_and_the_update_refuses_the_close_and_records_nothing"),
        "a close decided on version N is refused if another writer moved the attempt meanwhile",
    ),
    Mutation(
        "close-dead-end-only", DOMAIN,
        '    if not dead_ends:\n',
        '    if not dead_ends and False:\n',
        t(OPS_DEAD_ENDS, "test_an_unknown_attempt_without_an_open_dead_end_escalation_is_refused"),
        "only an attempt recovery gave up on (an open dead-end escalation) can be closed",
    ),
    Mutation(
        "close-dead-end-open-episode", ESCALATIONS_SQL,
        *in_query(ESCALATIONS_SQL, 'lock_open_dead_ends', "WHERE attempt_id = :attempt_id AND resolved_at IS NULL\n",
                  "WHERE attempt_id = :attempt_id\n"),
        t(OPS_DEAD_ENDS, "test_an_unknown_attempt_without_an_open_dead_end_escalation_is_refused"),
        "a dead-end episode that is over does not allow a close",
    ),
    Mutation(
        "close-refused-on-evidence", DOMAIN,
        '    if evidence:\n',
        '    if evidence and False:\n',
        t(OPS_DEAD_ENDS, "test_any_evidence_of_a_payment_refuses_the_close[conflicting_notification]"),
        "a notification naming the attempt's reference, stored unmatched (identity conflict), is evidence",
    ),
    Mutation(
        "close-evidence-lookup-found", EVENTS_SQL,
        *in_query(EVENTS_SQL, 'payment_evidence', "(kind = 'lookup' AND (", "(kind = 'lookup' AND FALSE AND ("),
        t(OPS_DEAD_ENDS, "test_any_evidence_of_a_payment_refuses_the_close[lookup_found]"),
        "a lookup that found a payment is evidence",
    ),
    Mutation(
        "close-evidence-send-answer", EVENTS_SQL,
        *in_query(EVENTS_SQL, 'payment_evidence', "(kind = 'send_result' AND (", "(kind = 'send_result' AND FALSE AND ("),
        t(OPS_DEAD_ENDS, "test_any_evidence_of_a_payment_refuses_the_close[send_answer_with_a_payment]"),
        "a send answer that named a payment is evidence",
    ),
    Mutation(
        "close-evidence-escalations", EVENTS_SQL,
        *in_query(EVENTS_SQL, 'payment_evidence', "WHERE (attempt_id = :attempt_id AND (reason = ANY",
                  "WHERE (attempt_id = :attempt_id AND FALSE AND (reason = ANY"),
        t(OPS_DEAD_ENDS, "test_any_evidence_of_a_payment_refuses_the_close[mismatch_escalation]"),
        "an escalation about a payment (mismatch, provider-id conflict, several payments) is evidence",
    ),
    Mutation(
        "close-evidence-payment-id", DEAD_ENDS,
        "    if attempt.provider_payment_id is not None:\n",
        "    if attempt.provider_payment_id is not None and False:\n",
        t(OPS_DEAD_ENDS, "test_a_provider_payment_id_on_the_attempt_refuses_the_close"),
        "a provider payment id recorded on the attempt is evidence",
    ),
    Mutation(
        "conflict-owner-evidence-rules", CONFLICTS,
        "        if not applied.verdict.accepted:  # rolls the whole resolution back\n",
        "        if False:  # rolls the whole resolution back\n",
        t(OPS_CONFLICTS, "test_an_owner_the_evidence_rules_refuse_is_refused_and_nothing_is_written"),
        "an operator's choice of owner still passes the evidence rules (amount, currency, account, id)",
    ),
    Mutation(
        "conflict-owner-named", CONFLICTS,
        "        if owner_attempt_id not in named:\n",
        "        if False:\n",
        t(OPS_CONFLICTS, "test_an_attempt_the_episode_does_not_name_is_refused"),
        "the owner is one of the attempts the conflict names",
    ),
    # -- console sign-in (issue 13): who may act on payments, not a money rule itself --------------
    Mutation(
        'auth-dummy-hash-for-unknown-names', OPERATORS,
        'stored = account["password_hash"] if account is not None else decoy',
        'stored = account["password_hash"] if account is not None else ""',
        t(OPERATOR_ACCOUNTS_TESTS, 'test_an_unknown_name_fails_the_same_way_after_checking_a_dummy_hash'),
        'dummy hash for unknown names',
    ),
    Mutation(
        'auth-disabled-account-refused-at-sign-in', OPERATORS,
        'account = row if row is not None and row["disabled_at"] is None and not overlong else None',
        'account = row if row is not None and not overlong else None',
        t(OPERATOR_ACCOUNTS_TESTS, 'test_a_disabled_operator_cannot_sign_in_even_with_the_right_password'),
        'disabled account refused at sign-in',
    ),
    Mutation(
        'auth-throttle-limit', OPERATORS,
        'if len(failures) >= throttle.max_failures:',
        'if len(failures) > throttle.max_failures:',
        t(OPERATOR_ACCOUNTS_TESTS, 'test_after_max_failures_the_name_and_client_are_refused_until_the_window_passes'),
        'throttle limit',
    ),
    Mutation(
        'auth-throttle-keyed-by-client', LOGIN_FAILURES_SQL,
        *in_query(LOGIN_FAILURES_SQL, 'of_name_and_client', 'AND client = :client', 'AND client <> :client'),
        t(OPERATOR_ACCOUNTS_TESTS, 'test_after_max_failures_the_name_and_client_are_refused_until_the_window_passes'),
        'throttle keyed by client',
    ),
    Mutation(
        'auth-throttle-window', OPERATORS,
        'window_start = now - timedelta(seconds=throttle.window_s)',
        'window_start = now - timedelta(seconds=10 * throttle.window_s)',
        t(OPERATOR_ACCOUNTS_TESTS, 'test_after_max_failures_the_name_and_client_are_refused_until_the_window_passes'),
        'throttle window',
    ),
    Mutation(
        'auth-advisory-lock-per-key', OPERATORS,
        'await conn.execute("SELECT pg_advisory_xact_lock($1)", _lock_key(key_client))',
        'pass',
        t(OPERATOR_ACCOUNTS_TESTS, 'test_concurrent_wrong_guesses_cannot_slip_past_the_limit'),
        'advisory lock per key',
    ),
    Mutation(
        'auth-failure-committed-before-raising', OPERATORS,
        '            await FAILURES.insert.execute(conn, name=key_name, client=key_client, now=now)\n',
        '            await FAILURES.insert.execute(conn, name=key_name, client=key_client, now=now)\n            raise AuthenticationFailed()\n',
        t(OPERATOR_ACCOUNTS_TESTS, 'test_a_wrong_password_fails_and_is_counted'),
        'failure committed before raising',
    ),
    Mutation(
        'auth-success-clears-failures', OPERATORS,
        'await FAILURES.clear.execute(conn, name=key_name, client=key_client)',
        'pass',
        t(OPERATOR_ACCOUNTS_TESTS, 'test_after_max_failures_the_name_and_client_are_refused_until_the_window_passes'),
        'success clears failures',
    ),
    Mutation(
        'auth-rehash', OPERATORS,
        'if hasher.check_needs_rehash(stored):',
        'if False:',
        t(OPERATOR_ACCOUNTS_TESTS, 'test_a_hash_made_with_old_parameters_is_replaced_at_the_next_sign_in'),
        'rehash',
    ),
    Mutation(
        'auth-password-length', OPERATORS,
        'if len(password) < PASSWORD_MIN_LENGTH:',
        'if len(password) < 8:',
        t(OPERATOR_ACCOUNTS_TESTS, 'test_the_rules_refuse_and_nothing_is_stored'),
        'password length',
    ),
    Mutation(
        'auth-password-is-not-the-name', OPERATORS,
        'if password.strip().casefold() == name.strip().casefold():',
        'if password == name:',
        t(OPERATOR_ACCOUNTS_TESTS, 'test_the_rules_refuse_and_nothing_is_stored'),
        'password is not the name',
    ),
    Mutation(
        'auth-oidc-prefix-reserved-library', OPERATORS,
        'if handle.startswith(OIDC_PREFIX):',
        'if False:',
        t(OPERATOR_ACCOUNTS_TESTS, 'test_the_rules_refuse_and_nothing_is_stored'),
        'oidc: prefix reserved (library)',
    ),
    Mutation(
        'auth-disable-recorded', OPERATORS,
        'recorded = await _record(conn, ActionKind.OPERATOR_DISABLE,',
        'recorded = await _record(conn, ActionKind.OPERATOR_ADD,',
        t(OPERATOR_ACCOUNTS_TESTS, 'test_a_disabled_operator_cannot_sign_in_even_with_the_right_password'),
        'disable recorded',
    ),
    Mutation(
        'auth-session-mac-compared', CONSOLE_AUTH,
        'if not dot or not hmac.compare_digest(mac, self._mac(body)):',
        'if not dot:',
        t(CONSOLE_TESTS, 'test_a_tampered_session_is_refused'),
        'session mac compared',
    ),
    Mutation(
        'auth-session-expiry', CONSOLE_AUTH,
        'if now >= expires_at:',
        'if now > expires_at:',
        t(CONSOLE_TESTS, 'test_a_session_names_its_operator_and_role_until_it_expires')
        + t(CONSOLE_TESTS, 'test_the_tokens_own_expiry_holds_whatever_its_session_row_says'),
        'session expiry',
    ),
    Mutation(
        'auth-session-ttl-from-settings', CONSOLE_AUTH,
        'session_ttl_s=SESSION_TTL.read(env)',
        'session_ttl_s=SESSION_TTL.default',
        t(CONSOLE_TESTS, 'test_the_lifetime_is_a_setting'),
        'session ttl from settings',
    ),
    Mutation(
        'auth-disabled-operator-s-session', CONSOLE_AUTH,
        'if not account.active:',
        'if False:',
        t(CONSOLE_TESTS, 'test_a_disabled_operators_sessions_stop_at_once')
        + t(CONSOLE_TESTS, 'test_a_disabled_account_opens_nothing_even_when_its_sessions_were_not_ended'),
        "disabled operator's session",
    ),
    Mutation(
        'auth-role-changed-ends-session', CONSOLE_AUTH,
        'if account.role is not role:',
        'if False:',
        t(CONSOLE_TESTS, 'test_a_session_of_a_role_the_account_no_longer_has_is_refused'),
        'role changed ends session',
    ),
    Mutation(
        'auth-session-key-from-the-secret', CONSOLE_AUTH,
        'self._session_key = _subkey(settings.secret, "session")',
        'self._session_key = b"fixed"',
        t(CONSOLE_TESTS, 'test_a_session_signed_with_another_secret_is_refused'),
        'session key from the secret',
    ),
    Mutation(
        'auth-csrf-compared', CONSOLE_AUTH,
        'if not hmac.compare_digest(submitted, self.csrf_token(session)):',
        'if False:',
        t(CONSOLE_TESTS, 'test_a_forged_csrf_token_is_refused'),
        'csrf compared',
    ),
    Mutation(
        'auth-csrf-missing', CONSOLE_AUTH,
        '        if not submitted:\n            raise CsrfRefused("the form has no CSRF token")\n',
        '',
        t(CONSOLE_TESTS, 'test_a_missing_csrf_token_is_refused'),
        'csrf missing',
    ),
    Mutation(
        'auth-csrf-bound-to-the-session', CONSOLE_AUTH,
        'hmac.new(self._csrf_key, session.session_id.encode(), hashlib.sha256)',
        'hmac.new(self._csrf_key, session.principal.name.encode(), hashlib.sha256)',
        t(CONSOLE_TESTS, 'test_a_csrf_token_from_another_session_is_refused'),
        'csrf bound to the session',
    ),
    Mutation(
        'auth-require-role', CONSOLE_AUTH,
        'if not principal.role.allows(role_needed):',
        'if False:',
        t(CONSOLE_TESTS, 'test_a_viewer_reads_and_an_operator_acts'),
        'require role',
    ),
    Mutation(
        'auth-role-claim-values', CONSOLE_AUTH,
        'if not isinstance(role_value, str) or role_value not in {r.value for r in Role}:',
        'if role_value is None:',
        t(CONSOLE_TESTS, 'test_a_token_without_a_known_role_is_refused'),
        'role claim values',
    ),
    Mutation(
        'auth-console-audience', CONSOLE_AUTH,
        'audiences=(self.settings.audience,)',
        'audiences=()',
        t(CONSOLE_TESTS, 'test_a_token_not_meant_for_this_console_is_refused'),
        'console audience',
    ),
    Mutation(
        'auth-customer-audience-refused-in-settings', CONSOLE_AUTH,
        'if audience in JWT_AUDIENCE.read(env):',
        'if False:',
        t(CONSOLE_TESTS, 'test_bearer_tokens_need_the_key_set_the_issuer_and_an_audience_of_their_own'),
        'customer audience refused in settings',
    ),
    Mutation(
        'auth-role-claim-name-setting', CONSOLE_AUTH,
        'role_claim=ROLE_CLAIM.read(env)',
        'role_claim=ROLE_CLAIM.default',
        t(CONSOLE_TESTS, 'test_the_role_claims_name_is_a_setting'),
        'role claim name setting',
    ),
    Mutation(
        'auth-subject-verbatim', CONSOLE_AUTH,
        'if isinstance(sub, str) and sub and sub.strip() == sub else ""',
        'if isinstance(sub, str) else ""',
        t(CONSOLE_TESTS, 'test_a_token_not_meant_for_this_console_is_refused'),
        'subject verbatim',
    ),
    Mutation(
        'auth-key-set-unreachable', CONSOLE_AUTH,
        'raise AuthKeysUnavailable("the identity provider\'s keys could not be fetched") from None',
        'raise OperatorTokenRefused("x") from None',
        t(CONSOLE_TESTS, 'test_an_unreachable_key_set_is_the_servers_problem'),
        'key set unreachable',
    ),
    Mutation(
        'auth-only-asymmetric-keys-for-the-jwks', BEARER,
        'JWKS_ALGORITHMS = ("RS256", "ES256")',
        'JWKS_ALGORITHMS = ("RS256", "ES256", "HS256")',
        t(CONSOLE_TESTS, 'test_a_key_the_set_does_not_publish_or_an_hmac_token_is_refused'),
        'only asymmetric keys for the JWKS',
    ),
    # -- the console's guards (services/console) -----------------------------------------------------
    Mutation(
        'console-page-csrf', WEB_PAGES,
        '    check_csrf(c.auth, caller, form.get(CSRF_FIELD))\n    return c, may_act(caller), form',
        '    return c, may_act(caller), form',
        (f"{WEB_GUARDS}::test_every_post_refuses_a_missing_or_forged_csrf_token",),
        "every page POST carries its session's CSRF token",
    ),
    Mutation(
        'console-api-csrf', WEB_API,
        'check_csrf(c.auth, caller, request.headers.get(CSRF_HEADER))',
        'None',
        (f"{WEB_GUARDS}::test_every_post_refuses_a_missing_or_forged_csrf_token",),
        "every API POST of a session carries X-CSRF-Token",
    ),
    Mutation(
        'console-csrf-bound-to-session', WEB_AUTH,
        '    auth.check_csrf(caller.session, submitted)',
        '    return None if submitted else auth.check_csrf(caller.session, submitted)',
        (f"{WEB_GUARDS}::test_every_post_refuses_a_missing_or_forged_csrf_token",),
        "a CSRF token made for another session is refused",
    ),
    Mutation(
        'console-login-csrf', WEB_PAGES,
        '    check_login_csrf(c.auth, request, form.get(CSRF_FIELD), now)',
        '    pass',
        t(WEB_SIGN_IN, "test_the_sign_in_form_needs_its_own_token_and_next_stays_on_this_site"),
        "the sign-in form carries a token bound to its pre-sign-in cookie",
    ),
    Mutation(
        'console-role-in-one-place', WEB_AUTH,
        'return require(Role.OPERATOR, caller.principal)',
        'return caller.principal',
        (f"{WEB_GUARDS}::test_a_viewer_can_see_but_not_act",
         f"{WEB_GUARDS}::test_a_bearer_operator_acts_without_csrf_and_is_recorded_as_oidc_sub"),
        "a viewer cannot act (pages and API)",
    ),
    Mutation(
        'console-page-role', WEB_PAGES,
        'return c, may_act(caller), form',
        'return c, caller.principal, form',
        (f"{WEB_GUARDS}::test_a_viewer_can_see_but_not_act",),
        "a page POST checks the operator role",
    ),
    Mutation(
        'console-api-role', WEB_API,
        'who = may_act(caller)',
        'who = caller.principal',
        (f"{WEB_GUARDS}::test_a_viewer_can_see_but_not_act",),
        "an API POST checks the operator role",
    ),
    Mutation(
        'console-throttle-by-client-address', WEB_PAGES,
        'client_address(request), now, throttle=c.settings.throttle',
        '"?", now, throttle=c.settings.throttle',
        t(WEB_SIGN_IN, "test_failed_sign_ins_are_throttled_per_name_and_client_even_with_the_right_password"),
        "sign-in throttling is per client address",
    ),
    Mutation(
        'console-secure-cookie', WEB_CONTEXT,
        'return not self.settings.insecure_cookies',
        'return False',
        t(WEB_SIGN_IN, "test_signing_in_sets_an_httponly_strict_secure_session_cookie_and_opens_the_overview"),
        "the session cookie is Secure unless explicitly allowed",
    ),
    Mutation(
        'console-next-stays-on-site', WEB_PAGES,
        'and not target.startswith("//")',
        '',
        t(WEB_SIGN_IN, "test_the_sign_in_form_needs_its_own_token_and_next_stays_on_this_site"),
        "after sign-in, never redirect off the site",
    ),
    # -- issue 27: sessions kept server-side --
    Mutation(
        'console-ended-session-refused', CONSOLE_AUTH,
        "        if stored.ended_at is not None:\n",
        "        if False:\n",
        t(WEB_SIGN_IN, "test_a_copied_session_cookie_is_refused_once_its_session_signed_out")
        + t(CONSOLE_TESTS, "test_a_session_ended_by_signing_out_is_refused_when_its_token_comes_back"),
        "a session that ended (signed out, a new password, an admin) opens nothing when its cookie comes back",
    ),
    Mutation(
        'console-sign-out-ends-the-session', WEB_PAGES,
        "        await c.auth.end_session(c.pool, caller.session, c.clock.now())",
        "        pass",
        t(WEB_SIGN_IN, "test_a_copied_session_cookie_is_refused_once_its_session_signed_out"),
        "signing out ends the session server-side, not only in the browser",
    ),
    Mutation(
        'console-idle-timeout', CONSOLE_AUTH,
        "        if (now - stored.last_seen_at).total_seconds() > self.settings.session_idle_s:",
        "        if False:",
        t(WEB_SIGN_IN, "test_an_idle_session_ends_after_the_idle_timeout")
        + t(CONSOLE_TESTS, "test_an_unused_session_ends_after_the_idle_timeout_and_a_used_one_lives_on"),
        "a session unused for the idle timeout ends",
    ),
    Mutation(
        'console-session-row-names-its-operator', CONSOLE_AUTH,
        "        if stored is None or stored.operator != name:",
        "        if stored is None:",
        t(CONSOLE_TESTS, "test_a_signed_session_that_was_never_opened_is_refused"),
        "a token signed for another name cannot ride someone's open session",
    ),
    Mutation(
        'operator-new-password-ends-sessions', OPERATORS,
        "        ended = await end_sessions_of(conn, handle, now, EndReason.PASSWORD_CHANGED, keep=keep_session)",
        "        ended = 0",
        t(CONSOLE_TESTS, "test_a_new_password_ends_the_accounts_other_sessions_and_keeps_the_one_that_changed_it"),
        "a new password ends the account's other sessions (a leaked password ends there)",
    ),
    Mutation(
        'operator-disable-ends-sessions', OPERATORS,
        "        ended = await end_sessions_of(conn, handle, now, EndReason.OPERATOR_DISABLED)",
        "        ended = 0",
        t(CONSOLE_TESTS, "test_an_admin_ends_anyones_sessions_a_role_change_and_disabling_end_them_too"),
        "disabling an account ends its sessions in the same transaction",
    ),
    Mutation(
        'admin-server-leaves-the-request-log-alone', "libs/paycore/paycore/http/health_server.py",
        'http=AdminHttpToolsProtocol, log_config=None, log_level=None,',
        'http=AdminHttpToolsProtocol, log_config=None, log_level="warning",',
        t("tests/observability/test_admin_ports.py",
          "test_a_request_line_is_found_by_its_request_id_with_the_admin_port_on"),
        "a service's request lines reach its log with the admin port on (a customer's request id finds them)",
    ),
    Mutation(
        'spans-keep-the-url-origin-only', "libs/paycore/paycore/tracing.py",
        "            span.set_attribute(key, url_origin(recorded[key]))",
        "            pass",
        t("tests/dispatcher/test_tracing.py", "test_an_outbound_requests_span_keeps_only_the_urls_origin")
        + t("tests/observability/test_worker_log_hygiene.py",
            "test_consumers_alerts_and_the_incident_agent_log_json_lines_without_secrets"),
        "an alert webhook URL's secret path never leaves the process in an exported span",
    ),
    Mutation(
        'nul-in-a-query-parameter-refused', "libs/paycore/paycore/http/inputs.py",
        "        if text_problem(name) or text_problem(value):",
        "        if False:",
        t("tests/console/test_pages.py", "test_a_nul_in_a_query_parameter_is_a_400_problem_not_a_500")
        + t(HTTP_EDGES, "test_a_nul_in_the_path_or_a_query_parameter_is_400_problem_json"),
        "a NUL in a query parameter is a 400 at the door, never a 500 from the database",
    ),
    Mutation(
        'card-number-inside-a-token-refused', GATE,
        "        if contains_card_number(value) or not TOKEN.fullmatch(value):",
        "        if not TOKEN.fullmatch(value):",
        t(CHECKOUT_HTTP, "test_invalid_payment_request_is_a_400_problem_and_writes_nothing")
        + t("tests/unit/test_payment_methods.py",
            "test_card_data_and_shapes_no_provider_takes_are_refused_without_echo"),
        "a Luhn-valid card number inside a token-shaped payment method is refused, never stored or sent",
    ),
    Mutation(
        'inbox-outlives-the-topic', DISPATCHER_SETTINGS,
        "    if inbox_retention <= kafka_retention:",
        "    if inbox_retention < kafka_retention:",
        t(INBOX_RETENTION, "test_a_horizon_not_above_the_topics_retention_is_refused"),
        "an inbox row outlives every record that could still be redelivered",
    ),
    Mutation(
        'inbox-purge-horizon', CONSUMER,
        "    cutoff = now - older_than\n    return await delete_in_batches(",
        "    cutoff = now\n    return await delete_in_batches(",
        t(INBOX_RETENTION, "test_rows_past_the_horizon_go_in_batches_and_recent_ones_stay"),
        "inbox retention deletes only rows past the horizon",
    ),
    # -- i10 (one place per rule) ---------------------------------------------------------------
    Mutation(
        "apply-outcome-releases-only-its-claim", ATTEMPTS_SQL,
        *in_query(ATTEMPTS_SQL, 'apply_outcome', 'THEN NULL', 'OR (:owner::text, :token::uuid) IS NULL OR TRUE THEN NULL'),
        t(RECORD, "test_a_worker_with_a_stale_lease_token_records_the_outcome_but_cannot_release_the_new_owners_lease"),
        "an outcome write releases the writer's own claim only, never the lease of whoever claimed since",
    ),
    Mutation(
        "identity-conflict-decided", EVIDENCE_RULES,
        "    if by_reference is not None and by_payment_id is not None \\\n",
        "    if False and by_reference is not None and by_payment_id is not None \\\n",
        (*t("tests/unit/test_evidence.py", "test_an_identity_conflict_names_both_attempts"),
         *t(NOTE, "test_identity_conflict_is_recorded_escalated_with_both_attempts_and_applied_to_neither")),
        "a notification whose reference and payment id name two attempts is applied to neither",
    ),
    # -- issue 8's edges (worktree i8): poison input, outages, identity providers ----------------
    Mutation(
        "body-duplicate-key-refused", BODIES,
        "    if duplicate is not None:\n",
        "    if False:\n",
        t(HTTP_EDGES, "test_a_duplicate_key_in_an_order_body_is_400_and_nothing_is_created"),
        "a body with a key twice is refused, never charged for whichever value a parser keeps",
    ),
    Mutation(
        "body-without-content-type-415", BODIES,
        'if content_type.split(";")[0].strip().lower() != "application/json":',
        'if content_type and content_type.split(";")[0].strip().lower() != "application/json":',
        t(HTTP_EDGES, "test_a_body_without_content_type_is_415_like_text_plain"),
        "a body that does not say it is JSON is 415, not guessed at",
    ),
    Mutation(
        "currency-active-iso-4217", CURRENCIES,
        "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX VND VUV XAF XOF XPF\n",
        "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX VND VUV XAF XOF XPF ZZZ XXX XTS\n",
        t(HTTP_EDGES, "test_a_currency_that_is_not_an_active_iso_4217_currency_is_refused"),
        "only an active ISO 4217 currency is charged (ZZZ and XXX were)",
    ),
    Mutation(
        "amount-bounded-by-the-currency-exponent", CURRENCIES,
        "return int(MAX_MAJOR_UNITS * 10 ** EXPONENTS[code])",
        "return int(MAX_MAJOR_UNITS * 10 ** 2)",
        t(HTTP_EDGES, "test_the_largest_amount_is_ten_billion_major_units_of_the_currency"),
        "an amount is bounded in the currency's own minor units (JPY 0, EUR 2, KWD 3 decimals)",
    ),
    Mutation(
        "orders-idempotency-key", CHECKOUT_ROUTES,
        '    return await idempotent(request, customer, CREATE_ENDPOINT, {"body": body}, create)',
        "    return await create()",
        t(HTTP_EDGES, "test_a_retried_order_create_with_the_same_idempotency_key_makes_one_order"),
        "a retried POST /orders with its Idempotency-Key makes one order",
    ),
    Mutation(
        "jwt-audience-verified", BEARER,
        '"verify_aud": bool(audiences)}',
        '"verify_aud": False}',
        t(IDENTITY_PROVIDERS, "test_a_token_for_another_audience_or_issuer_is_401_problem"),
        "a token meant for another API is refused (PAYCORE_JWT_AUDIENCE)",
    ),
    Mutation(
        "jwt-issuer-verified", BEARER,
        "issuer=issuer, leeway",
        "issuer=None, leeway",
        t(IDENTITY_PROVIDERS, "test_a_token_for_another_audience_or_issuer_is_401_problem"),
        "a token from another issuer is refused (PAYCORE_JWT_ISSUER)",
    ),
    Mutation(
        "jwt-subject-storable", CHECKOUT_AUTH,
        '_FORBIDDEN_IN_SUBJECT = frozenset({"Cc", "Cs"})',
        "_FORBIDDEN_IN_SUBJECT = frozenset()",
        t(IDENTITY_PROVIDERS, "test_a_subject_with_nul_a_control_character_or_a_lone_surrogate_is_401_keeping_the_connection"),
        "a subject PostgreSQL cannot store (NUL, control, lone surrogate) is 401, never a 500",
    ),
    Mutation(
        "intake-poison-recorded-raw", HANDLER,
        "    why = json_problem(n.event)\n    if why is not None:\n        return why\n",
        "",
        t(INTAKE_EDGES, "test_a_signed_event_postgresql_cannot_store_is_recorded_raw_escalated_and_acknowledged"),
        "a signed event PostgreSQL cannot store is kept raw, escalated and acknowledged, not 500 forever",
    ),
    Mutation(
        "database-outage-503", CHECKOUT_APP,
        "    app.add_middleware(UnhandledErrorMiddleware, logger=log, outage=outage)\n",
        "",
        t(DATABASE_OUTAGE, "test_a_database_outage_is_503_with_retry_after_on_every_route_logged_once_and_then_over"),
        "an unreachable database is a 503 with Retry-After on every route, not a 500",
    ),
    Mutation(
        "intake-database-outage-503", INTAKE,
        "    app.add_middleware(UnhandledErrorMiddleware, logger=log, outage=outage)\n",
        "",
        t(DATABASE_OUTAGE, "test_a_database_outage_is_503_with_retry_after_on_every_route_logged_once_and_then_over"),
        "an unreachable database is a 503 to the provider too, so it redelivers",
    ),
    Mutation(
        "loops-survive-a-crashed-connection", DB_ERRORS,
        "asyncpg.InterfaceError, asyncpg.InternalClientError,",
        "asyncpg.InterfaceError,",
        (CRASHED_LOOPS,),
        "a connection a PostgreSQL crash left unusable never ends a worker (docs/chaos.md)",
    ),
    Mutation(
        "dead-letter-reminder-interval", DISPATCHER_WORKER,
        "reminder_interval=settings.reminder_interval,\n        batch_size",
        "reminder_interval=timedelta(seconds=900),\n        batch_size",
        t(SETTINGS_TESTS, "test_the_reminder_intervals_are_library_settings_every_service_reads"),
        "PAYCORE_REMINDER_INTERVAL_S governs a dead letter's escalation too, not a 15-minute constant",
    ),
    Mutation(
        "dead-letter-escalation-reminder-interval", RELAY,
        "now=now, reminder_interval=self.config.reminder_interval,",
        "now=now, reminder_interval=timedelta(seconds=900),",
        t(OUTBOX, "test_a_row_that_can_never_be_delivered_is_dead_lettered_escalated_and_does_not_delay_others"),
        "the relay raises a dead letter's escalation on the configured reminder interval",
    ),
    Mutation(
        "intake-escalation-reminder-interval", INTAKE,
        "                                     reminder_interval=intake.settings.reminder_interval,\n"
        "                                     recheck_after_s=intake.settings.recheck_after_s)",
        "                                     reminder_interval=timedelta(seconds=900),\n"
        "                                     recheck_after_s=intake.settings.recheck_after_s)",
        t(NOTE, "test_an_escalation_the_intake_raises_reminds_on_the_configured_reminder_interval"),
        "PAYCORE_REMINDER_INTERVAL_S governs the webhook handler's escalations, not a 15-minute constant",
    ),
    Mutation(
        "kafka-acks-all", KAFKA,
        '"acks": "all",',
        '"acks": 1,',
        (KAFKA_PRODUCER,),
        "an effect is marked dispatched only once every in-sync replica has it",
    ),
    # -- start and stop (devstack) -----------------------------------------------------------------
    Mutation(
        "up-stops-with-a-closed-stdout", SUPERVISOR,
        "        except (OSError, ValueError):  # EPIPE when the reader is gone; ValueError: closed file\n",
        "        except ValueError:  # EPIPE when the reader is gone; ValueError: closed file\n",
        t(CLI_TESTS, "test_up_stops_on_ctrl_c_after_its_stdout_is_closed"),
        "`make run | tee` then Ctrl-C: up stops, and all its children, with nobody reading",
    ),
    Mutation(
        # Both halves of the bug issue 8 found: the stop message written before the stop is
        # set, by a write that lets EPIPE out. Either alone is caught above or changes nothing
        # (write never raises), so they are mutated together: Ctrl-C must still stop up.
        "up-stop-set-before-its-output-can-fail", SUPERVISOR,
        '            self._stop.set()  # before any output: nothing may keep the stop from happening\n'
        '            self.emit("paycore", f"{reason}: stopping")\n'
        + SUPERVISOR_BETWEEN +
        "        except (OSError, ValueError):  # EPIPE when the reader is gone; ValueError: closed file\n",
        '            self.emit("paycore", f"{reason}: stopping")\n'
        '            self._stop.set()  # before any output: nothing may keep the stop from happening\n'
        + SUPERVISOR_BETWEEN +
        "        except ValueError:  # EPIPE when the reader is gone; ValueError: closed file\n",
        t(CLI_TESTS, "test_up_stops_on_ctrl_c_after_its_stdout_is_closed"),
        "Ctrl-C stops up even when its stdout is closed (`make run | tee`, tee gone)",
    ),
    Mutation(
        "embedded-postgres-guard", EMBEDDED,
        "    guard = _start_guard(data_dir)  # first: a kill at any moment after this is covered\n",
        "    guard = None  # first: a kill at any moment after this is covered\n",
        t(EMBEDDED_TESTS, "test_a_killed_up_leaves_no_embedded_postgres_running"),
        "a killed `paycore up` never leaves its embedded PostgreSQL running",
    ),
    # -- worktree i13: the console's sign-in cap per client address, its outage answer -------------
    Mutation(
        'auth-client-cap', OPERATORS,
        'if len(from_client) >= throttle.max_client_failures:',
        'if len(from_client) > 10 * throttle.max_client_failures:',
        t(OPERATOR_ACCOUNTS_TESTS,
          'test_one_client_spraying_many_names_is_refused_for_every_name_until_the_window_passes'),
        'one client address cannot spray many names without limit',
    ),
    Mutation(
        'auth-client-cap-keyed-by-client', LOGIN_FAILURES_SQL,
        *in_query(LOGIN_FAILURES_SQL, 'of_client', 'WHERE client = :client', 'WHERE client <> :client'),
        t(OPERATOR_ACCOUNTS_TESTS,
          'test_one_client_spraying_many_names_is_refused_for_every_name_until_the_window_passes'),
        "the cap counts one address's failures, not another's",
    ),
    Mutation(
        'auth-client-cap-from-settings', OPERATORS,
        '                       LOGIN_MAX_CLIENT_FAILURES.read(env))',
        '                       LOGIN_MAX_CLIENT_FAILURES.default)',
        t(OPERATOR_ACCOUNTS_TESTS, 'test_the_throttle_is_configured_by_its_settings'),
        'the per-client cap is the setting',
    ),
    Mutation(
        'console-database-outage-503', WEB_APP,
        "    app.add_middleware(UnhandledErrorMiddleware, logger=log, outage=outage, answer=errors.outage_answer(env))\n",
        "",
        (WEB_OUTAGE,),
        "an unreachable database is a 503 with Retry-After on the console, never a 500",
    ),
    # -- issue 28: decide_outcome, one mutation per row of its table (the writer and the preview run it) --
    Mutation(
        'decide-evidence-of-another-payment-writes-nothing', DOMAIN,
        "        if outcome.kind is not OutcomeKind.UNKNOWN or state in FINAL_STATES:\n",
        "        if False:\n",
        t(DECIDE, "test_evidence_about_another_payment_resolves_nothing_but_an_unknown_answer_still_counts"),
        "evidence about another payment resolves nothing",
    ),
    Mutation(
        'decide-a-final-state-never-changes', DOMAIN,
        "    if state in FINAL_STATES:\n        if hold_ended(attempt, outcome):",
        "    if False:\n        if hold_ended(attempt, outcome):",
        t(DECIDE, "test_a_final_state_never_changes_and_a_contradicting_final_outcome_is_escalated"),
        "a final state has no way out",
    ),
    Mutation(
        'decide-not-started-takes-no-outcome', DOMAIN,
        "    if state is AttemptState.NOT_STARTED:\n        return Decision(state, state, refused=",
        "    if False:\n        return Decision(state, state, refused=",
        t(DECIDE, "test_what_the_transition_table_refuses_is_a_refusal"),
        "only a sender that started an attempt has an outcome for it",
    ),
    Mutation(
        'decide-transition-table', DOMAIN,
        "    if not can_transition(state, target):\n",
        "    if False:\n",
        t(DECIDE, "test_what_the_transition_table_refuses_is_a_refusal"),
        "Unknown never becomes NotApplied: the table decides",
    ),
    Mutation(
        'decide-action-expiry-schedules-the-look', DOMAIN,
        "        next_check_at = min(next_check_at, expires_at)",
        "        next_check_at = max(next_check_at, expires_at)",
        t(DECIDE, "test_a_current_customer_action_is_looked_at_again_when_it_expires_if_that_comes_first"),
        "a customer action is looked at again when it expires",
    ),
    Mutation(
        'decide-only-an-open-order-is-paid', DOMAIN,
        "order_paid=order.status is OrderStatus.OPEN,",
        "order_paid=True,",
        t(DECIDE, "test_only_an_open_order_is_marked_paid"),
        "a success marks an open order Paid, never a cancelled one",
    ),
    Mutation(
        'decide-escalating-writer-finishes', DOMAIN,
        "        finish_after_s = escalated_recheck_after_s\n",
        "        finish_after_s = None\n",
        t(DECIDE, "test_a_leased_writer_that_escalates_schedules_its_next_look_and_one_without_does_not"),
        "a leased writer that escalates schedules its next look in the same transaction",
    ),
    # -- issue 28: decide_pass, one mutation per row of a recovery pass's table --------------------
    Mutation(
        'decide-pass-not-started-waits-for-its-endpoint', DOMAIN,
        '    if age < timing.abandonment_s:\n',
        '    if False:\n',
        t(DECIDE_PASS, 'test_a_young_not_started_attempt_waits_for_its_endpoint_until_abandonment'),
        'recovery never sends, nor closes, a NotStarted attempt its endpoint may still send',
    ),
    Mutation(
        'decide-pass-customer-action-never-resent', DOMAIN,
        '    if kind is PassKind.CUSTOMER_ACTION:\n',
        '    if False:\n',
        t(DECIDE_PASS, 'test_a_pending_customer_action_is_never_resent_and_waits_for_its_poll_or_expiry'),
        'a pending customer action is never resent',
    ),
    Mutation(
        'decide-pass-settling-waits', DOMAIN,
        '    if kind is PassKind.SETTLING:\n',
        '    if False:\n',
        t(DECIDE_PASS, 'test_a_started_attempt_whose_answer_may_still_come_waits_out_the_settling_time'),
        'a send whose answer may still arrive is not looked up or resent yet',
    ),
    Mutation(
        'decide-pass-account-not-configured', DOMAIN,
        '    if not facts.account_configured:\n',
        '    if False:\n',
        t(DECIDE_PASS, 'test_an_unconfigured_account_is_escalated_at_once'),
        'an attempt of an account without credentials reaches a person',
    ),
    Mutation(
        'decide-pass-paused-scope', DOMAIN,
        '    if facts.paused_until is not None:\n',
        '    if False:\n',
        t(DECIDE_PASS, 'test_a_paused_account_looks_up_nothing_until_the_pause_ends'),
        "a 429's pause holds every lookup of its account",
    ),
    Mutation(
        'decide-pass-failed-is-not-not-found', DOMAIN,
        '    if found.kind == "failed":\n',
        '    if False:\n',
        t(DECIDE_PASS, 'test_a_failed_lookup_is_not_not_found_and_backs_off_to_the_slow_cadence'),
        'a failed lookup is never taken for not found (no resend on it)',
    ),
    Mutation(
        'decide-pass-resend-rejected-never-repeated', DOMAIN,
        '    if facts.resend_was_rejected:\n',
        '    if False:\n',
        t(DECIDE_PASS, 'test_a_refused_resend_is_never_repeated'),
        'bytes the provider refused are never resent',
    ),
    Mutation(
        'decide-pass-failing-condition-escalates', DOMAIN,
        '    if facts.failing_resend_condition is not None:\n',
        '    if False:\n',
        t(DECIDE_PASS, 'test_a_failing_resend_condition_is_escalated_by_name_never_resent'),
        "a resend condition that fails is a person's, never a resend",
    ),
    # -- issue 28: the other transitions' decisions (start, close never sent, escalate and finish) --
    Mutation(
        'decide-start-only-from-not-started', DOMAIN,
        '    if attempt.state is not AttemptState.NOT_STARTED:\n        return _refused(attempt, "conflict")',
        '    if False:\n        return _refused(attempt, "conflict")',
        t(DECIDE, "test_only_a_not_started_attempt_of_a_payable_order_is_started"),
        "only a NotStarted attempt is started (sent for the first time)",
    ),
    Mutation(
        'decide-close-never-sent-only-not-started', DOMAIN,
        '    if attempt.state is not AttemptState.NOT_STARTED or not can_transition(attempt.state, target):\n',
        '    if False:\n',
        t(DECIDE, "test_only_a_not_started_attempt_is_closed_as_never_sent"),
        "recovery closes as never sent only what was never sent",
    ),
    Mutation(
        'decide-escalation-only-while-live', DOMAIN,
        '    if attempt.state not in RESOLVABLE_STATES:\n        return _refused(attempt, f"attempt {attempt.attempt_id} is {attempt.state.value}")',
        '    if False:\n        return _refused(attempt, f"attempt {attempt.attempt_id} is {attempt.state.value}")',
        t(DECIDE, "test_recovery_escalates_only_a_live_attempt_and_schedules_its_next_look"),
        "nobody is alerted about a settled payment",
    ),
    # -- worktree i13: the attach preview says what the attach does (one set of rules) -------------
    Mutation(
        'attach-preview-contradiction', DOMAIN,
        '        if outcome.is_final and target is not state:\n',
        '        if False:\n',
        t(ATTACH_PREVIEW, 'test_the_preview_says_what_the_attach_then_does[succeeded-then-failed]'),
        "the preview of evidence against a final state says it raises a contradiction",
    ),
    Mutation(
        'attach-preview-cancel-requested', DOMAIN,
        '    fulfil = order.status is OrderStatus.OPEN and not order.cancel_requested\n',
        '    fulfil = order.status is OrderStatus.OPEN\n',
        t(ATTACH_PREVIEW, 'test_the_preview_says_what_the_attach_then_does[cancel-requested]'),
        "the preview of a success after a cancellation says nothing is fulfilled and a person is told",
    ),
    Mutation(
        'attach-preview-unknown-adds-no-evidence', DOMAIN,
        '    if outcome.kind is OutcomeKind.UNKNOWN and (state is AttemptState.UNKNOWN\n',
        '    if False and (state is AttemptState.UNKNOWN\n',
        t(DECIDE, "test_unknown_never_overwrites_unknown_nor_an_observed_status"),
        "the preview says Unknown adds no evidence, as apply_outcome does",
    ),
    Mutation(
        'attach-refuses-a-never-sent-attempt', NOTIFICATIONS,
        '    if attempt.state is AttemptState.NOT_STARTED:  # never sent: no payment of it can exist\n',
        '    if False:\n',
        t(ATTACH_PREVIEW, 'test_the_preview_says_what_the_attach_then_does[never-sent]'),
        "no notification is attached to an attempt that was never sent",
    ),
    Mutation(
        'attach-preview-evidence-verdict', NOTIFICATIONS,
        '    if not verdict.accepted:\n        return AttachPreview(attempt, _not_evidence(event_id, attempt_id, verdict))\n',
        '',
        t(ATTACH_PREVIEW, 'test_the_preview_says_what_the_attach_then_does[amount-differs]'),
        "the preview says the evidence rules refuse a notification about another payment",
    ),
    # -- i11: the providers' shared rules (providers/http.py, providers/adapter.py) and Stripe's key --
    Mutation(
        "stored-endpoint-origin", PROVIDER_HTTP,
        "    if url.scheme not in DEFAULT_PORTS or not url.host or url.userinfo or origin(url) != origin(base):\n",
        "    if url.scheme not in DEFAULT_PORTS or not url.host or url.userinfo:\n",
        (*t(CLIENT, "test_endpoint_on_another_port_or_with_userinfo_is_not_sent"),
         *t(ADYEN_CLIENT, "test_a_stored_request_that_cannot_be_built_is_unknown_and_not_sent")),
        "a stored request goes only to its account's origin (another host or port could be a second payment)",
    ),
    Mutation(
        "stored-endpoint-userinfo", PROVIDER_HTTP,
        "    if url.scheme not in DEFAULT_PORTS or not url.host or url.userinfo or origin(url) != origin(base):\n",
        "    if url.scheme not in DEFAULT_PORTS or not url.host or origin(url) != origin(base):\n",
        t(CLIENT, "test_endpoint_on_another_port_or_with_userinfo_is_not_sent"),
        "a stored endpoint with userinfo is never sent (httpx would replace our credentials)",
    ),
    Mutation(
        "stored-url-unparseable", PROVIDER_HTTP,
        "    except httpx.InvalidURL:\n        raise NotBuildable(\"endpoint-changed\") from None\n",
        "    except ValueError:\n        raise NotBuildable(\"endpoint-changed\") from None\n",
        t(ADYEN_CLIENT, "test_a_url_that_does_not_parse_is_endpoint_changed_and_nothing_is_sent"),
        "a stored endpoint or base URL that does not parse is endpoint-changed, never a crash",
    ),
    Mutation(
        "provider-pool-no-redirects", PROVIDER_HTTP,
        "timeout=None, follow_redirects=False, trust_env=False,",
        "timeout=None, follow_redirects=True, trust_env=False,",
        (*t(CLIENT, "test_redirects_are_not_followed"), *t(ADYEN_CLIENT, "test_redirects_are_not_followed")),
        "a payment request never follows a redirect (the answer of another URL is not the provider's)",
    ),
    Mutation(
        "provider-pool-no-resend", PROVIDER_POOL,
        "session._retry_connection = False",
        "session._retry_connection = True",
        t(POOL_TESTS, "test_a_lookup_on_a_connection_the_provider_closed_is_not_resent"),
        "a provider request is sent at most once: aiohttp's resend of an idempotent request stays off",
    ),
    Mutation(
        "provider-pool-no-headers-of-its-own", PROVIDER_POOL,
        "skip_auto_headers=_NO_AUTO_HEADERS, ",
        "",
        t(POOL_TESTS, "test_a_request_goes_out_exactly_as_httpx_built_it"),
        "the pool sends the request as the adapter built it, with no header of its own",
    ),
    Mutation(
        "provider-pool-reads-the-body-as-sent", PROVIDER_POOL,
        "connector=connector, auto_decompress=False, trust_env=False,",
        "connector=connector, auto_decompress=True, trust_env=False,",
        (*t(CLIENT, "test_undecodable_content_encoding_is_unknown"),
         *t(ADYEN_CLIENT, "test_undecodable_content_encoding_is_unknown")),
        "the answer reaches httpx as the provider sent it (decoded once, there), so a broken body stays Unknown",
    ),
    Mutation(
        "provider-pool-tls-verified", PROVIDER_POOL,
        "keepalive_timeout=self._keepalive_expiry, ssl=self._ssl)",
        "keepalive_timeout=self._keepalive_expiry, ssl=False)",
        t(POOL_TESTS, "test_tls_is_verified_against_the_trust_given_and_refused_otherwise"),
        "a payment request goes only to a provider whose certificate the configured trust verifies",
    ),
    Mutation(
        "adyen-api-key-header-value", "libs/paycore/paycore/providers/adyen/wire.py",
        '    return {"X-API-Key": header_token(acct.api_key.reveal())}',
        '    return {"X-API-Key": acct.api_key.reveal()}',
        t(ADYEN_CLIENT, "test_an_api_key_that_is_no_header_value_is_invalid_header_and_nothing_is_sent"),
        "an API key that is no header value sends nothing (no header injection, no half-sent request)",
    ),
    Mutation(
        "stripe-empty-key-refused", STRIPE,
        '"idempotency_key": check_idempotency_key(stored.idempotency_key),',
        '"idempotency_key": stored.idempotency_key,',
        t(STRIPE_CLIENT, "test_an_empty_stored_key_is_refused_where_the_sdk_would_invent_one"),
        "the SDK never sends a create under a key it invented: an empty stored key sends nothing",
    ),
    Mutation(
        "stripe-base-url-http", STRIPE,
        '        if not acct.base_url.startswith(("https://", "http://")):\n',
        "        if False:\n",
        t(STRIPE_CLIENT, "test_an_account_base_url_that_is_not_http_sends_nothing_create_or_lookup"),
        "a Stripe account whose base URL is not http(s) is never called",
    ),
    Mutation(
        "stripe-lookup-version-header", STRIPE,
        "        if not is_token(acct.api_version):\n",
        "        if False:\n",
        t(STRIPE_CLIENT, "test_a_lookup_under_a_version_that_is_no_header_value_sends_nothing"),
        "a lookup under a version that is no header value sends nothing",
    ),
    # -- i12: deployment (retention chain, Kafka security) --------------------------------------------
    Mutation(
        'topics-outlive-the-outbox-horizon', "services/dispatcher/paycore_dispatcher/settings.py",
        "    if kafka_retention < outbox_retention:",
        "    if kafka_retention < 0:",
        t(INBOX_RETENTION, "test_the_topics_keep_their_records_at_least_as_long_as_the_outbox_remembers_them"),
        "a topic keeps an effect as long as the outbox remembers it as dispatched",
    ),
    Mutation(
        'kafka-producer-security', KAFKA,
        '        "linger_ms": 2,\n        **security_options(ks.security),',
        '        "linger_ms": 2,',
        t(KAFKA_SECURITY_TESTS, "test_every_client_paycore_makes_gets_the_security_settings"),
        "the dispatcher's producer connects with TLS/SASL when the settings say so",
    ),
    Mutation(
        'kafka-tls-verifies-the-broker', KAFKA,
        "        return ssl.create_default_context(",
        "        return ssl._create_unverified_context(",
        t(KAFKA_SECURITY_TESTS, "test_every_client_paycore_makes_gets_the_security_settings"),
        "TLS to Kafka verifies the brokers' certificates and host names",
    ),
    Mutation(
        'incidents-faust-security', "services/incidents/paycore_incidents/app.py",
        "        broker_credentials=broker_credentials(ks),\n",
        "",
        t(KAFKA_SECURITY_TESTS, "test_the_incident_agents_faust_app_gets_the_same"),
        "the incident agent's faust clients connect with TLS/SASL when the settings say so",
    ),
    # -- i9 (worktree i9): the chaos run's own checks; a run that skips what it claims is not clean --
    Mutation(
        'chaos-unsettled-run-is-not-clean', CHAOS_INVARIANTS,
        '    if settled is True:\n',
        '    if settled is not None:\n',
        t(CHAOS_CHECKS, "test_a_run_is_clean_only_when_it_settled_within_its_bound_and_made_every_kill_it_planned"),
        "a chaos run that did not settle within its bound does not pass",
    ),
    Mutation(
        'chaos-planned-kill-not-carried-out', CHAOS_KILLS,
        'if k.get("outcome") != CARRIED_OUT]',
        'if k.get("outcome") == "never"]',
        t(CHAOS_CHECKS, "test_a_run_is_clean_only_when_it_settled_within_its_bound_and_made_every_kill_it_planned"),
        "a chaos run that skipped a planned kill does not pass",
    ),
    Mutation(
        'chaos-kills-go-round-the-instances', CHAOS_KILLS,
        'target = instances[(first + n) % len(instances)]',
        'target = instances[first]',
        t(CHAOS_STACK, "test_the_kill_plan_is_the_seeds_each_kind_killed_n_times_mid_load_and_the_database_once"),
        "with kills >= instances, every instance of a kind is killed",
    ),
    Mutation(
        'chaos-resend-version-on-every-wire', CHAOS_INVARIANTS,
        'if provider.version_of(q) != attempt.api_version:',
        'if provider.version_header is not None and provider.version_of(q) != attempt.api_version:',
        t(CHAOS_CHECKS, "test_an_adyen_resend_keeps_its_version_path_merchant_account_and_key_mode"),
        "a resend under another API version (Adyen's is in the path) is counted",
    ),
    Mutation(
        'chaos-resend-stripe-form-reference', CHAOS_PROVIDERS,
        '        if self.body_format == "form":\n',
        '        if False:\n',
        t(CHAOS_CHECKS, "test_a_stripe_resend_is_its_form_bytes_key_version_and_key_mode"),
        "Stripe's creates are matched to their attempts by the form body's reference",
    ),
    Mutation(
        'sandbox-fault-fired-count', SANDBOX_FAULTS,
        '            rule.fired += 1\n',
        '',
        t("tests/sandbox/test_faults.py", "test_each_rule_says_how_often_it_fired"),
        "the faults a run reports as met are the ones the sandbox applied",
    ),
    # -- issue 26: six guards an outside audit found no test protecting -------------------------------
    Mutation(
        "recovery-multiple-payments", DOMAIN,
        '        if len(found.payment_ids) > 1:',
        '        if len(found.payment_ids) > 2:',
        t(REC_LOOKUPS, "test_two_provider_payments_for_one_reference_escalate_and_resolve_nothing"),
        "two provider payments for one attempt's reference (a possible double charge) go to a person",
    ),
    Mutation(
        "attach-another-account", NOTIFICATIONS,
        '    if row["provider_account"] != attempt.provider_account:',
        "    if False:",
        t(SECRET_ROTATION,
          "test_a_notification_verified_for_another_account_cannot_be_attached_to_this_accounts_attempt"),
        "an operator cannot attach another account's notification (a Stripe intent names no account)",
    ),
    Mutation(
        "conflict-owner-another-account", CONFLICTS,
        '        if stored["provider_account"] != owner.provider_account:',
        "        if False:",
        t(OPS_CONFLICTS,
          "test_an_owner_of_another_account_than_the_notifications_is_refused_and_nothing_is_written"),
        "a conflict's notification is applied only to an owner of the account that verified it",
    ),
    Mutation(
        "pay-idempotency-key-across-orders", CHECKOUT_ROUTES,
        '{"order_id": order_id, "body": body}',
        '{"body": body}',
        t(CHECKOUT_HTTP, "test_idempotency_key_reused_for_another_order_is_422_and_pays_nothing"),
        "one Idempotency-Key used for another order is another intent: 422, never A's stored Succeeded",
    ),
    Mutation(
        "relay-followers-in-id-order", OUTBOX_SQL,
        *in_query(OUTBOX_SQL, 'followers', "\nORDER BY ordering_key, message_id", ""),
        t(OUTBOX, "test_an_attempts_rows_go_out_in_id_order_even_when_the_plan_reads_them_in_heap_order"),
        "an attempt's effects go out in outbox order whatever plan reads them (no refund before fulfillment)",
    ),
    Mutation(
        "stripe-refunded-at-most-charged", STRIPE_WIRE,
        "if not _is_int(refunded) or not 0 <= refunded <= amount:",
        "if not _is_int(refunded) or not 0 <= refunded:",
        t(STRIPE_EVENT_TESTS, "test_a_charge_refunding_more_than_it_charged_or_less_than_nothing_is_invalid"),
        "a Stripe charge claiming more refunded than charged is not read (no refund-request for it)",
    ),
    Mutation(
        "signature-tolerance-both-ways", SIGNATURES,
        "if abs(now.timestamp() - timestamp) > TOLERANCE_S:",
        "if now.timestamp() - timestamp > TOLERANCE_S:",
        t(INTAKE_HTTP, "test_a_signature_dated_ahead_of_the_tolerance_is_rejected"),
        "a Standard Webhooks signature dated ahead of the tolerance does not verify",
    ),
    Mutation(
        "stripe-signature-tolerance-both-ways", STRIPE_EVENTS,
        "if abs(now.timestamp() - timestamp) > TOLERANCE_S:",
        "if now.timestamp() - timestamp > TOLERANCE_S:",
        t(STRIPE_EVENT_TESTS, "test_a_timestamp_outside_300_s_is_unverified"),
        "a Stripe-Signature dated ahead of the tolerance does not verify",
    ),
    # -- worktree i14 (issue 14 audit: observability and contracts) --
    Mutation(
        'incidents-consumer-copies-active-partitions', "services/incidents/paycore_incidents/recovery.py",
        "fixed = None if active_partitions is None else set(active_partitions)",
        "fixed = active_partitions",
        t("tests/incidents/test_incident_agent.py",
          "test_alerts_published_while_the_agent_is_down_or_starting_are_all_paged"),
        "an alert waiting while the incident agent restarts is paged, never dropped by faust's start-up",
    ),
    Mutation(
        'logs-outbound-url-origin-only', "libs/paycore/paycore/logs.py",
        '"logger": record.name, "message": _message(record),',
        '"logger": record.name, "message": record.getMessage(),',
        t("tests/unit/test_logs.py", "test_an_outbound_request_line_keeps_the_url_origin_only")
        + t("tests/observability/test_worker_log_hygiene.py",
            "test_consumers_alerts_and_the_incident_agent_log_json_lines_without_secrets"),
        "an alert webhook URL (a Slack webhook's secret path) never reaches a log line",
    ),
    # -- issue 29: never more back than was taken (the rules a refund, capture or cancel is decided by) --
    Mutation(
        "refund-over-headroom", DOMAIN,
        "        if amount_minor > room.refundable_minor:\n            return OperationRefusal.EXCEEDS_REFUNDABLE",
        "        if amount_minor > room.refundable_minor + 1:\n            return OperationRefusal.EXCEEDS_REFUNDABLE",
        t(OPERATION_RULES, "test_refuse_operation", "test_two_partial_refunds_decided_in_turn_cannot_both_pass"),
        "a refund one minor unit over what is still refundable is refused",
    ),
    Mutation(
        "refund-of-nothing-captured", DOMAIN,
        "        if room.captured_minor == 0:\n            return OperationRefusal.NOT_CAPTURED",
        "        if False:\n            return OperationRefusal.NOT_CAPTURED",
        t(OPERATION_RULES, "test_refuse_operation"),
        "a hold, or a payment that did not succeed, is not refunded",
    ),
    Mutation(
        "unknown-refund-frees-its-amount", DOMAIN,
        "HOLDING_OPERATION_STATES: frozenset[OperationState] = LIVE_OPERATION_STATES | {OperationState.SUCCEEDED}",
        "HOLDING_OPERATION_STATES: frozenset[OperationState] = frozenset({OperationState.SUCCEEDED})",
        t(OPERATION_RULES, "test_headroom", "test_two_partial_refunds_decided_in_turn_cannot_both_pass"),
        "a recorded, sent or Unknown refund holds its amount until evidence frees it",
    ),
    Mutation(
        "refunds-not-subtracted", DOMAIN,
        "refundable_minor=max(captured - refunded, 0))",
        "refundable_minor=max(captured, 0))",
        t(OPERATION_RULES, "test_headroom"),
        "what was refunded is no longer refundable",
    ),
    Mutation(
        "capture-over-hold", DOMAIN,
        "        if amount_minor > room.capturable_minor:\n            return OperationRefusal.EXCEEDS_CAPTURABLE",
        "        if False:\n            return OperationRefusal.EXCEEDS_CAPTURABLE",
        t(OPERATION_RULES, "test_refuse_operation"),
        "a capture never exceeds the hold",
    ),
    Mutation(
        "second-capture-or-cancel", DOMAIN,
        "    capturable = 0 if captures or cancels or captured_upfront_minor else authorized_minor",
        "    capturable = 0 if captured_upfront_minor else authorized_minor",
        t(OPERATION_RULES, "test_headroom"),
        "one capture or one cancel holds a payment: no second capture, no void after a capture",
    ),
    Mutation(
        "returned-only-from-succeeded-refund", DOMAIN,
        "    OperationKind.REFUND: {**_PAYMENT_LIKE, OperationState.SUCCEEDED: frozenset({OperationState.RETURNED})},",
        "    OperationKind.REFUND: {**_PAYMENT_LIKE, OperationState.SUCCEEDED: frozenset({OperationState.RETURNED}),"
        " OperationState.RETURNED: frozenset({OperationState.SUCCEEDED})},",
        t(OPERATION_RULES, "test_every_kind_has_the_payments_table_and_only_a_refund_comes_back",
          "test_a_final_operation_has_no_way_out_except_a_refund_returned"),
        "a returned refund stays returned (its amount is refundable again)",
    ),
    Mutation(
        "operation-refused-only-send", CARDCO_OPERATIONS,
        "                    kind, error.refused_code, first_send=first_send, resend_reason=error.reason,",
        "                    kind, error.refused_code, first_send=True, resend_reason=error.reason,",
        t(OPERATION_CLIENT, "test_a_documented_400_is_rejected_on_the_first_send_only",
          "test_rate_limited_is_rejected_on_the_first_send_only"),
        "a refused capture, cancel or refund is NotApplied only on the only send",
    ),
    Mutation(
        "operation-answer-about-another", CARDCO_OPERATIONS,
        "        if attribute is not None:\n            # About another operation or payment",
        "        if False:\n            # About another operation or payment",
        t(OPERATION_CLIENT, "test_an_answer_naming_another_operation_is_not_evidence"),
        "an answer naming another reference, amount or payment is not evidence about this operation",
    ),
    Mutation(
        "operation-refund-body-names-payment", CARDCO_OPERATIONS,
        "        if kind is OperationKind.REFUND and _body_payment(stored.request_body) != provider_payment_id:",
        "        if False:",
        t(OPERATION_CLIENT, "test_a_request_naming_another_payment_is_not_sent"),
        "a stored refund naming another payment than the one asked is never sent",
    ),
    Mutation(
        "operation-cancel-must-be-canceled", CARDCO_OPERATIONS,
        '        if payment.status != "canceled":',
        "        if False:",
        t(OPERATION_CLIENT, "test_a_cancel_answered_with_a_payment_not_canceled_is_unknown"),
        "a cancel's 200 counts only when it shows the payment canceled",
    ),
    # -- issue 29: decide_operation_outcome, one mutation per rule's guard ---------------------------
    Mutation(
        "operation-decide-a-final-state-never-changes", DOMAIN,
        "    if state in FINAL_OPERATION_STATES:\n",
        "    if False:\n",
        t(DECIDE_OPERATION, "test_a_final_state_never_changes_except_a_refund_returned"),
        "a final capture, cancel or refund has no way out but a refund returned",
    ),
    Mutation(
        "operation-decide-refund-returned", DOMAIN,
        "        if kind is OperationKind.REFUND and state is OperationState.SUCCEEDED \\\n",
        "        if False and state is OperationState.SUCCEEDED \\\n",
        t(DECIDE_OPERATION, "test_a_final_state_never_changes_except_a_refund_returned"),
        "a succeeded refund reported failed is Returned (its amount refundable again) and a person told",
    ),
    Mutation(
        "operation-decide-returned-only-a-refund", DOMAIN,
        "        if kind is OperationKind.REFUND and state is OperationState.SUCCEEDED \\\n",
        "        if state is OperationState.SUCCEEDED \\\n",
        t(DECIDE_OPERATION, "test_a_final_state_never_changes_except_a_refund_returned"),
        "a succeeded capture or cancel never comes back: a failure reported for it is a contradiction",
    ),
    Mutation(
        "operation-decide-contradiction", DOMAIN,
        "        if target in FINAL_OPERATION_STATES and not agrees:\n",
        "        if False:\n",
        t(DECIDE_OPERATION, "test_a_final_state_never_changes_except_a_refund_returned"),
        "a final ending against another recorded final state is escalated",
    ),
    Mutation(
        "operation-decide-returned-agrees-with-failed", DOMAIN,
        "        agrees = target is state or (state is OperationState.RETURNED\n",
        "        agrees = target is state or (False\n",
        t(DECIDE_OPERATION, "test_a_final_state_never_changes_except_a_refund_returned"),
        "a returned refund reported failed again, or its success reported late, is no contradiction",
    ),
    Mutation(
        "operation-decide-not-started-takes-no-outcome", DOMAIN,
        "    if state is OperationState.NOT_STARTED:\n        return OperationDecision(",
        "    if False:\n        return OperationDecision(",
        t(DECIDE_OPERATION, "test_a_live_operation", "test_a_refusal_says_why"),
        "only a sender that started an operation has an outcome for it",
    ),
    Mutation(
        "operation-decide-unknown-never-overwrites", DOMAIN,
        "    if target is OperationState.UNKNOWN and (state is OperationState.UNKNOWN or provider_status is not None):\n",
        "    if False:\n",
        t(DECIDE_OPERATION, "test_a_live_operation"),
        "Unknown never overwrites Unknown nor a seen provider status",
    ),
    Mutation(
        "operation-decide-unknown-keeps-a-seen-status", DOMAIN,
        "(state is OperationState.UNKNOWN or provider_status is not None)",
        "(state is OperationState.UNKNOWN or False)",
        t(DECIDE_OPERATION, "test_a_live_operation"),
        "a Started operation whose provider status was seen is not made Unknown",
    ),
    Mutation(
        "operation-decide-transition-table", DOMAIN,
        "    if not can_transition_operation(kind, state, target):\n        return OperationDecision(",
        "    if False:\n        return OperationDecision(",
        t(DECIDE_OPERATION, "test_a_live_operation", "test_a_refusal_says_why"),
        "an Unknown operation never becomes NotApplied: the kind's table decides",
    ),
    # -- issue 29: an operation's writes, conditional on the version (and state) read -----------------
    Mutation(
        "operation-apply-outcome-version", OPERATIONS_SQL,
        *in_query(OPERATIONS_SQL, "apply_outcome", "version = :version", "(version = :version OR TRUE)"),
        t(OPERATION_WRITES, "test_a_stale_version_writes_nothing"),
        "an outcome decided on a stale version (even Started -> Started since) writes nothing",
    ),
    Mutation(
        "operation-apply-outcome-guard", OPERATIONS_SQL,
        *in_query(OPERATIONS_SQL, "apply_outcome", "version = :version AND state = :state",
                  "(version = :version OR TRUE) AND (state = :state OR TRUE)"),
        t(OPERATION_WRITES, "test_a_stale_version_writes_nothing"),
        "an outcome is written only on the version and state it was decided against",
    ),
    Mutation(
        "operation-mark-started-guard", OPERATIONS_SQL,
        *in_query(OPERATIONS_SQL, "mark_started", "o.version = :version AND o.state = 'NotStarted'",
                  "(o.version = :version OR TRUE) AND (o.state = 'NotStarted' OR TRUE)"),
        t(OPERATION_WRITES, "test_a_stale_start_writes_nothing"),
        "an operation is started once, from NotStarted, with one send intent",
    ),
    Mutation(
        "record-operation-lock", OPERATIONS_SQL,
        *in_query(OPERATIONS_SQL, "lock_payment", "\nFOR NO KEY UPDATE", ""),
        t(RECORD_OPERATION, "test_two_concurrent_partial_refunds_over_the_refundable_amount_record_exactly_one"),
        "two concurrent partial refunds are decided one after the other, never both against the same headroom",
    ),
    Mutation(
        "record-operation-succeeded-only", OPERATIONS_REPO,
        '    succeeded = payment["state"] == AttemptState.SUCCEEDED.value',
        "    succeeded = True",
        t(RECORD_OPERATION, "test_a_payment_that_did_not_succeed_gives_nothing"),
        "a payment that did not succeed can be neither captured, cancelled nor refunded",
    ),
    Mutation(
        "record-operation-holding-amounts", OPERATIONS_REPO,
        "captured_upfront_minor=upfront, operations=held)",
        "captured_upfront_minor=upfront, operations=[])",
        t(RECORD_OPERATION, "test_a_refund_over_the_captured_amount_by_one_minor_unit_is_refused",
          "test_an_unknown_refund_holds_its_amount",
          "test_a_second_capture_and_a_cancel_after_a_capture_are_refused",
          "test_a_capture_after_a_cancel_is_refused"),
        "what the payment's operations already hold (an Unknown refund too) is not given again",
    ),
    Mutation(
        "record-operation-backstop", OPERATIONS_REPO,
        "        if exc.constraint_name != ONE_CAPTURE_OR_CANCEL:",
        "        if True:",
        t(RECORD_OPERATION, "test_a_capture_the_lock_did_not_see_wins_the_unique_index_and_the_recording_is_refused"),
        "a capture or cancel that loses the unique index to a lock-skipping writer is a refusal, not an error",
    ),
    Mutation(
        "operation-order-status", OPERATIONS_REPO,
        "    if status is not current:\n        await set_status_after_operation(",
        "    if False:\n        await set_status_after_operation(",
        t(REFUND_SENDS, "test_a_full_refund_succeeds_once_and_the_order_is_refunded",
          "test_partial_refunds_add_up_to_the_capture_and_no_further"),
        "the order follows its refunds: Paid -> PartiallyRefunded -> Refunded",
    ),
    Mutation(
        "operation-refunded-whole", DOMAIN,
        "return OrderStatus.REFUNDED if refunded_minor >= captured_minor else",
        "return OrderStatus.REFUNDED if refunded_minor > captured_minor else",
        t(REFUND_SENDS, "test_a_full_refund_succeeds_once_and_the_order_is_refunded"),
        "an order whose capture was given back whole is Refunded",
    ),
    Mutation(
        "operation-returned-not-refunded", OPERATIONS_SQL,
        *in_query(OPERATIONS_SQL, "settled_amounts", "o.kind = 'refund' AND o.state = 'Succeeded'",
                  "o.kind = 'refund' AND o.state IN ('Succeeded', 'Returned')"),
        t(REFUND_NOTIFICATIONS, "test_a_succeeded_refund_that_comes_back_is_returned_and_a_person_told"),
        "a refund the network sent back no longer counts: the order is Paid again",
    ),
    Mutation(
        "operation-effect-queued", OPERATIONS_REPO,
        "            effect = OPERATION_EFFECTS.get((updated.kind, updated.state))",
        "            effect = None",
        t(REFUND_SENDS, "test_a_full_refund_succeeds_once_and_the_order_is_refunded"),
        "what an operation ended as reaches the store's consumers",
    ),
    Mutation(
        "operation-resend-only-in-window", DOMAIN,
        "    if past_deadline:\n        return OperationStep.ESCALATE_DEADLINE",
        "    if False:\n        return OperationStep.ESCALATE_DEADLINE",
        t(REFUND_RECOVERY, "test_past_the_key_window_nothing_is_resent_and_a_person_is_asked"),
        "an operation is resent under its key only inside the provider's key window",
    ),
    Mutation(
        "operation-pending-past-window-escalated", DOMAIN,
        "        if found_pending and provider_status is not None and past_deadline:",
        "        if False:",
        t(REFUND_RECOVERY, "test_a_refund_still_pending_past_the_key_window_is_a_persons"),
        "an operation the provider keeps pending past the key window reaches a person",
    ),
    Mutation(
        "operation-never-sent-closed", DOMAIN,
        "    if state is OperationState.NOT_STARTED:\n        return OperationStep.CLOSE_NEVER_SENT",
        "    if False:\n        return OperationStep.CLOSE_NEVER_SENT",
        t(REFUND_RECOVERY, "test_a_refund_never_sent_is_closed_and_frees_its_amount"),
        "an operation whose sender died before the send intent is closed, freeing its amount",
    ),
    Mutation(
        "operation-evidence-amount", EVIDENCE_RULES,
        "    mismatch = _first_mismatch(operation, claim) if claim is not None else None",
        "    mismatch = None",
        t(REFUND_NOTIFICATIONS, "test_a_refund_event_about_another_amount_or_payment_resolves_nothing"),
        "a refund notification about another amount, account or reference resolves nothing",
    ),
    Mutation(
        "operation-evidence-payment", EVIDENCE_RULES,
        "    if reported_payment_id is not None and payment_id is not None and reported_payment_id != payment_id:",
        "    if False:",
        t(REFUND_NOTIFICATIONS, "test_a_refund_event_about_another_amount_or_payment_resolves_nothing"),
        "a refund of another payment resolves nothing",
    ),
    Mutation(
        "operation-identity-conflict", OPERATION_HANDLER,
        "                and by_id.operation_id != by_reference.operation_id)",
        "                and False)",
        t(REFUND_NOTIFICATIONS, "test_an_event_whose_id_and_reference_name_two_refunds_is_applied_to_neither"),
        "a notification naming two operations is applied to neither",
    ),
    Mutation(
        "refund-request-only-for-refunds-elsewhere", NOTIFICATIONS,
        "            and n.amount_refunded > await refunds_of_ours(conn, result.attempt_id)):",
        "            and True):",
        t(REFUND_NOTIFICATIONS, "test_a_succeeded_refund_that_comes_back_is_returned_and_a_person_told"),
        "paycore's own refund, reported on the payment, is not announced as one made elsewhere",
    ),
    Mutation(
        "automatic-refund-setting", RESCUE_OPERATIONS,
        '        if self.recovery.succeeded_after_cancel != "refund":',
        "        if False:",
        t("tests/operations/test_refund_after_cancel.py", "test_with_escalate_a_person_decides"),
        "with PAYCORE_SUCCEEDED_AFTER_CANCEL=escalate paycore refunds nothing by itself",
    ),
    Mutation(
        "hold-ended-only-for-holds", DOMAIN,
        "    if attempt.state is not AttemptState.SUCCEEDED or attempt.provider_status != HOLD_STATUS:\n        return False",
        "    if attempt.state is not AttemptState.SUCCEEDED:\n        return False",
        t(DECIDE, "test_the_end_of_a_hold_contradicts_nothing_but_the_end_of_a_charge_does"),
        "a charged payment later reported canceled is still a contradiction a person sees",
    ),
    Mutation(
        "hold-ended-same-payment", DOMAIN,
        "    if outcome.provider_payment_id is not None and outcome.provider_payment_id != attempt.provider_payment_id:\n        return False",
        "    if False:\n        return False",
        t(DECIDE, "test_the_end_of_a_hold_contradicts_nothing_but_the_end_of_a_charge_does"),
        "only the hold's own payment ending ends it",
    ),
    Mutation(
        "hold-authorizes-not-pays", DOMAIN,
        "                    order_held=held,",
        "                    order_held=False,",
        t(DECIDE, "test_a_hold_authorizes_the_order_instead_of_paying_it"),
        "a held payment leaves its order Authorized, not Paid: nothing is charged yet",
    ),
    Mutation(
        "hold-lapse-waits-for-capture", DOMAIN,
        "    if capture_or_cancel_live:\n        return HoldStep.WAIT",
        "    if False:\n        return HoldStep.WAIT",
        t(DECIDE, "test_a_hold_is_warned_about_then_lapses_unless_a_capture_or_void_is_in_flight"),
        "a hold whose capture is in flight is not declared lapsed: the capture's evidence decides",
    ),
    Mutation(
        "hold-lapse-voids-once", "libs/paycore/paycore/queries/orders.sql",
        *in_query("libs/paycore/paycore/queries/orders.sql", "void_lapsed", "WHERE order_id = :order_id AND status = 'Authorized'",
                  "WHERE order_id = :order_id AND (status = 'Authorized' OR TRUE)"),
        t("tests/operations/test_holds.py", "test_a_lapse_read_before_a_capture_ended_records_nothing"),
        "a lapse is recorded once, and never over a capture or a void that ended first",
    ),
    Mutation(
        "operation-key-window-capped", OPERATIONS_SQL,
        *in_query(OPERATIONS_SQL, "mark_started", "LEAST(pa.key_retention, make_interval(secs => :key_retention_cap_s))",
                  "COALESCE(pa.key_retention, make_interval(secs => :key_retention_cap_s))"),
        t("tests/operations/test_refund_flows.py", "test_a_partial_refund_ends_succeeded_by_the_providers_evidence"),
        "an Adyen modification is resent only inside the 7 days Adyen keeps its key, not the payment's 31",
    ),
    Mutation(
        "backoffice-key-scoped-to-client", "services/checkout/paycore_checkout/backoffice.py",
        'request, f"client:{credential.client}", kind.endpoint,',
        'request, f"credential:{credential.credential_id}", kind.endpoint,',
        t("tests/operations/test_backoffice_api.py", "test_a_retry_under_the_rotated_credential_is_the_same_request"),
        "a partial refund retried across a credential rotation is one refund, not two",
    ),
    Mutation(
        "backoffice-key-scoped-to-endpoint", "services/checkout/paycore_checkout/backoffice.py",
        '        return f"POST /orders/{{order_id}}/{self.collection}"',
        '        return "POST /orders/{order_id}/operations"',
        t("tests/operations/test_backoffice_api.py", "test_the_same_key_at_two_endpoints_is_two_intents"),
        "the same Idempotency-Key at /refunds and at /captures is two intents (seed 002)",
    ),
    Mutation(
        "console-approve-once", "libs/paycore/paycore/operator_refunds.py",
        "            if approval.decision is not None:\n                raise _already(approval)\n            if approval.requested_by == handle:\n                raise _own(approval)\n            room",
        "            if approval.requested_by == handle:\n                raise _own(approval)\n            room",
        t("tests/console/test_refunds.py", "test_another_refunder_approves_it_once_even_posted_twice_at_the_same_time"),
        "a refund approved twice at once (a double click, two operators) is sent once",
    ),
    Mutation(
        "console-approver-not-requester", "libs/paycore/paycore/operator_refunds.py",
        "            if approval.requested_by == handle:\n                raise _own(approval)\n            room",
        "            room",
        t("tests/console/test_refunds.py", "test_above_the_threshold_a_refund_waits_and_its_requester_cannot_approve_it"),
        "a refund above the threshold needs a second operator: never its requester's own approval",
    ),
    Mutation(
        "hold-asked-by-the-order", DOMAIN,
        "    held = target is AttemptState.SUCCEEDED and (order.manual_capture\n",
        "    held = target is AttemptState.SUCCEEDED and (False\n",
        t(DECIDE, "test_an_order_that_asked_for_a_hold_is_held_whatever_the_provider_calls_its_success"),
        "an Adyen hold (answered Authorised, as a charge is) leaves its order Authorized, not Paid",
    ),
    Mutation(
        "order-capture-counts-earlier-refunds", DOMAIN,
        "        return by_refunds() if kind is OperationKind.CAPTURE else OrderStatus.VOIDED",
        "        return OrderStatus.PAID if kind is OperationKind.CAPTURE else OrderStatus.VOIDED",
        t(DECIDE, "test_an_orders_status_follows_its_refunds_and_its_hold"),
        "an order whose capture's success is learnt after a refund of it says PartiallyRefunded, not Paid",
    ),
    # -- settlement reconciliation (issue 30) -------------------------------------------------------
    Mutation(
        "settlement-payment-of-this-account", SETTLEMENT_LINES_SQL,
        *in_query(SETTLEMENT_LINES_SQL, "judge",
                  "AND a.provider_account = :provider_account AND a.provider_payment_id = i.provider_payment_id",
                  "AND (a.provider_account = :provider_account OR TRUE) AND a.provider_payment_id = i.provider_payment_id"),
        t(RECONCILE, "test_a_line_naming_another_accounts_payment_or_refund_matches_nothing_of_it"),
        "a line of one account's batch never settles another account's payment",
    ),
    Mutation(
        "settlement-refund-of-this-account", SETTLEMENT_LINES_SQL,
        *in_query(SETTLEMENT_LINES_SQL, "judge",
                  "AND o.provider_account = :provider_account AND o.provider_operation_id = i.provider_operation_id",
                  "AND (o.provider_account = :provider_account OR TRUE) AND o.provider_operation_id = i.provider_operation_id"),
        t(RECONCILE, "test_a_line_naming_another_accounts_payment_or_refund_matches_nothing_of_it"),
        "a refund line of one account's batch never settles another account's refund",
    ),
    Mutation(
        "settlement-charge-amount", SETTLEMENT_LINES_SQL,
        *in_query(SETTLEMENT_LINES_SQL, "judge",
                  "WHEN f.kind = 'charge' AND f.gross_minor <> COALESCE",
                  "WHEN f.kind = 'charge' AND FALSE AND f.gross_minor <> COALESCE"),
        t(RECONCILE, "test_every_line_is_matched_or_an_exception_with_its_evidence"),
        "a charge paid out for another amount than the payment's is an exception",
    ),
    Mutation(
        "settlement-refund-amount", SETTLEMENT_LINES_SQL,
        *in_query(SETTLEMENT_LINES_SQL, "judge",
                  "WHEN f.kind = 'refund' AND -f.gross_minor <> o.amount_minor",
                  "WHEN f.kind = 'refund' AND FALSE AND -f.gross_minor <> o.amount_minor"),
        t(RECONCILE, "test_a_refund_paid_out_for_another_amount_is_an_exception"),
        "a refund paid out for another amount than the refund's is an exception",
    ),
    Mutation(
        "settlement-currency", SETTLEMENT_LINES_SQL,
        *in_query(SETTLEMENT_LINES_SQL, "judge",
                  "WHEN f.gross_currency <> COALESCE(o.currency, a.currency)",
                  "WHEN FALSE AND f.gross_currency <> COALESCE(o.currency, a.currency)"),
        t(RECONCILE, "test_every_line_is_matched_or_an_exception_with_its_evidence"),
        "a line in another currency than its payment's is an exception",
    ),
    Mutation(
        "settlement-not-succeeded-here", SETTLEMENT_LINES_SQL,
        *in_query(SETTLEMENT_LINES_SQL, "judge",
                  "WHEN f.kind = 'charge' AND f.operation_id IS NULL AND a.state <> 'Succeeded'",
                  "WHEN f.kind = 'charge' AND f.operation_id IS NULL AND FALSE AND a.state <> 'Succeeded'"),
        t(RECONCILE, "test_every_line_is_matched_or_an_exception_with_its_evidence"),
        "money the provider paid out for a payment that is not Succeeded here is an exception",
    ),
    Mutation(
        "settlement-duplicate-in-batch", SETTLEMENT_LINES_SQL,
        *in_query(SETTLEMENT_LINES_SQL, "judge",
                  "ORDER BY f.line_no) > 1", "ORDER BY f.line_no) > 2"),
        t(RECONCILE, "test_every_line_is_matched_or_an_exception_with_its_evidence"),
        "a payment paid out twice in one batch is an exception",
    ),
    Mutation(
        "settlement-duplicate-across-batches", SETTLEMENT_LINES_SQL,
        *in_query(SETTLEMENT_LINES_SQL, "judge",
                  "WHERE l.attempt_id = f.attempt_id AND l.kind = 'charge' AND l.batch_id <> :batch_id)",
                  "WHERE l.attempt_id = f.attempt_id AND l.kind = 'charge' AND l.batch_id <> :batch_id AND FALSE)"),
        t(RECONCILE, "test_a_payment_paid_out_in_an_earlier_batch_too_is_a_duplicate"),
        "a payment paid out in an earlier batch and again is an exception",
    ),
    Mutation(
        "settlement-unbalanced-batch-refused", SETTLEMENTS,
        "            imbalance = tally.imbalance(batch)\n",
        "            imbalance = None\n",
        t(RECONCILE, "test_a_batch_that_does_not_add_up_is_one_exception_and_none_of_its_lines"),
        "a batch whose lines do not add up to its totals records none of them and is an exception",
    ),
    Mutation(
        "settlement-payout-nets-to-zero", SETTLEMENTS,
        "        if self.payout_lines and self.net_minor != 0 and batch.reported_net_minor is None:",
        "        if False:",
        t(RECONCILE, "test_a_batch_paid_out_in_it_must_net_to_zero"),
        "a batch that pays itself out (Adyen's MerchantPayout) must net to zero",
    ),
    Mutation(
        "settlement-exceptions-escalated", SETTLEMENTS,
        "            await _escalate(conn, new, now=now, reminder_interval=reminder_interval)\n            # 7.",
        "            # 7.",
        t(RECONCILE, "test_every_line_is_matched_or_an_exception_with_its_evidence"),
        "every new settlement exception is put in front of a person",
    ),
    Mutation(
        "settlement-exception-once", SETTLEMENT_EXCEPTIONS_SQL,
        *in_query(SETTLEMENT_EXCEPTIONS_SQL, "record_line_exceptions",
                  "|| COALESCE(l.provider_line_id, l.line_no::text) || ':' || l.exception_kind,",
                  "|| COALESCE(l.provider_line_id, l.line_no::text) || ':' || l.exception_kind || :now::timestamptz::text,"),
        t(RECONCILE, "test_an_open_batch_read_again_takes_its_new_lines_and_keeps_its_exceptions_once"),
        "an exception found again (an open batch read again) raises no second escalation",
    ),
    Mutation(
        "settlement-missing-after-grace", SETTLEMENTS,
        "        covered_until = min(now - grace, last_day_ends)",
        "        covered_until = last_day_ends",
        t(RECONCILE, "test_payments_and_refunds_no_closed_batch_names_are_missing_after_the_grace_period"),
        "a payment is not called missing before the provider had time to settle it",
    ),
    Mutation(
        "settlement-missing-only-unnamed", SETTLEMENT_EXCEPTIONS_SQL,
        *in_query(SETTLEMENT_EXCEPTIONS_SQL, "record_missing_payments",
                  "AND NOT EXISTS (SELECT 1 FROM settlement_lines l WHERE l.attempt_id = a.attempt_id AND l.kind = 'charge')",
                  "AND (NOT EXISTS (SELECT 1 FROM settlement_lines l WHERE l.attempt_id = a.attempt_id AND l.kind = 'charge') OR TRUE)"),
        t(RECONCILE, "test_payments_and_refunds_no_closed_batch_names_are_missing_after_the_grace_period"),
        "a payment a batch named is never called missing",
    ),
    Mutation(
        "settlement-adyen-row-of-this-merchant", "libs/paycore/paycore/providers/adyen/settlements.py",
        '    if row["Merchant Account"] != merchant_account:\n        raise ValueError(f"a row of merchant account',
        '    if False:\n        raise ValueError(f"a row of merchant account',
        t("tests/providers/test_settlement_readers.py", "test_adyen_malformed_rows_and_another_merchant_accounts_row_are_bad_lines"),
        "a row of another merchant account in an Adyen report is never reconciled against this one's books",
    ),
    Mutation(
        "settlement-net-is-gross-less-fee", "libs/paycore/paycore/providers/settlement_csv.py",
        "    if net != gross - fee:\n",
        "    if False:\n",
        t("tests/providers/test_settlement_readers.py", "test_cardco_each_malformed_row_is_a_bad_line_with_its_number_and_the_next_rows_are_read"),
        "a row whose net is not its gross less its fee is misread or miswritten: a bad line, not money",
    ),
    # -- issue 26, the generated run's finds kept: guards of money no test needed before --------------
    Mutation(
        "mark-started-this-attempt", ATTEMPTS_SQL,
        "WHERE a.attempt_id = :attempt_id AND a.version = :version AND a.state = 'NotStarted'",
        "WHERE (a.attempt_id = :attempt_id OR TRUE) AND a.version = :version AND a.state = 'NotStarted'",
        t(REPO, "test_starting_an_attempt_starts_no_other_orders_attempt"),
        "starting one attempt starts no other (no key window stamped on a request never sent)",
    ),
    Mutation(
        "order-has-live-this-order", ATTEMPTS_SQL,
        *in_query(ATTEMPTS_SQL, "order_has_live", "WHERE order_id = :order_id AND", "WHERE (order_id = :order_id OR TRUE) AND"),
        t(REPO, "test_an_order_without_a_live_attempt_is_cancelled_outright_whatever_other_orders_have"),
        "an order is cancelled outright unless it has a live attempt of its own",
    ),
    Mutation(
        "order-payment-is-succeeded", ATTEMPTS_SQL,
        *in_query(ATTEMPTS_SQL, "succeeded_of_order", "AND state = 'Succeeded'", "AND (state = 'Succeeded' OR TRUE)"),
        t(REPO, "test_the_orders_payment_is_its_succeeded_attempt_never_a_failed_one"),
        "captures, cancels and refunds are of the order's Succeeded attempt, never a failed one",
    ),
    Mutation(
        "latest-attempt-of-this-customer", ATTEMPTS_SQL,
        *in_query(ATTEMPTS_SQL, "latest_of_customer", "AND customer_id = :customer_id", "AND (customer_id = :customer_id OR TRUE)"),
        t(REPO, "test_another_customer_never_sees_an_orders_attempt"),
        "the payment-status endpoint shows an order's attempt to its own customer only",
    ),
    Mutation(
        "payment-id-owner-of-this-account", ATTEMPTS_SQL,
        *in_query(ATTEMPTS_SQL, "payment_id_owner", "WHERE provider_account = :account AND", "WHERE (provider_account = :account OR TRUE) AND"),
        t(RECORD, "test_the_same_provider_payment_id_in_another_account_is_no_conflict"),
        "a provider payment id is another attempt's only within the same account",
    ),
    Mutation(
        "adyen-unsignable-item-unverified", "libs/paycore/paycore/providers/adyen/notifications.py",
        "    expected = item_signature(item, key)\n    if expected is None:\n        return False",
        "    expected = item_signature(item, key)\n    if expected is None:\n        return True",
        t("tests/unit/test_adyen_notifications_edges.py", "test_an_item_whose_fields_cannot_be_signed_never_verifies"),
        "an Adyen item with no signing string is never verified, whatever its hmacSignature says",
    ),
    Mutation(
        "adyen-refunded-only-by-a-refund", "libs/paycore/paycore/providers/adyen/notifications.py",
        "amount_refunded=value if is_refund else 0,",
        "amount_refunded=value if is_refund else 1,",
        t("tests/unit/test_adyen_notifications_edges.py", "test_only_a_refunds_notification_says_something_was_refunded"),
        "an Adyen authorisation never reads as money refunded outside paycore",
    ),
    Mutation(
        "stripe-capture-is-paycores", STRIPE_EVENTS,
        'if held.capture_reference is not None and (held.capture_method or "").startswith("manual"):',
        'if held.capture_reference is not None or (held.capture_method or "").startswith("manual"):',
        t("tests/unit/test_stripe_events_edges.py", "test_a_succeeded_intent_is_a_capture_only_when_paycore_captured_its_hold"),
        "a Stripe intent that succeeded ends a capture of paycore's only when paycore captured its hold",
    ),
    Mutation(
        "cardco-envelope-account-claimed", EVENTS,
        "said, accounts=said.accounts + ((account,) if account is not None else ()),",
        "said, accounts=said.accounts,",
        t("tests/unit/test_cardco_events_edges.py", "test_the_envelopes_account_and_mode_join_the_objects_as_statements_to_agree"),
        "a Cardco event's envelope account is a statement the evidence must agree with",
    ),
    Mutation(
        "failed-capture-keeps-the-hold", DOMAIN,
        "if current is OrderStatus.AUTHORIZED and target is OperationState.SUCCEEDED:",
        "if current is OrderStatus.AUTHORIZED or target is OperationState.SUCCEEDED:",
        t("tests/unit/test_decide_outcome.py", "test_an_orders_status_follows_its_refunds_and_its_hold"),
        "a capture or cancel that failed leaves its order Authorized: a failed capture never marks it Paid",
    ),
    Mutation(
        "deadline-instant-is-past", DOMAIN,
        "return escalation_deadline is None or now >= escalation_deadline",
        "return escalation_deadline is None or now > escalation_deadline",
        (*t("tests/unit/test_operation_rules.py", "test_decide_operation_step"),
         *t("tests/unit/test_decide_pass.py", "test_nothing_found_past_the_deadline_sends_nothing_and_escalates")),
        "at its deadline a live attempt or operation is escalated, not resent: the key's window may have closed",
    ),
    Mutation(
        "operation-answer-without-id-no-conflict", EVIDENCE_RULES,
        "if (reported_operation_id is not None and recorded_operation_id is not None",
        "if (reported_operation_id is None and recorded_operation_id is not None",
        t("tests/unit/test_evidence.py", "test_judge_operation"),
        "an answer that names no refund is judged by what it says, not as naming another refund",
    ),
    Mutation(
        "refundable-never-below-zero", DOMAIN,
        "refundable_minor=max(captured - refunded, 0))",
        "refundable_minor=max(captured - refunded, -1))",
        t("tests/unit/test_operation_rules.py", "test_headroom"),
        "a refund held against a capture that failed leaves nothing refundable, never a negative amount",
    ),
)
