"""docker-compose.yml against the project, without a container engine (tools/deploy_check/compose.py).

The old file (fixtures/compose-before.yml, with only the variables it demanded) must show
each of its defects; the new one must show none; and breaking the new one in each way the
checker guards must show that problem.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tools.deploy_check.compose import Problem, check_compose

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"


def _has(problems: list[Problem], service: str, check: str, fragment: str = "") -> bool:
    return any(p.service == service and p.check == check and fragment in p.message for p in problems)


@pytest.fixture(scope="module")
def before() -> list[Problem]:
    return check_compose(FIXTURES / "compose-before.yml", FIXTURES / "env-before", root=ROOT)


@pytest.mark.parametrize(("defect", "service", "check", "fragment"), [
    ("webhooks exits 2 on the empty webhook-secret default", "webhooks", "settings",
     "PAYCORE_CARDCO_WEBHOOK_SECRET"),
    ("the sandbox shares checkout's network namespace", "sandbox", "network", "service:checkout"),
    ("services are told http://sandbox:8100, which has no address", "checkout", "address",
     "shares another container's network"),
    ("the sandbox binds 127.0.0.1", "checkout", "address", "binds 127.0.0.1"),
    ("no PAYCORE_SANDBOX_WEBHOOK_URLS: no webhook is ever sent", "sandbox", "sandbox-webhooks",
     "none is ever sent"),
    ("the intake's secret is not the sandbox's", "webhooks", "sandbox-account", "webhook secret"),
    ("Kafka has no volume", "kafka", "volume", ""),
    ("Kafka has no healthcheck", "kafka", "healthcheck", ""),
    ("no topics with their partitions and retention", "", "kafka-topics", "no one-shot"),
    ("alerts' `:?` stops everything without an alert URL", "alerts", "required-var",
     "PAYCORE_ALERT_WEBHOOK_URL"),
    ("alerts is not optional", "alerts", "profile", ""),
    ("postgres:15 floats", "postgres", "image", "'postgres:15'"),
    ("the database password is hard-coded", "postgres", "credential", "POSTGRES_PASSWORD"),
    ("the DSN carries the password", "checkout", "credential", "PAYCORE_DATABASE_URL"),
    ("the API key has a literal default", "checkout", "credential", "PAYCORE_CARDCO_API_KEY"),
    ("recovery serves no metrics", "recovery", "metrics", ""),
    ("the dispatcher serves no metrics", "dispatcher", "metrics", ""),
    ("webhooks has no healthcheck", "webhooks", "healthcheck", "without a healthcheck"),
    ("recovery has no healthcheck", "recovery", "healthcheck", "without a healthcheck"),
    ("the sandbox has no healthcheck", "sandbox", "healthcheck", "without a healthcheck"),
])
def test_the_old_file_shows_each_defect(before: list[Problem], defect: str, service: str, check: str,
                                        fragment: str) -> None:
    assert _has(before, service, check, fragment), \
        f"{defect}: not reported; got\n" + "\n".join(map(str, before))


def test_the_new_file_has_no_problems() -> None:
    assert [str(p) for p in check_compose(COMPOSE, ENV_EXAMPLE)] == []


def _broken(tmp_path: Path, edits: list[tuple[str, str]],
            env: dict[str, str | None] | None = None) -> list[Problem]:
    """The problems the new file gains from ``edits`` (old text → new text), beside its own files."""
    text = COMPOSE.read_text(encoding="utf-8")
    for old, new in edits:
        assert old in text, f"the compose file no longer contains {old!r}"
        text = text.replace(old, new)
    shutil.copytree(ROOT / "deploy", tmp_path / "deploy")
    env_text = ENV_EXAMPLE.read_text(encoding="utf-8")
    for key, value in (env or {}).items():
        lines = [line for line in env_text.splitlines() if not line.startswith(f"{key}=")]
        env_text = "\n".join([*lines, *([f"{key}={value}"] if value is not None else [])]) + "\n"
    (tmp_path / ".env.example").write_text(env_text, encoding="utf-8")
    (tmp_path / "docker-compose.yml").write_text(text, encoding="utf-8")
    baseline = {str(p) for p in check_compose(COMPOSE, ENV_EXAMPLE)}
    return [p for p in check_compose(tmp_path / "docker-compose.yml") if str(p) not in baseline]


WEBHOOKS_HEALTH = '''      PAYCORE_HEALTH_PORT: "8200"
    healthcheck: *health'''
SANDBOX_CMD = '["serve", "sandbox", "--host", "0.0.0.0", "--port", "8100", "--allow-network"]'


@pytest.mark.parametrize(("breakage", "edits", "service", "check", "fragment"), [
    ("a healthcheck removed", [(WEBHOOKS_HEALTH, '      PAYCORE_HEALTH_PORT: "8200"')],
     "webhooks", "healthcheck", "without a healthcheck"),
    ("the sandbox without --allow-network", [(SANDBOX_CMD, SANDBOX_CMD.replace(', "--allow-network"', ""))],
     "sandbox", "command", "--allow-network"),
    ("the sandbox on loopback", [(SANDBOX_CMD, SANDBOX_CMD.replace("0.0.0.0", "127.0.0.1"))],
     "checkout", "address", "binds 127.0.0.1"),
    ("the sandbox sharing checkout's network", [("    ports: [\"127.0.0.1:${SANDBOX_PORT:-8100}:8100\"]",
                                                 "    network_mode: \"service:checkout\"")],
     "sandbox", "network", ""),
    ("the sandbox on another port", [('"--port", "8100"', '"--port", "8101"')],
     "checkout", "address", "sandbox listens on 8101"),
    ("webhooks delivered to a wrong port", [("http://webhooks:8200/webhooks/cardco",
                                             "http://webhooks:8201/webhooks/cardco")],
     "sandbox", "sandbox-webhooks", "none is ever sent"),
    ("webhooks delivered to no one", [("      PAYCORE_SANDBOX_WEBHOOK_URLS: http://webhooks:8200/webhooks/cardco\n",
                                       "")],
     "sandbox", "sandbox-webhooks", ""),
    ("a host that is no service",
     [("PAYCORE_KAFKA_BOOTSTRAP: kafka:9092", "PAYCORE_KAFKA_BOOTSTRAP: broker:9092")],
     "dispatcher", "address", "'broker'"),
    ("an unknown flag", [('"--relays", "2"', '"--workers", "2"')], "dispatcher", "command", "does not parse"),
    ("the health port is not the bound one", [('"--metrics-port", "8400"', '"--metrics-port", "8401"')],
     "dispatcher", "healthcheck", "probes 127.0.0.1:8400"),
    ("the health port unset (the image's default 8000)", [('      PAYCORE_HEALTH_PORT: "8200"\n', "")],
     "webhooks", "healthcheck", "probes 127.0.0.1:8000"),
    ("the sandbox's probe on another port",
     [("127.0.0.1:8100/_sandbox/clock", "127.0.0.1:8101/_sandbox/clock")],
     "sandbox", "healthcheck", "probes 127.0.0.1:8101"),
    ("Prometheus misses a target", [('"--metrics-port", "8400"', '"--metrics-port", "8401"')],
     "prometheus", "monitoring", "dispatcher:8401"),
    ("a worker's metrics on loopback", [('"dispatcher", "--relays", "2", "--metrics-host", "0.0.0.0"',
                                         '"dispatcher", "--relays", "2", "--metrics-host", "127.0.0.1"')],
     "dispatcher", "metrics", "loopback"),
    ("postgres floating", [("postgres:15.10-bookworm", "postgres:15")], "postgres", "image", ""),
    ("kafka at latest", [("image: apache/kafka:3.9.1\n    restart: unless-stopped",
                          "image: apache/kafka:latest\n    restart: unless-stopped")], "kafka", "image", ""),
    ("Kafka's data off its volume", [("volumes: [kafkadata:/var/lib/kafka/data]", "volumes: []")],
     "kafka", "volume", ""),
    ("fewer partitions than paycore's", [("--partitions 12", "--partitions 6")],
     "dispatcher", "kafka-topics", "partitions 6 (settings: 12)"),
    ("another replication factor than the workers'",
     [("--topic ops.alerts --partitions 3 --replication-factor 1",
       "--topic ops.alerts --partitions 3 --replication-factor 2")],
     "consumer-email", "kafka-topics", "replication factor 2 (settings: 1)"),
    ("workers creating topics with more replicas than brokers",
     [('PAYCORE_KAFKA_REPLICATION_FACTOR: "1"', 'PAYCORE_KAFKA_REPLICATION_FACTOR: "3"')],
     "dispatcher", "kafka-topics", "1 broker(s)"),
    ("another min.insync.replicas than the workers'", [("min.insync.replicas=1", "min.insync.replicas=2")],
     "dispatcher", "kafka-topics", "min.insync.replicas 2 (settings: 1)"),
    ("effects kept shorter than the outbox horizon", [("retention.ms=3024000000", "retention.ms=86400000")],
     "dispatcher", "kafka-topics", "replay horizon"),
    ("workers told to keep topics shorter than the outbox horizon",
     [('PAYCORE_KAFKA_RETENTION_S: "3024000"', 'PAYCORE_KAFKA_RETENTION_S: "86400"')],
     "dispatcher", "settings", "PAYCORE_KAFKA_RETENTION_S"),
    ("a topic not created", [("--topic ops.alerts", "--topic ops.alarms")],
     "alerts", "kafka-topics", "ops.alerts is not created"),
    ("a literal JWT secret", [("${PAYCORE_JWT_SECRET:?set PAYCORE_JWT_SECRET in .env (32+ characters)}",
                               "a-literal-secret-that-is-long-enough-0123")],
     "checkout", "credential", "PAYCORE_JWT_SECRET"),
    ("`:?` for the optional alert URL", [("${PAYCORE_ALERT_WEBHOOK_URL:-}",
                                          "${PAYCORE_ALERT_WEBHOOK_URL:?set it}")],
     "alerts", "required-var", "PAYCORE_ALERT_WEBHOOK_URL"),
    ("alerts without its profile", [("    profiles: [alerts, incidents]\n", "")], "alerts", "profile", ""),
    ("incidents without its profile", [("    profiles: [incidents]\n", "")], "incidents", "profile", ""),
    ("alerts delivering pages nobody writes",
     [("${PAYCORE_ALERT_INCIDENT_GROUPING:-false}", '"true"')],
     "alerts", "alert-grouping", "--profile alerts"),
    ("the console's metrics not scraped", [('"--metrics-port", "8501"', '"--metrics-port", "8502"')],
     "prometheus", "monitoring", "console:8502"),
    ("the console without a healthcheck",
     [('      PAYCORE_HEALTH_PORT: "8500"\n    healthcheck: *health', '      PAYCORE_HEALTH_PORT: "8500"')],
     "console", "healthcheck", "without a healthcheck"),
    ("waiting on a service without a healthcheck",
     [("      prometheus: {condition: service_healthy}", "      kafka-init: {condition: service_healthy}")],
     "grafana", "healthcheck", "kafka-init"),
])
def test_breaking_the_new_file_is_reported(tmp_path: Path, breakage: str, edits: list[tuple[str, str]],
                                           service: str, check: str, fragment: str) -> None:
    gained = _broken(tmp_path, edits)
    assert _has(gained, service, check, fragment), f"{breakage}: not reported; got {list(map(str, gained))}"


@pytest.mark.parametrize(("breakage", "env", "service", "check", "fragment"), [
    ("a required secret missing from .env", {"PAYCORE_JWT_SECRET": None}, "checkout", "env",
     "PAYCORE_JWT_SECRET"),
    ("a JWT secret too short for checkout", {"PAYCORE_JWT_SECRET": "short"}, "checkout", "settings",
     "PAYCORE_JWT_SECRET"),
    ("an intake secret the sandbox does not sign with",
     {"PAYCORE_CARDCO_WEBHOOK_SECRET": "whsec_" + "A" * 32}, "webhooks", "sandbox-account", "webhook secret"),
    ("an API key the sandbox does not know", {"PAYCORE_CARDCO_API_KEY": "sk_test_someone_else"},
     "recovery", "sandbox-account", "API key"),
    ("pagerduty without its routing key", {"PAYCORE_ALERT_FORMAT": "pagerduty"}, "alerts", "settings",
     "PAYCORE_PAGERDUTY_ROUTING_KEY"),
    ("the console's secret missing from .env", {"PAYCORE_CONSOLE_SECRET": None}, "console", "env",
     "PAYCORE_CONSOLE_SECRET"),
    ("a console secret too short", {"PAYCORE_CONSOLE_SECRET": "short"}, "console", "settings",
     "PAYCORE_CONSOLE_SECRET"),
    ("SASL without its credentials", {"PAYCORE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "dispatcher",
     "settings", "PAYCORE_KAFKA_SASL_USERNAME: is required"),
    ("a Kafka username the protocol would ignore", {"PAYCORE_KAFKA_SASL_USERNAME": "paycore"}, "incidents",
     "settings", "PAYCORE_KAFKA_SASL_USERNAME: is set"),
])
def test_a_broken_env_file_is_reported(tmp_path: Path, breakage: str, env: dict[str, str | None],
                                       service: str, check: str, fragment: str) -> None:
    gained = _broken(tmp_path, [], env)
    assert _has(gained, service, check, fragment), f"{breakage}: not reported; got {list(map(str, gained))}"


def test_a_proxy_sending_where_nothing_listens_is_reported(tmp_path: Path) -> None:
    _broken(tmp_path, [])
    edge = tmp_path / "deploy/compose/edge.conf.template"
    text = edge.read_text(encoding="utf-8")
    edge.write_text(text.replace("checkout:8000", "checkout:8080"), encoding="utf-8")
    assert _has(check_compose(tmp_path / "docker-compose.yml"), "edge", "address", "checkout:8080")


def test_a_dashboard_charting_an_undefined_metric_is_reported(tmp_path: Path) -> None:
    _broken(tmp_path, [])
    dashboard = tmp_path / "deploy/grafana/dashboards/paycore.json"
    text = dashboard.read_text(encoding="utf-8")
    assert "paycore_webhook_deliveries_total" in text
    dashboard.write_text(text.replace("paycore_webhook_deliveries_total", "paycore_webhook_delivered_total"),
                         encoding="utf-8")
    problems = check_compose(tmp_path / "docker-compose.yml")
    assert _has(problems, "grafana", "monitoring", "paycore_webhook_delivered_total")


def test_an_optional_service_scraped_as_a_static_target_is_reported(tmp_path: Path) -> None:
    """Without its profile the target would be down for good (PaycoreTargetDown firing)."""
    _broken(tmp_path, [])
    config = tmp_path / "deploy/prometheus/prometheus.yml"
    text = config.read_text(encoding="utf-8")
    discovered = "dns_sd_configs: [{names: [alerts], type: A, port: 8600}]"
    assert discovered in text
    static = 'static_configs: [{targets: ["alerts:8600"]}]'
    config.write_text(text.replace(discovered, static), encoding="utf-8")
    assert _has(check_compose(tmp_path / "docker-compose.yml"), "prometheus", "monitoring",
                "alerts runs only with --profile alerts or incidents")


def test_the_sandbox_binds_a_container_network_only_when_told(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`--allow-network` passes the loopback guard (then a bad setting stops it before it binds)."""
    from paycore_cli.main import main

    assert main(["serve", "sandbox", "--host", "0.0.0.0"]) == 2
    assert "--allow-network" in capsys.readouterr().err
    monkeypatch.setenv("PAYCORE_SANDBOX_WEBHOOK_URLS", "not-a-url")
    assert main(["serve", "sandbox", "--host", "0.0.0.0", "--allow-network"]) == 2
    err = capsys.readouterr().err
    assert "refusing to bind" not in err
    assert "webhook_endpoints[0]" in err
