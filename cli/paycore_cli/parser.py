"""The ``paycore`` command's arguments, help texts and handlers."""

from __future__ import annotations

import argparse

from paycore.account_settings import PROVIDERS
from paycore.providers.registry import DEFAULT_PACKAGE
from paycore_cli.arguments import (
    admin_port_number,
    duration,
    fraction,
    operator_handle,
    port_number,
    positive_int,
)
from paycore_cli.common import ADMIN_PORTS, DEFAULT_PORTS, LOOPBACK, UP_ADMIN, UP_SERVICES, WORKERS
from paycore_cli.development import cmd_chaos, cmd_up
from paycore_cli.health import cmd_health
from paycore_cli.inspect_commands import (
    cmd_attempts_show,
    cmd_escalations_list,
    cmd_escalations_show,
    cmd_notifications_unmatched,
    cmd_outbox_dead_letters,
)
from paycore_cli.operation_commands import add_operation_commands
from paycore_cli.operator_accounts import add_operator_account_commands  # i13-auth
from paycore_cli.operator_commands import (
    cmd_accounts,
    cmd_actions,
    cmd_attempts_close,
    cmd_escalations,
    cmd_escalations_resolve_conflict,
    cmd_notifications_attach,
    cmd_outbox,
)
from paycore_cli.serve import cmd_migrate, cmd_run, cmd_serve
from paycore_cli.settlement_commands import add_settlement_commands
from paycore_cli.tokens import cmd_token


def _metrics_flags(process: argparse.ArgumentParser, default: str) -> None:
    process.add_argument("--metrics-port", type=admin_port_number, default=None,
                         help="serve /metrics and /healthz on --metrics-host:PORT; 0 serves none (default "
                              f"$PAYCORE_METRICS_PORT, else {default})")
    process.add_argument("--metrics-host", default=None,
                         help=f"metrics address (default $PAYCORE_METRICS_HOST, else {LOOPBACK})")


