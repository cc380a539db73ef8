"""The survivors of ``make mutate-generated`` that were read and judged, each with why.

A generated mutant that no test kills is either a missing test (write it: the mutant is then
killed and does not belong here) or a change nobody can observe. Those are listed here, keyed
by the file and the exact lines the mutant removes and adds (``diff``, as the report prints
it), so a judgement follows the code when lines move and lapses when the code changes.

Verdicts:

- ``equivalent``: the mutant behaves exactly as the original (the same rows, the same answer);
- ``unobservable``: it changes something no caller can see from outside (a log's wording, the
  order of two independent writes in one transaction), and a test of it would test the code's
  shape, not its behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Judged:
    file: str
    diff: str  # the report's "- old" / "+ new" lines
    verdict: str  # equivalent | unobservable
    why: str
    # SQL: the named query the mutant is in, where the same lines occur in several statements.
    query: str | None = None


EVIDENCE = "libs/paycore/paycore/evidence.py"
DOMAIN = "libs/paycore/paycore/domain.py"
ATTEMPTS = "libs/paycore/paycore/attempts.py"
SETTLEMENTS = "libs/paycore/paycore/settlements.py"
STRIPE_WIRE = "libs/paycore/paycore/providers/stripe/wire.py"
CARDCO_WIRE = "libs/paycore/paycore/providers/cardco/wire.py"
CARDCO_EVENTS = "libs/paycore/paycore/providers/cardco/events.py"
STRIPE_EVENTS = "libs/paycore/paycore/providers/stripe/events.py"
ADYEN_NOTIFICATIONS = "libs/paycore/paycore/providers/adyen/notifications.py"
ATTEMPTS_SQL = "libs/paycore/paycore/queries/payment_attempts.sql"
WRITER = "libs/paycore/paycore/writer.py"
CLOSE_NEVER_SENT_LEASE = (
    "the close's outcome does not depend on which worker writes it: the version and the state already "
    "refuse it once the endpoint started the attempt, and any worker that decided it decided the same "
    "NotApplied(never-sent); the lease only says who writes, so a close under a lease that lapsed, or "
    "by the same owner's other claim, is the same close, once (a second writer misses the version)")

JUDGED: tuple[Judged, ...] = (
    Judged(
        SETTLEMENTS,
        "- if covered_until <= covered_from:\n+ if covered_until < covered_from:",
        "equivalent",
        "both missing-row queries take the window half-open (first_sent_at >= :covered_from AND "
        "first_sent_at < :covered_until), so a window whose ends are equal finds nothing either way",
    ),
    *(Judged(
        CARDCO_WIRE,
        f"- amount_refunded: int = 0\n+ amount_refunded: int = {default}",
        "equivalent",
        "ProviderPayment is built in one place, parse_payment, which always passes amount_refunded "
        "(0 when the body has none): the dataclass default is never taken",
    ) for default in ("1", "-1")),
    Judged(
        EVIDENCE,
        '- _, account, environment = provider_account.rsplit(":", 2)\n'
        '+ _, account, environment = provider_account.rsplit(":", 3)',
        "equivalent",
        "a provider account is provider:account:environment, exactly two colons (the settings refuse "
        "any other: account_settings validates it), so splitting at most three times yields the same "
        "three parts",
    ),
    Judged(
        DOMAIN,
        "- raised.append(Escalation(EscalationReason.RESEND_REJECTED, detail, per_evidence=False))\n"
        "+ raised.append(Escalation(EscalationReason.RESEND_REJECTED, detail, per_evidence=True))",
        "equivalent",
        "a refused resend is an answer to a send, and a send's outcome is written with no evidence key "
        "(only notifications carry one, notifications.py), so the episode key is the same either way",
    ),
    Judged(
        DOMAIN,
        "- per_evidence=False))\n+ per_evidence=True))",
        "unobservable",
        "succeeded-after-cancel is raised only by the write that makes the attempt Succeeded, which "
        "happens once (a final state never changes), so either key opens exactly one episode; only "
        "the key's text would carry the notification's key",
    ),
    Judged(
        DOMAIN,
        "- order_held: bool = False  # the payment is a hold: the order is Authorized, not Paid\n"
        "+ order_held: bool = True  # the payment is a hold: the order is Authorized, not Paid",
        "equivalent",
        "order_held is read only when order_paid is set (writer.queue_success_effects), and the one "
        "Decision that sets order_paid (a payment's Succeeded) always passes order_held",
    ),
    Judged(
        DOMAIN,
        "- if room.capturable_minor == 0 or amount_minor != room.capturable_minor:\n"
        "+ if room.capturable_minor == -1 or amount_minor != room.capturable_minor:",
        "equivalent",
        "a headroom is never negative (the capturable amount is 0 or the whole authorized amount), "
        "so the first test is never true; and with a positive amount (refused before) a hold of 0 "
        "is refused by the second test anyway",
    ),
    Judged(
        DOMAIN,
        "- delay_s: float = 0.0\n+ delay_s: float = 1.0",
        "equivalent",
        "PassDecision's default delay is taken only by the gather steps (LOOK_UP, READ_HISTORY, "
        "CHECK_RESEND, LOOK_UP_ACTION), which read no delay; every step that schedules passes its own",
    ),
    Judged(
        DOMAIN,
        "- delay_s: float = 0.0\n+ delay_s: float = -1.0",
        "equivalent",
        "as the +1.0 mutant: the default is only taken by gather steps, which read no delay",
    ),
    Judged(
        DOMAIN,
        "- return PassDecision(Step.FINISH, max(delay_s, 0.0), result=result)\n"
        "+ return PassDecision(Step.FINISH, max(delay_s, -1.0), result=result)",
        "equivalent",
        "no caller of _finish passes a negative delay (an expired action is classified Unknown by "
        "kind_of before action_delay runs), and a due time in the past is due now either way",
    ),
    Judged(
        ATTEMPTS,
        "- written: bool = False\n+ written: bool = True",
        "equivalent",
        "OutcomeResult is built in one place, which always passes written= explicitly",
    ),
    Judged(
        ATTEMPTS,
        "- if current.version != attempt.version or current.state is not AttemptState.NOT_STARTED:\n"
        "+ if current.version != attempt.version and current.state is not AttemptState.NOT_STARTED:",
        "equivalent",
        "a NotStarted attempt's version moves only with its state (mark_started, close_never_sent; "
        "a lease claim keeps the version), so for it the two tests are true together or not at all",
    ),
    Judged(
        ATTEMPTS,
        "- if pid is not None and pid != attempt.provider_payment_id:\n"
        "+ if pid is not None or pid != attempt.provider_payment_id:",
        "equivalent",
        "the test only skips a lookup: the owner query excludes the attempt itself and binds NULL to "
        "nothing, so for no id or the attempt's own id it answers no owner either way",
    ),
    Judged(
        ATTEMPTS,
        "- MAX_REAPPLY = 5\n+ MAX_REAPPLY = 6",
        "unobservable",
        "a tuning bound: what is guaranteed (and tested, test_continuous_status_churn_exhausts_the_"
        "bounded_retries) is that churn ends in OutcomeNotConfirmed after a bounded number of tries",
    ),
    Judged(
        ATTEMPTS,
        "- MAX_REAPPLY = 5\n+ MAX_REAPPLY = 4",
        "unobservable",
        "as MAX_REAPPLY = 6: the bound's exact value is tuning, its existence is tested",
    ),
    Judged(
        SETTLEMENTS,
        "- PROGRESS_EVERY = 100_000  # lines between two progress reports of a long batch\n"
        "+ PROGRESS_EVERY = 100001  # lines between two progress reports of a long batch",
        "unobservable",
        "a cadence of progress reports: that a long batch reports its progress every PROGRESS_EVERY lines "
        "is tested (test_a_long_batch_reports_its_progress), the number is tuning",
    ),
    Judged(
        SETTLEMENTS,
        "- PROGRESS_EVERY = 100_000  # lines between two progress reports of a long batch\n"
        "+ PROGRESS_EVERY = 99999  # lines between two progress reports of a long batch",
        "unobservable",
        "as PROGRESS_EVERY = 100001",
    ),
    Judged(
        SETTLEMENTS,
        "- self.payout_lines += 1\n+ self.payout_lines += 2",
        "equivalent",
        "payout_lines is only ever read for being non-zero (a batch that pays itself out must net to zero)",
    ),
    Judged(
        SETTLEMENTS,
        '- key_suffix=f"unbalanced:{content_sha256[:16]}",\n'
        '+ key_suffix=f"unbalanced:{content_sha256[: 17]}",',
        "unobservable",
        "the length of a digest in an exception's key: any length keeps one key per batch content",
    ),
    Judged(
        SETTLEMENTS,
        '- key_suffix=f"unbalanced:{content_sha256[:16]}",\n'
        '+ key_suffix=f"unbalanced:{content_sha256[: 15]}",',
        "unobservable",
        "as the 17-character key suffix",
    ),
    Judged(
        SETTLEMENTS,
        "- return hashlib.sha256(orjson.dumps([bad.reason, dict(bad.raw)])).hexdigest()[:12]\n"
        "+ return hashlib.sha256(orjson.dumps([bad.reason, dict(bad.raw)])).hexdigest()[: 13]",
        "unobservable",
        "the length of a bad row's digest in its exception key (the line number is in the key too)",
    ),
    Judged(
        SETTLEMENTS,
        "- return hashlib.sha256(orjson.dumps([bad.reason, dict(bad.raw)])).hexdigest()[:12]\n"
        "+ return hashlib.sha256(orjson.dumps([bad.reason, dict(bad.raw)])).hexdigest()[: 11]",
        "unobservable",
        "as the 13-character digest",
    ),
    Judged(
        SETTLEMENTS,
        "- if covered_until <= covered_from:\n+ if covered_until < covered_from:",
        "equivalent",
        "an empty window [t, t) selects nothing in record_missing_payments or _operations either way",
    ),
    Judged(
        SETTLEMENTS,
        "- if new:\n+ if not new:",
        "unobservable",
        "guards a warning log line only; the count returned and the exceptions recorded are tested",
    ),
    Judged(
        STRIPE_WIRE,
        "- has_payment_error: bool = False\n+ has_payment_error: bool = True",
        "equivalent",
        "a dataclass default no caller uses: parse_intent, the only constructor, always passes "
        "has_payment_error from the JSON",
    ),
    Judged(
        STRIPE_WIRE,
        "- created: int = 0\n+ created: int = 1",
        "equivalent",
        "a dataclass default no caller uses: parse_refund, the only constructor, always passes created "
        "(its own default 0 is tested by test_stripe_wire_edges)",
    ),
    Judged(
        STRIPE_WIRE,
        "- created: int = 0\n+ created: int = -1",
        "equivalent",
        "as the line above: parse_refund always passes created",
    ),
    Judged(
        CARDCO_EVENTS,
        "- event: dict[str, Any] = dataclasses.field(repr=False, compare=False)\n"
        "+ event: dict[str, Any] = dataclasses.field(repr=False, compare=True)",
        "equivalent",
        "no caller compares two OperationEvents (the intake deduplicates a delivery by its key, and "
        "operation_notification reads the fields one by one), so equality's fields change nothing",
    ),
    Judged(
        STRIPE_EVENTS,
        "- return VerifiedDelivery(account, did, replay, operation, key=operation.event_id or did,\n"
        "+ return VerifiedDelivery(account, did, replay, operation, key=operation.event_id and did,",
        "equivalent",
        "a Stripe event always has an id (the envelope refuses one without an evt_ id: invalid-id), "
        "and delivery_id reads that same id from the body, so either operand is the same string",
    ),
    Judged(
        STRIPE_EVENTS,
        "- raw_ts = timestamps[0]\n+ raw_ts = timestamps[ -1]",
        "equivalent",
        "reached only with exactly one t= item (the line above returns None for any other count), "
        "so the first is the last",
    ),
    Judged(
        ADYEN_NOTIFICATIONS,
        "- for item, by_previous in zip(items, previous_key, strict=True))\n"
        "+ for item, by_previous in zip(items, previous_key, strict=False))",
        "equivalent",
        "previous_key is built from items one for one a few lines above, so the two always have the "
        "same length and zip never has anything to be strict about",
    ),
    Judged(
        ADYEN_NOTIFICATIONS,
        "- return parse_item(live, items[0])\n+ return parse_item(live, items[ -1])",
        "equivalent",
        "reached only when the stored batch holds exactly one item (len(items) != 1 is refused just "
        "above), so the first item is the last",
    ),
    Judged(
        ADYEN_NOTIFICATIONS,
        "- return parse_operation_item(live, items[0])\n+ return parse_operation_item(live, items[ -1])",
        "equivalent",
        "as parse_notification's: exactly one item by the check above",
    ),
    Judged(
        ADYEN_NOTIFICATIONS,
        '- return item_key(items[0]["NotificationRequestItem"])\n'
        '+ return item_key(items[ -1]["NotificationRequestItem"])',
        "equivalent",
        "reached only for a list of exactly one item (the line above returns None otherwise)",
    ),
    Judged(
        ATTEMPTS_SQL,
        "- ORDER BY attempt_number DESC\n+ ",
        "equivalent",
        "an order has at most one Succeeded attempt (the attempt that succeeds marks its order paid in "
        "the same transaction, under the order's lock, and a paid order takes no new attempt; a final "
        "state never changes), so LIMIT 1 has one row to choose from",
        query="succeeded_of_order",
    ),
    Judged(
        ATTEMPTS_SQL,
        "- WHERE provider_account = :account AND (client_reference = :reference OR provider_payment_id = "
        ":payment_id)\n"
        "+ WHERE provider_account = :account AND ((client_reference = :reference OR provider_payment_id = "
        ":payment_id) OR TRUE)",
        "equivalent",
        "find_by_reference_and_payment_id picks each identity's attempt out of the rows by comparing "
        "client_reference and provider_payment_id itself, so more rows of the same account change "
        "only the work done, not the two attempts returned",
        query="by_reference_or_payment_id",
    ),
    Judged(
        ATTEMPTS_SQL,
        "- WHERE provider_account = :account AND provider_payment_id = :payment_id "
        "AND attempt_id <> :attempt_id\n"
        "+ WHERE provider_account = :account AND provider_payment_id = :payment_id "
        "AND (attempt_id <> :attempt_id OR TRUE)",
        "equivalent",
        "judge_outcome asks for an owner only when the id differs from the one this attempt recorded, so "
        "this attempt's own row never holds it and excluding it changes no result",
        query="payment_id_owner",
    ),
    Judged(
        ATTEMPTS_SQL,
        "- ORDER BY e.position\n+ ",
        "equivalent",
        "the events are one attempt row cross-joined with one unnest: a join with no condition is always "
        "a nested loop, and either way round it yields the function's rows in their ordinality, so the "
        "inserted events are numbered in that order with or without the ORDER BY (kept: SQL promises "
        "no order without it)",
    ),
    Judged(
        ATTEMPTS_SQL,
        "- WHERE attempt_id = :attempt_id AND version = :version AND state = :state\n"
        "+ WHERE attempt_id = :attempt_id AND version = :version AND (state = :state OR TRUE)",
        "equivalent",
        "every statement that changes an attempt's state also adds 1 to its version, and the writer binds "
        "the state and the version of one read of the row (writer.execute: attempt.state, "
        "attempt.version), so a row still at :version is still in :state; the state is the version's "
        "second spelling, kept for a reader of the statement (apply_outcome and close_as_not_charged)",
    ),
    Judged(
        ATTEMPTS_SQL,
        "- WHERE attempt_id = :attempt_id AND version = :version AND state = 'NotStarted'\n"
        "+ WHERE (attempt_id = :attempt_id OR TRUE) AND version = :version AND state = 'NotStarted'",
        "equivalent",
        "the next line asks for this claim's lease token, and every claim (claim, claim_due) gives each "
        "attempt a fresh uuid4 of its own, so only this attempt's row carries it",
        query="close_never_sent",
    ),
    Judged(
        ATTEMPTS_SQL,
        "- WHERE attempt_id = :attempt_id AND version = :version AND state = 'NotStarted'\n"
        "+ WHERE attempt_id = :attempt_id AND (version = :version OR TRUE) AND state = 'NotStarted'",
        "equivalent",
        "an attempt is NotStarted only at the version it was inserted with (claims keep the version, "
        "every state change adds 1 and leaves NotStarted for good), so state = 'NotStarted' already "
        "refuses the close after the endpoint's start won the race; the version is its second spelling",
        query="close_never_sent",
    ),
    Judged(
        ATTEMPTS_SQL,
        "- WHERE attempt_id = :attempt_id AND version = :version AND state = 'NotStarted'\n"
        "+ WHERE attempt_id = :attempt_id AND version = :version AND (state = 'NotStarted' OR TRUE)",
        "equivalent",
        "the worker read the attempt NotStarted at :version, and the endpoint's start (the only way out "
        "of NotStarted besides this close) adds 1 to the version, so the version alone refuses the close "
        "after a start; the state is its second spelling",
        query="close_never_sent",
    ),
    Judged(
        ATTEMPTS_SQL,
        "- AND recovery_owner = :owner AND lease_token = :token AND lease_expires_at > :now\n"
        "+ AND (recovery_owner = :owner OR TRUE) AND lease_token = :token AND lease_expires_at > :now",
        "equivalent",
        "the lease token beside it is a fresh uuid4 per claim, held by the one worker that claimed: a row "
        "carrying this token is this owner's; the owner is named for the reader and the logs",
        query="close_never_sent",
    ),
    Judged(
        ATTEMPTS_SQL,
        "- AND recovery_owner = :owner AND lease_token = :token AND lease_expires_at > :now\n"
        "+ AND recovery_owner = :owner AND (lease_token = :token OR TRUE) AND lease_expires_at > :now",
        "equivalent",
        CLOSE_NEVER_SENT_LEASE,
        query="close_never_sent",
    ),
    Judged(
        ATTEMPTS_SQL,
        "- AND recovery_owner = :owner AND lease_token = :token AND lease_expires_at > :now\n"
        "+ AND recovery_owner = :owner AND lease_token = :token AND (lease_expires_at > :now OR TRUE)",
        "equivalent",
        CLOSE_NEVER_SENT_LEASE,
        query="close_never_sent",
    ),
    Judged(
        WRITER,
        "- finished: bool = False\n+ finished: bool = True",
        "equivalent",
        "a dataclass default no caller uses: execute, Executed's only constructor, always passes finished",
    ),
    Judged(
        WRITER,
        "- finished = False\n+ finished = True",
        "equivalent",
        "execute's only reader of finished is escalate_and_finish, whose decision (decide_escalation) "
        "always has finish_after_s and whose call always has a lease, so the initial value is always "
        "replaced by leases.finish's answer; every other caller ignores it",
    ),
)
