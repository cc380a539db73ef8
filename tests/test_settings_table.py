"""The full settings table, snapshotted: no setting's name, default or bounds changes unnoticed.

``tests/settings_table.json`` holds, for every ``PAYCORE_*`` variable, the document and group
that list it, its default as the docs show it and as the code holds it (``repr``: ``60.0`` is
not ``60``), what it accepts and its description; and every documented key of the JSON files
(the accounts file, the sandbox's). It was written from the declarations before issue 32 moved
them (docs/decisions/0010-settings-declared-once.md) and is compared with them after: a rename,
a new default or another bound fails here, not in production.

A deliberate change (a new setting, a new description) rewrites it:
``python -m tests.test_settings_table --write``, and the diff is reviewed with the change.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from paycore.settings_spec import Secret
from tools import settings_doc

SNAPSHOT = Path(__file__).resolve().parent / "settings_table.json"


def table() -> dict[str, Any]:
    """Every variable and file key, keyed by name (the order of a table is the docs' concern)."""
    variables = {
        s.name: {"document": doc, "group": g.governs, "default": s.default_text(), "value": repr(s.default),
                 "accepts": s.kind.accepts(), "about": s.about}
        for doc, groups in settings_doc.declared().items() for g in groups for s in g.settings}
    files = {f"{block}: {f.key}": {"document": doc, "default": f.default, "about": f.about}
             for doc, block, module, attribute in settings_doc.FILE_FIELDS
             for f in getattr(__import__(module, fromlist=[attribute]), attribute)}
    return {"variables": dict(sorted(variables.items())), "files": dict(sorted(files.items())),
            "loaded": {case: loaded(env) for case, env in ENVS.items()}}


# What the loaders make of an empty environment, and of one that sets every variable they read to
# something other than its default: each attribute must come from its own variable.
ENVS: dict[str, dict[str, str]] = {
    "unset": {"PAYCORE_DATABASE_URL": "postgresql://db/paycore", "PAYCORE_CONSOLE_SECRET": "c" * 32},
    "any audience": {"PAYCORE_DATABASE_URL": "postgresql://db/paycore", "PAYCORE_CONSOLE_SECRET": "c" * 32,
                     "PAYCORE_JWT_ALLOW_ANY_AUDIENCE": "TRUE"},
    "set": {
        "PAYCORE_DATABASE_URL": "postgresql://db/paycore",
        "PAYCORE_MIGRATION_DATABASE_URL": "postgresql://owner@db/paycore",
        "PAYCORE_KAFKA_BOOTSTRAP": "kafka-1:9092,kafka-2:9092",
        "PAYCORE_KAFKA_SECURITY_PROTOCOL": "sasl_ssl", "PAYCORE_KAFKA_SASL_MECHANISM": "scram-sha-512",
        "PAYCORE_KAFKA_SASL_USERNAME": "key-id", "PAYCORE_KAFKA_SASL_PASSWORD": "key-secret",
        "PAYCORE_KAFKA_SSL_CA_FILE": "/etc/ca.pem",
        "PAYCORE_JWT_SECRET": "j" * 40, "PAYCORE_JWKS_URL": "https://idp.example/jwks/",
        "PAYCORE_JWKS_REFETCH_COOLDOWN_S": "31", "PAYCORE_JWT_AUDIENCE": "checkout, api",
        "PAYCORE_JWT_ISSUER": "https://idp.example/", "PAYCORE_JWT_LEEWAY_S": "11",
        "PAYCORE_START_BUDGET_S": "6", "PAYCORE_CALL_BUDGET_S": "16", "PAYCORE_RECORD_BUDGET_S": "7",
        "PAYCORE_MAX_CALL_DURATION_S": "31", "PAYCORE_ABANDONMENT_THRESHOLD_S": "61",
        "PAYCORE_PROCESSING_ALLOWANCE_S": "32", "PAYCORE_IDEMPOTENCY_TTL_S": "86401.5",
        "PAYCORE_RECHECK_AFTER_S": "62", "PAYCORE_REMINDER_INTERVAL_S": "901",
        "PAYCORE_REMINDER_ACK_INTERVAL_S": "3601", "PAYCORE_SETTLEMENT_GRACE_S": "86402",
        "PAYCORE_KAFKA_IDEMPOTENT": "no", "PAYCORE_KAFKA_EFFECTS_TOPIC": "eu.effects",
        "PAYCORE_KAFKA_ALERTS_TOPIC": "eu.alerts", "PAYCORE_KAFKA_EFFECTS_PARTITIONS": "13",
        "PAYCORE_KAFKA_ALERTS_PARTITIONS": "4", "PAYCORE_KAFKA_MAX_REQUEST_SIZE": "2000000",
        "PAYCORE_KAFKA_REPLICATION_FACTOR": "5", "PAYCORE_KAFKA_MIN_INSYNC_REPLICAS": "4",
        "PAYCORE_KAFKA_RETENTION_S": "3100000", "PAYCORE_KAFKA_PAGES_TOPIC": "eu.pages",
        "PAYCORE_RECOVERY_BACKOFF_S": "61, 121", "PAYCORE_RECOVERY_SLOW_CADENCE_S": "3602",
        "PAYCORE_RECOVERY_LEASE_S": "91", "PAYCORE_RECOVERY_INTERVAL_S": "4.5",
        "PAYCORE_RECOVERY_BATCH": "201", "PAYCORE_RECOVERY_CONCURRENCY": "9",
        "PAYCORE_RECOVERY_ACTION_POLL_S": "301", "PAYCORE_RECOVERY_SEARCH_LAG_S": "302",
        "PAYCORE_PAYMENT_TOKEN_TTL_S": "86403", "PAYCORE_SUCCEEDED_AFTER_CANCEL": "Escalate",
        "PAYCORE_HOLD_LAPSE_WARNING_S": "86404", "PAYCORE_SETTLEMENT_RUN_AT": " 07:30 ",
        "PAYCORE_SETTLEMENT_LOOKBACK_DAYS": "8", "PAYCORE_SETTLEMENT_RUN_LEASE_S": "3603",
        "PAYCORE_OUTBOX_BATCH_SIZE": "501", "PAYCORE_OUTBOX_MAX_DELIVERY_ATTEMPTS": "11",
        "PAYCORE_OUTBOX_SEND_TIMEOUT_S": "12", "PAYCORE_OUTBOX_BACKOFF_BASE_S": "2",
        "PAYCORE_OUTBOX_BACKOFF_MAX_S": "301", "PAYCORE_OUTBOX_RETENTION_S": "3000000",
        "PAYCORE_CONSUMER_INBOX_RETENTION_S": "3200000",
        "PAYCORE_ALERT_WEBHOOK_URL": "https://events.example/v2/", "PAYCORE_ALERT_FORMAT": "PagerDuty",
        "PAYCORE_PAGERDUTY_ROUTING_KEY": "routing-key", "PAYCORE_ALERT_INCIDENT_GROUPING": "on",
        "PAYCORE_INCIDENTS_THRESHOLD": "21", "PAYCORE_INCIDENTS_WINDOW_S": "305",
        "PAYCORE_INCIDENTS_QUIET_S": "605", "PAYCORE_INCIDENTS_TICK_S": "11",
        "PAYCORE_INCIDENTS_APP_ID": "incidents-eu", "PAYCORE_INCIDENTS_SESSION_TIMEOUT_S": "12",
        "PAYCORE_INCIDENTS_UNBATCHED": "true", "PAYCORE_CONSOLE_URL": "https://console.example/",
        "PAYCORE_CONSOLE_SECRET": "s" * 33, "PAYCORE_CONSOLE_SESSION_TTL_S": "3600",
        "PAYCORE_CONSOLE_SESSION_IDLE_S": "600", "PAYCORE_CONSOLE_AUDIENCE": "console",
        "PAYCORE_CONSOLE_ROLE_CLAIM": "role", "PAYCORE_CONSOLE_LOGIN_MAX_FAILURES": "6",
        "PAYCORE_CONSOLE_LOGIN_MAX_CLIENT_FAILURES": "51", "PAYCORE_CONSOLE_LOGIN_WINDOW_S": "901",
        "PAYCORE_CONSOLE_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.7",
        "PAYCORE_CONSOLE_HSTS_MAX_AGE_S": "0", "PAYCORE_CONSOLE_INSECURE_COOKIES": "1",
        "PAYCORE_CONSOLE_REFUND_APPROVAL_ABOVE_MINOR": "0",
        "PAYCORE_SANDBOX_KEY_RETENTION_S": "3600", "PAYCORE_SANDBOX_WEBHOOK_URLS": "http://a/, stripe=http://b/,",
        "PAYCORE_SANDBOX_STRIPE_SEARCH_LAG_S": "2.5", "PAYCORE_SANDBOX_WEBHOOK_TIME_SCALE": "0.01",
    },
}


def _loaders() -> dict[str, Callable[[Mapping[str, str]], object]]:
    from paycore.config import load_settings
    from paycore_console.settings import ConsoleSettings
    from paycore_dispatcher.settings import load_alert_settings, load_dispatcher_settings
    from paycore_incidents.settings import load as load_incident_settings
    from paycore_recovery.settings import load_recovery_settings
    from paycore_sandbox.settings import SandboxSettings

    def app(env: Mapping[str, str]) -> Any:
        return load_settings(env, require_account=False)

    return {
        "paycore.config.load_settings": app,
        "paycore_recovery.settings.load_recovery_settings": lambda env: load_recovery_settings(app(env), env),
        "paycore_dispatcher.settings.load_dispatcher_settings":
            lambda env: load_dispatcher_settings(app(env), env),
        "paycore_dispatcher.settings.load_alert_settings": load_alert_settings,
        "paycore_incidents.settings.load": load_incident_settings,
        "paycore_console.settings.ConsoleSettings.from_env":
            lambda env: _without(ConsoleSettings.from_env(env), "core"),
        "paycore_sandbox.settings.SandboxSettings.from_env": lambda env: SandboxSettings.from_env(dict(env)),
    }


def _without(value: object, attribute: str) -> dict[str, object]:
    # The console's ``core`` is load_settings's result, snapshotted once already.
    assert dataclasses.is_dataclass(value)
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.name != attribute}