def _page_flags(listing: argparse.ArgumentParser) -> None:
    listing.add_argument("--limit", type=positive_int, default=50,
                         help="at most this many per page (default %(default)s)")
    listing.add_argument("--cursor", default=None, metavar="CURSOR",
                         help="the next page: the cursor the previous page printed")
    listing.add_argument("--json", action="store_true",
                         help="print one JSON document for scripts: items and next_cursor")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="paycore",
        description="Start and operate paycore. Settings come from PAYCORE_* environment variables; "
                    "local state lives in PAYCORE_HOME, else in the nearest .paycore/ of the current "
                    "directory or its parents.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    started = "; ".join(f"{name} ({text})" for name, text in UP_SERVICES.items())
    up = commands.add_parser(
        "up", help="start everything locally (what `make run` runs); Ctrl-C stops it",
        description="Start embedded PostgreSQL and Tansu unless PAYCORE_DATABASE_URL / "
                    "PAYCORE_KAFKA_BOOTSTRAP are set, apply migrations, then run these "
                    f"{len(UP_SERVICES)} services as child processes until Ctrl-C: {started}. "
                    "Local state (the JWT secret, embedded PostgreSQL's data) goes to PAYCORE_HOME, "
                    "else the nearest .paycore/ of this directory or its parents, else a new "
                    ".paycore/ here. Should up be killed, a guard stops the embedded PostgreSQL.",
    )
    for name in UP_SERVICES:
        what = "port" if name not in WORKERS else "metrics port"
        up.add_argument(f"--{name}-port", type=port_number, default=DEFAULT_PORTS[name],
                        help=f"the {what} of {name} on 127.0.0.1 (default %(default)s)")
        if name in UP_ADMIN:
            up.add_argument(f"--{name}-metrics-port", type=port_number, default=ADMIN_PORTS[name],
                            help=f"the admin port (/metrics, /healthz) of {name} on 127.0.0.1 "
                                 "(default %(default)s)")
    up.set_defaults(handler=cmd_up)

    mig = commands.add_parser(
        "migrate", help="apply database migrations",
        description="Apply missing migrations to PAYCORE_DATABASE_URL (or to embedded PostgreSQL "
                    "under .paycore/pg when it is unset). Safe to run concurrently and repeatedly.",
    )
    mig.set_defaults(handler=cmd_migrate)

    serve = commands.add_parser(
        "serve", help="run one HTTP service in the foreground",
        description="Run one service with uvicorn. The sandbox listens on loopback only "
                    "(unless --allow-network, for a development container network).",
    )
    services = serve.add_subparsers(dest="service", required=True, metavar="SERVICE")
    for name, text in (
        ("checkout", "the checkout API"),
        ("sandbox", "the provider sandbox: Cardco's, Stripe's and Adyen's wire (loopback only)"),
        ("webhooks", "the webhook intake: /webhooks/<provider> for each configured provider"),
        ("console", "the operator console (pages and its JSON API)"),
    ):
        sub = services.add_parser(name, help=text, description=f"Serve {text}.")
        sub.add_argument("--host", default=None,
                         help="address to bind (default " + (f"{LOOPBACK})" if name == "sandbox"
                                                             else f"$PAYCORE_HOST, else {LOOPBACK})"))
        sub.add_argument("--port", type=port_number, default=None,
                         help=f"port to bind (default {DEFAULT_PORTS[name]})")
        if name != "sandbox":  # the sandbox is a development fake: no admin port
            _metrics_flags(sub, str(ADMIN_PORTS[name]))
        if name in ("checkout", "webhooks"):
            sub.add_argument("--workers", type=positive_int, default=1, metavar="N",
                             help="serve from N processes sharing the port; one admin port aggregates "
                                  "their metrics (default %(default)s; see docs/operations.md, Scale)")
        if name == "sandbox":
            # Development only: a container network where other services reach it by name.
            sub.add_argument("--allow-network", action="store_true",
                             help="bind a non-loopback --host (development only: e.g. a docker compose "
                                  "network; the sandbox accepts its built-in development keys)")
        sub.set_defaults(handler=cmd_serve, allow_network=False)

    run = commands.add_parser("run", help="run a background worker",
                              description="Run a background worker in the foreground.")
    workers = run.add_subparsers(dest="worker", required=True, metavar="WORKER")
    rec = workers.add_parser(
        "recovery", help="resolve stalled and Unknown payment attempts",
        description="Worker: the recovery loop (leases, lookups, same-key resends inside the key "
                    "window, escalations) and the reminder job. Any number may run at once. Timings "
                    "come from PAYCORE_RECOVERY_* variables.",
    )
    _metrics_flags(rec, str(ADMIN_PORTS["recovery"]))
    rec.add_argument("--owner", default=None, help="this instance's name in leases (default host-pid-random)")
    rec.set_defaults(handler=cmd_run)
    disp = workers.add_parser(
        "dispatcher", help="relay outbox rows to Kafka in per-attempt order",
        description="Worker: the outbox relay (per-attempt order, backoff, dead letters and their "
                    "escalations) and the retention job. Any number may run at once. Needs "
                    "PAYCORE_DATABASE_URL and PAYCORE_KAFKA_BOOTSTRAP; see docs/dispatcher.md.",
    )
    disp.add_argument("--relays", type=positive_int, default=1, help="relay loops in this process")
    _metrics_flags(disp, str(ADMIN_PORTS["dispatcher"]))
    disp.add_argument("--retention-every", type=float, default=3600.0, metavar="SECONDS",
                      help="run the retention job this often (default %(default)s)")
    disp.add_argument("--no-retention", action="store_true", help="do not run the retention job")
    disp.set_defaults(handler=cmd_run)
    cons = workers.add_parser(
        "consumer", help="a demo downstream consumer of payments.effects",
        description="Worker: a reference consumer on the consumer helper (inbox deduplication, "
                    "offsets committed after the database transaction), writing demo_fulfillments or "
                    "demo_emails.",
    )
    cons.add_argument("consumer", choices=["fulfillment", "email"])
    cons.add_argument("--instance-id", default=None, help="static group membership id (group.instance.id)")
    _metrics_flags(cons, f'{ADMIN_PORTS["consumer-fulfillment"]} (fulfillment), '
                         f'{ADMIN_PORTS["consumer-email"]} (email)')
    cons.set_defaults(handler=cmd_run)
    alerts = workers.add_parser(
        "alerts", help="deliver ops.alerts to PAYCORE_ALERT_WEBHOOK_URL",
        description="Worker: deliver each operator alert once to the configured HTTP endpoint "
                    "(PAYCORE_ALERT_FORMAT=slack or pagerduty), retrying with backoff.",
    )
    alerts.add_argument("--instance-id", default=None, help="static group membership id (group.instance.id)")
    _metrics_flags(alerts, str(ADMIN_PORTS["alerts"]))
    alerts.set_defaults(handler=cmd_run)
    # -- incident grouping (issue 14) --
    incidents = workers.add_parser(
        "incidents", help="group bursts of ops.alerts into incidents on the pages topic",
        description="Worker (faust): read ops.alerts and write PAYCORE_KAFKA_PAGES_TOPIC -- each alert "
                    "passed through, except that PAYCORE_INCIDENTS_THRESHOLD alerts of one (provider "
                    "account, reason) within PAYCORE_INCIDENTS_WINDOW_S open one incident page and fold "
                    "the rest until PAYCORE_INCIDENTS_QUIET_S pass without one. `paycore run alerts` "
                    "delivers the pages with PAYCORE_ALERT_INCIDENT_GROUPING=true.",
    )
    _metrics_flags(incidents, str(ADMIN_PORTS["incidents"]))
    incidents.set_defaults(handler=cmd_run)
    # -- end incident grouping --

    health = commands.add_parser(
        "health", help="probe this container's service: exit 0 when its /healthz answers 200",
        description="The container health check (the image's HEALTHCHECK): GET "
                    "http://127.0.0.1:$PAYCORE_HEALTH_PORT/healthz and exit 0 on 200, 1 otherwise, with "
                    "the reason on stderr. Without PAYCORE_HEALTH_PORT, the port of the `paycore serve` "
                    "or `paycore run` this container runs (read from its main process's command line: "
                    "a service's port, a worker's admin port, the sandbox's /_sandbox/clock), else 8000.")
    health.add_argument("--url", default=None, help="probe this URL instead")
    health.add_argument("--timeout", type=duration, default=3.0, metavar="SECONDS",
                        help="give up after this long (default %(default)s)")
    health.set_defaults(handler=cmd_health)

    token = commands.add_parser(
        "token", help="print a local development JWT for a customer",
        description="Print an HS256 JWT (sub, iat, exp) signed with PAYCORE_JWT_SECRET, or with the "
                    "jwt_secret `paycore up` generated in PAYCORE_HOME or the nearest .paycore/ of "
                    "this directory or its parents. Never generates a secret: without one it fails.",
    )
    token.add_argument("customer_id", metavar="CUSTOMER_ID", help="the token's subject (sub)")
    token.add_argument("--ttl", type=positive_int, default=3600,
                       help="lifetime in seconds (default %(default)s)")
    token.set_defaults(handler=cmd_token)

    esc = commands.add_parser(
        "escalations", help="list, show, acknowledge or resolve escalation episodes",
        description="Operator tools for escalation episodes. Needs PAYCORE_DATABASE_URL.")
    esc_cmds = esc.add_subparsers(dest="escalation_command", required=True, metavar="ACTION")
    esc_list = esc_cmds.add_parser(
        "list", help="open episodes, oldest first",
        description="Escalation episodes, open ones first, oldest raised first (--all adds resolved "
                    "ones after them): id, status, reason, provider account, raised, attempt.")
    esc_list.add_argument("--reason", default=None, metavar="REASON", help="only this reason, e.g. deadline")
    esc_list.add_argument("--account", default=None, metavar="PROVIDER_ACCOUNT",
                          help="only this provider account, e.g. cardco:acct_store:live")
    acked = esc_list.add_mutually_exclusive_group()
    acked.add_argument("--acknowledged", dest="acknowledged", action="store_const", const=True, default=None,
                       help="only episodes a person has acknowledged")
    acked.add_argument("--unacknowledged", dest="acknowledged", action="store_const", const=False,
                       help="only episodes nobody has acknowledged")
    esc_list.add_argument("--all", action="store_true", help="resolved episodes too (after the open ones)")
    _page_flags(esc_list)
    esc_list.set_defaults(handler=cmd_escalations_list)
    esc_show = esc_cmds.add_parser(
        "show", help="one episode, its detail and the operator actions on it",
        description="One escalation episode: its schedule, its detail (identifiers only) and every "
                    "operator action on it, newest first.")
    esc_show.add_argument("escalation_id", type=positive_int, metavar="ESCALATION_ID")
    esc_show.add_argument("--json", action="store_true", help="print one JSON document for scripts")
    esc_show.set_defaults(handler=cmd_escalations_show)
    for action, text in (("ack", "a person has seen it: reset the reminder schedule"),
                         ("resolve", "the condition has ended: close the episode (changes no attempt)")):
        sub = esc_cmds.add_parser(action, help=text, description=text)
        sub.add_argument("escalation_id", type=positive_int, metavar="ESCALATION_ID")
        sub.add_argument("--operator", required=True, type=operator_handle, metavar="NAME",
                         help="who is acting: an operator handle (recorded in operator_actions)")
        sub.add_argument("--reason", required=action == "resolve", default=None, metavar="TEXT",
                         help="why (recorded)" + ("" if action == "resolve" else "; optional"))
        sub.add_argument("--json", action="store_true", help="print the recorded action as JSON")
        sub.set_defaults(handler=cmd_escalations)

    box = commands.add_parser(
        "outbox", help="operate on dead-lettered outbox rows; retention",
        description="Operator tools for the outbox (docs/dispatcher.md). Needs PAYCORE_DATABASE_URL.")
    box_cmds = box.add_subparsers(dest="outbox_command", required=True, metavar="ACTION")
    for action, text in (("requeue", "put a dead-lettered row back to pending; it is delivered before "
                                     "the rows after it"),
                         ("skip", "give up on a dead-lettered row so the rows after it are delivered")):
        sub = box_cmds.add_parser(action, help=text, description=text)
        sub.add_argument("message_id", type=positive_int, metavar="MESSAGE_ID")
        sub.add_argument("--operator", required=True, type=operator_handle, metavar="NAME",
                         help="who is deciding: an operator handle (recorded in operator_actions)")
        sub.add_argument("--reason", required=True, metavar="TEXT", help="why (recorded)")
        sub.add_argument("--json", action="store_true", help="print the recorded action as JSON")
        sub.set_defaults(handler=cmd_outbox)
    dead = box_cmds.add_parser(
        "dead-letters", help="rows the dispatcher gave up on, oldest first",
        description="Dead-lettered outbox rows waiting for requeue or skip, oldest first: message, kind, "
                    "tries, attempt, open escalation, last error.")
    dead.add_argument("--kind", default=None, metavar="KIND", help="only this kind, e.g. order-confirmation")
    _page_flags(dead)
    dead.set_defaults(handler=cmd_outbox_dead_letters)
    purge = box_cmds.add_parser("purge", help="delete dispatched rows past the replay horizon, keeping "
                                              "their dedup keys")
    purge.add_argument("--older-than", type=float, default=None, metavar="SECONDS",
                       help="horizon (default PAYCORE_OUTBOX_RETENTION_S)")
    purge.set_defaults(handler=cmd_outbox)

    notes = commands.add_parser("notifications", help="operate on stored provider notifications",
                                description="Operator tools for stored provider notifications.")
    note_cmds = notes.add_subparsers(dest="notification_command", required=True, metavar="ACTION")
    attach = note_cmds.add_parser(
        "attach", help="apply a stored unmatched notification to its attempt",
        description="Authorised reconciliation: apply a stored unmatched notification (by its event id "
                    "in payment_attempt_events) to an attempt through the normal conditional transition, "
                    "and resolve its unmatched escalation. Needs PAYCORE_DATABASE_URL.",
    )
    attach.add_argument("event_id", type=positive_int, metavar="EVENT_ID")
    attach.add_argument("attempt_id", metavar="ATTEMPT_ID")
    attach.add_argument("--operator", required=True, type=operator_handle, metavar="NAME",
                        help="who is attaching it: an operator handle (recorded in history and in "
                             "operator_actions)")
    attach.add_argument("--reason", required=True, metavar="TEXT",
                        help="why, e.g. the corrected reference (recorded)")
    attach.add_argument("--json", action="store_true", help="print the recorded action as JSON")
    attach.set_defaults(handler=cmd_notifications_attach)
    unmatched = note_cmds.add_parser(
        "unmatched", help="stored notifications no attempt matched, oldest first",
        description="Stored provider notifications that matched no attempt and were not attached since, "
                    "oldest first, by their identifiers, with their open escalation.")
    _page_flags(unmatched)
    unmatched.set_defaults(handler=cmd_notifications_unmatched)

    accts = commands.add_parser(
        "accounts", help="the registered provider-account settings every service must match",
        description="Operator tools for provider accounts. The database's row is the one source of truth "
                    "for an account's settings; a service configured otherwise refuses to start. "
                    "Needs PAYCORE_DATABASE_URL.")
    acct_cmds = accts.add_subparsers(dest="accounts_command", required=True, metavar="ACTION")
    acct_list = acct_cmds.add_parser("list", help="the registered accounts and their settings")
    acct_list.set_defaults(handler=cmd_accounts)
    acct_apply = acct_cmds.add_parser(
        "apply", help="make this configuration the registered one (recorded)",
        description="Register, or change, each configured provider account (PAYCORE_CARDCO_*, "
                    "PAYCORE_ACCOUNTS_FILE) to this configuration, as one recorded operator action per "
                    "changed account. Attempts already Started keep the deadline they were stamped with; "
                    "every service must then be restarted with the same settings.")
    acct_apply.add_argument("--account", default=None, metavar="PROVIDER_ACCOUNT",
                            help="only this one, e.g. cardco:acct_store:live (default: every configured one)")
    acct_apply.add_argument("--operator", required=True, type=operator_handle, metavar="NAME",
                            help="who is changing it (recorded)")
    acct_apply.add_argument("--reason", required=True, metavar="TEXT", help="why (recorded)")
    acct_apply.set_defaults(handler=cmd_accounts)

    chaos = commands.add_parser(
        "chaos", help="the whole system under load, faults, kills and a database crash; then the invariants",
        description="Start every service on embedded PostgreSQL and the local broker, drive storefront "
                    "clients through them while the sandbox injects faults and services and the database "
                    "are killed and restarted, let recovery settle, and check every money invariant against "
                    "the sandbox's ledger and the database. Prints the table and writes a JSON report and a "
                    "PNG timeline; exits 1 if any check is broken or the run failed. Development only "
                    "(docs/chaos.md).")
    chaos.add_argument("--orders", type=positive_int, default=2000,
                       help="orders in all (default %(default)s)")
    chaos.add_argument("--clients", type=positive_int, default=16,
                       help="concurrent storefront clients (default %(default)s)")
    chaos.add_argument("--duration", type=duration, default=None, metavar="SECONDS",
                       help="end the load after this long even if orders remain (default: when all are done)")
    chaos.add_argument("--fault-rate", type=fraction, default=0.3,
                       help="share of provider requests and webhook events a fault hits "
                            "(default %(default)s)")
    chaos.add_argument("--kills", type=int, default=3, choices=range(0, 21), metavar="N",
                       help="SIGKILL and restart each service kind N times (default %(default)s)")
    chaos.add_argument("--seed", type=int, default=1, help="the plan's seed (default %(default)s)")
    chaos.add_argument("--provider", choices=PROVIDERS, default=DEFAULT_PACKAGE.name,
                       help="the provider the run configures, in the sandbox's dialect for it "
                            "(default %(default)s)")
    chaos.add_argument("--no-db-kill", action="store_true", help="do not kill -9 the PostgreSQL postmaster")
    chaos.add_argument("--settle-within", type=duration, default=240.0, metavar="SECONDS",
                       help="how long recovery may take to settle after the faults stop "
                            "(default %(default)s)")
    chaos.add_argument("--out", default=None, metavar="DIR",
                       help="where runs are written (default .paycore/chaos)")
    chaos.set_defaults(handler=cmd_chaos)

    acts = commands.add_parser(
        "actions", help="show the record of operator actions",
        description="Operator tools: the append-only record of who did what (operator_actions). "
                    "Needs PAYCORE_DATABASE_URL.")
    act_cmds = acts.add_subparsers(dest="actions_command", required=True, metavar="ACTION")
    listing = act_cmds.add_parser(
        "list", help="recorded operator actions, newest first",
        description="Recorded operator actions matching every given filter, newest first: id, time, "
                    "operator, action, target, reason (--json adds the state before and after).")
    listing.add_argument("--attempt", default=None, metavar="ATTEMPT_ID", help="actions on this attempt")
    listing.add_argument("--escalation", type=positive_int, default=None, metavar="ESCALATION_ID",
                         help="actions on this escalation episode")
    listing.add_argument("--operator", type=operator_handle, default=None, metavar="NAME",
                         help="actions by this operator")
    listing.add_argument("--limit", type=positive_int, default=50,
                         help="at most this many (default %(default)s)")
    listing.add_argument("--json", action="store_true", help="print JSON for machines")
    listing.set_defaults(handler=cmd_actions)

    # -- issue 13: the operator actions that change attempts (paycore.dead_ends, paycore.conflicts) --
    conflict = esc_cmds.add_parser(
        "resolve-conflict", help="an identity or provider-id conflict: choose who owns the payment",
        description="Resolve an open identity-conflict or provider-id-conflict episode by choosing which "
                    "attempt owns the provider payment: its stored notification is applied to that attempt "
                    "through the normal conditional transition (refused if the evidence rules disagree), "
                    "or --neither, which only closes the episode. Recorded in operator_actions. "
                    "Needs PAYCORE_DATABASE_URL.")
    conflict.add_argument("escalation_id", type=positive_int, metavar="ESCALATION_ID")
    owner = conflict.add_mutually_exclusive_group(required=True)
    owner.add_argument("--owner", default=None, metavar="ATTEMPT_ID",
                       help="the attempt that owns the provider payment (one the episode names)")
    owner.add_argument("--neither", action="store_true", help="no attempt owns it: close the episode only")
    conflict.add_argument("--operator", required=True, type=operator_handle, metavar="NAME",
                          help="who is deciding: an operator handle (recorded in operator_actions)")
    conflict.add_argument("--reason", required=True, metavar="TEXT", help="why (recorded)")
    conflict.add_argument("--json", action="store_true", help="print the recorded action as JSON")
    conflict.set_defaults(handler=cmd_escalations_resolve_conflict)

    attempts = commands.add_parser(
        "attempts", help="inspect or operate on payment attempts",
        description="Operator tools for payment attempts. Needs PAYCORE_DATABASE_URL.")
    attempt_cmds = attempts.add_subparsers(dest="attempts_command", required=True, metavar="ACTION")
    attempt_show = attempt_cmds.add_parser(
        "show", help="one attempt: its order, deadlines, lease, history, outbox, escalations, actions",
        description="Everything about one attempt: the row (never the request body's values), its order, "
                    "the append-only history as a timeline, the notifications matched to it, its outbox "
                    "rows, its escalations and every operator action on it.")
    attempt_show.add_argument("attempt_id", metavar="ATTEMPT_ID")
    attempt_show.add_argument("--json", action="store_true", help="print one JSON document for scripts")
    attempt_show.set_defaults(handler=cmd_attempts_show)
    close = attempt_cmds.add_parser(
        "close", help="close an escalated Unknown dead end as not charged (Failed)",
        description="Close an Unknown attempt that recovery escalated as a dead end (deadline, "
                    "resend-rejected, resend-not-safe) as not charged: Failed (operator-closed-not-charged), "
                    "its escalations resolved, the order payable again. Refused while any evidence of a "
                    "payment exists or if the attempt changed. Evidence that arrives later raises a "
                    "contradiction escalation. Recorded in operator_actions.")
    close.add_argument("attempt_id", metavar="ATTEMPT_ID")
    close.add_argument("--operator", required=True, type=operator_handle, metavar="NAME",
                       help="who is closing it: an operator handle (recorded in history and in "
                            "operator_actions)")
    close.add_argument("--reason", required=True, metavar="TEXT", help="why (recorded)")
    close.add_argument("--checked", required=True, metavar="TEXT",
                       help="what was checked at the provider, e.g. the dashboard search (recorded)")
    close.add_argument("--json", action="store_true", help="print the recorded action as JSON")
    close.set_defaults(handler=cmd_attempts_close)
    # -- end of issue 13's attempt actions --
    # --- operator accounts (issue 13: paycore operators add|disable|list) -------------------------
    add_operator_account_commands(commands)
    # --- end of operator accounts -------------------------------------------------------------------
    # --- issue 29: refunds, captures, voids and the back office's credentials ---------------------
    add_operation_commands(commands)
    add_settlement_commands(commands)
    return parser