def _flat(value: object, path: str, out: dict[str, str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flat(item, f"{path}.{key}", out)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _flat(getattr(value, f.name), f"{path}.{f.name}", out)
    elif isinstance(value, Secret):
        out[path] = f"Secret({value.reveal()!r})"
    else:
        out[path] = repr(value)


def loaded(env: Mapping[str, str]) -> dict[str, str]:
    """Every attribute each loader makes of ``env``, by dotted path, as ``repr`` shows it."""
    out: dict[str, str] = {}
    for name, load in _loaders().items():
        _flat(load(env), name, out)
    return out


def render() -> str:
    return json.dumps(table(), indent=1, ensure_ascii=False) + "\n"


def test_the_settings_table_is_the_snapshot() -> None:
    want = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    got = table()
    assert sorted(got["variables"]) == sorted(want["variables"]), "a variable was added, renamed or removed"
    changed = {name: (want["variables"][name], row) for name, row in got["variables"].items()
               if row != want["variables"][name]}
    assert changed == {}, "a setting's default, bounds or description changed"
    assert got["files"] == want["files"]
    for case in ENVS:
        differ = {path: (want["loaded"][case].get(path), value) for path, value in got["loaded"][case].items()
                  if value != want["loaded"][case].get(path)}
        assert differ == {}, f"the loaders make something else of the {case!r} environment"
        assert sorted(got["loaded"][case]) == sorted(want["loaded"][case])
    assert len(got["variables"]) >= 130


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python -m tests.test_settings_table --write")
    SNAPSHOT.write_text(render(), encoding="utf-8")
    print(f"wrote {SNAPSHOT}")
