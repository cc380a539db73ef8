"""Checks that run paycore's own code on what the compose file gives each container: the
settings validation each service runs at start-up, the sandbox's accounts against the
services that call it, the Kafka topics against the dispatcher's settings, and the
monitoring files against the metrics the code defines.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from tools.deploy_check.compose_file import ROOT, Problem, Service, addresses, command_of, strings

METRIC_DEFINITION = re.compile(r"(?:Counter|Gauge|Histogram|Summary)\(\s*\"(paycore_[a-z0-9_]+)\"")
METRIC_USE = re.compile(r"\bpaycore_[a-z0-9_]+")
METRIC_SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")
PROXIED = re.compile(r"https?://([A-Za-z0-9_-]+):(\d+)")  # in a proxy's configuration
# The workers that create the Kafka topics when missing (paycore.kafka.ensure_topics).
TOPIC_CREATORS = ("dispatcher", "consumer", "alerts", "incidents")
# The services that call a provider account (and so must agree with the sandbox about it).
CALLERS = (("serve", "checkout"), ("serve", "webhooks"), ("run", "recovery"))


def check_sandbox_webhooks(services: dict[str, Service]) -> list[Problem]:
    """The sandbox delivers each provider's webhooks to the intake's route for it, by name, and
    signs with the secrets the services are given."""
    from paycore_sandbox.dialects import Endpoint, parse_endpoint
    from paycore_sandbox.settings import SandboxSettings

    sandboxes = [s for s in services.values() if s.runs("serve", "sandbox")]
    intakes = [s for s in services.values() if s.runs("serve", "webhooks")]
    problems: list[Problem] = []
    for sandbox in sandboxes:
        # (dialect, host, port, path) of every endpoint the sandbox POSTs to
        targets = [(endpoint.dialect, host, port, urlsplit(endpoint.url).path)
                   for spec in sandbox.env.get("PAYCORE_SANDBOX_WEBHOOK_URLS", "").split(",") if spec.strip()
                   for endpoint in [parse_endpoint(spec.strip())]
                   for host, port in addresses("PAYCORE_SANDBOX_WEBHOOK_URLS", endpoint.url)]
        for intake in intakes:
            for provider in _providers_via(intake, sandbox.name):
                route = f"/webhooks/{provider}"
                if not any(d == provider and h == intake.name and p in intake.api and path == route
                           for d, h, p, path in targets):
                    url = f"http://{intake.name}:{next(iter(intake.api), 8200)}{route}"
                    spec = Endpoint(url, provider).spec
                    problems.append(Problem(sandbox.name, "sandbox-webhooks",
                                            f"PAYCORE_SANDBOX_WEBHOOK_URLS does not deliver {provider}'s "
                                            f"webhooks to the intake ({spec}): none is ever sent"))
        try:
            known = SandboxSettings.from_env(dict(sandbox.env))
        except ValueError:
            continue  # reported by check_settings
        problems += _sandbox_accounts_match(sandbox, known, services)
    return problems


def _providers_via(intake: Service, sandbox: str) -> list[str]:
    """The providers whose accounts the intake has at the sandbox (the default one if its settings fail)."""
    from paycore.config import ConfigError, load_settings
    from paycore.providers.registry import DEFAULT_PACKAGE

    try:
        accounts = load_settings(intake.env).accounts
    except ConfigError:
        return [DEFAULT_PACKAGE.name]  # the settings problem itself is reported by check_settings
    return list(dict.fromkeys(a.provider for a in accounts if urlsplit(a.base_url).hostname == sandbox))


def _sandbox_accounts_match(sandbox: Service, known: Any, services: dict[str, Service]) -> list[Problem]:
    from paycore.config import ConfigError, load_settings

    problems: list[Problem] = []
    for svc in services.values():
        if not any(svc.runs(*words) for words in CALLERS):
            continue
        try:
            settings = load_settings(svc.env)
        except ConfigError:
            continue  # reported by check_settings
        for acct in settings.accounts:
            if urlsplit(acct.base_url).hostname != sandbox.name:
                continue
            mine = known.account_for(acct.account, acct.environment)
            if mine is None:
                problems.append(Problem(svc.name, "sandbox-account",
                                        f"the sandbox has no account {acct.account}/{acct.environment}"))
                continue
            if acct.api_key.reveal() != mine.api_key:
                problems.append(Problem(svc.name, "sandbox-account",
                                        f"the API key for {acct.account}/{acct.environment} is not the "
                                        "sandbox's: every call would be refused"))
            if svc.runs("serve", "webhooks") and (acct.webhook_secret is None
                                                  or acct.webhook_secret.reveal() != mine.webhook_secret):
                problems.append(Problem(svc.name, "sandbox-account",
                                        f"the webhook secret for {acct.account}/{acct.environment} is not "
                                        "the one the sandbox signs with: every delivery would be refused"))
    return problems


def validate_settings(svc: Service) -> str | None:
    """What the service's own start-up validation says about its environment, or None.

    Goes by the command's words, not its parsed flags, so a flag the parser refuses does
    not hide a settings problem as well.
    """
    from paycore.clock import SystemClock
    from paycore.config import ConfigError, load_settings

    env = svc.env
    try:
        if svc.runs("migrate"):
            if load_settings(env, require_account=False).database_url is None:
                return "PAYCORE_DATABASE_URL is required (else migrate starts its own embedded PostgreSQL)"
        elif svc.runs("serve", "sandbox"):
            from paycore_sandbox.settings import SandboxSettings

            SandboxSettings.from_env(dict(env))
        elif svc.runs("serve", "console"):
            from paycore_console.settings import ConsoleSettings

            ConsoleSettings.from_env(env)  # as cmd_serve
        elif svc.runs("serve", "checkout") or svc.runs("serve", "webhooks"):
            settings = load_settings(env)
            if svc.runs("serve", "checkout") and settings.jwt_secret is None and settings.jwks_url is None:
                return "PAYCORE_JWT_SECRET is required (or PAYCORE_JWKS_URL)"
            if svc.runs("serve", "webhooks"):
                from paycore_webhooks.app import receivers_for

                receivers_for(settings, SystemClock())
        elif svc.runs("run", "recovery"):
            from paycore_recovery.settings import load_recovery_settings

            settings = load_settings(env)
            if settings.database_url is None:
                return "PAYCORE_DATABASE_URL is required"
            load_recovery_settings(settings, env)  # validates against the app settings
        elif svc.runs("run"):
            from paycore.kafka import kafka_settings
            from paycore_dispatcher.settings import load_alert_settings, load_dispatcher_settings

            settings = load_settings(env, require_account=False)
            if settings.database_url is None:
                return "PAYCORE_DATABASE_URL is required"
            kafka_settings(settings)
            if svc.runs("run", "dispatcher"):
                load_dispatcher_settings(settings, env)
            if svc.runs("run", "alerts") and load_alert_settings(env).webhook_url is None:
                return "PAYCORE_ALERT_WEBHOOK_URL is required (where alerts are posted)"
            if svc.runs("run", "incidents"):
                from paycore_incidents import settings as incident_settings

                incident_settings.load(env)
    except (ConfigError, ValueError) as exc:
        return str(exc)
    return None


def check_settings(services: dict[str, Service]) -> list[Problem]:
    return [Problem(s.name, "settings", f"would exit at start-up: {message}")
            for s in services.values() if (message := validate_settings(s)) is not None]


@dataclass(frozen=True)
class CreatedTopic:
    """A topic a one-shot's ``kafka-topics.sh --create`` makes."""

    partitions: int | None
    replication_factor: int | None
    configs: dict[str, str]


def topics_created(services: dict[str, Service]) -> dict[str, CreatedTopic]:
    """Every topic some service's command creates with ``kafka-topics.sh --create``."""
    created: dict[str, CreatedTopic] = {}
    for svc in services.values():
        text = " ".join(strings(svc.raw.get("command") or []))
        for call in text.split("kafka-topics.sh")[1:]:
            words = call.split()
            topic = _option(words, "--topic")
            if "--create" not in words or topic is None:
                continue
            configs = dict(w.split("=", 1) for i, w in enumerate(words)
                           if i and words[i - 1] == "--config" and "=" in w)
            created[topic] = CreatedTopic(_int(_option(words, "--partitions")),
                                          _int(_option(words, "--replication-factor")), configs)
    return created


def check_kafka_topics(services: dict[str, Service]) -> list[Problem]:
    """A one-shot creates the topics as a worker would (paycore.kafka.new_topics on its settings),
    no more replicas than brokers, and the effects outlive the outbox's replay horizon."""
    from paycore.config import ConfigError, load_settings
    from paycore.kafka import kafka_settings, new_topics
    from paycore_dispatcher.settings import OUTBOX_RETENTION

    brokers = sum(1 for s in services.values()
                  if "broker" in s.env.get("KAFKA_PROCESS_ROLES", "") and command_of(s.raw) is None)
    if not brokers:
        return []
    created = topics_created(services)
    if not created:
        return [Problem("", "kafka-topics", "no one-shot creates the Kafka topics (kafka-topics.sh --create) "
                                            "with paycore's partition counts and retention")]
    problems: list[Problem] = []
    for svc in services.values():
        if not any(svc.runs("run", worker) for worker in TOPIC_CREATORS):
            continue
        try:
            ks = kafka_settings(load_settings(svc.env, require_account=False))
            horizon_ms = OUTBOX_RETENTION.read(svc.env) * 1000
        except ConfigError:
            continue  # reported by check_settings
        if ks.replication_factor > brokers:
            problems.append(Problem(svc.name, "kafka-topics",
                                    f"PAYCORE_KAFKA_REPLICATION_FACTOR is {ks.replication_factor} with "
                                    f"{brokers} broker(s): the topics it would create cannot be"))
        for wanted in new_topics(ks):
            got = created.get(wanted.name)
            if got is None:
                problems.append(Problem(svc.name, "kafka-topics", f"topic {wanted.name} is not created"))
                continue
            differs = [f"{what} {mine} (settings: {theirs})" for what, mine, theirs in (
                ("partitions", got.partitions, wanted.num_partitions),
                ("replication factor", got.replication_factor, wanted.replication_factor),
                *((key, got.configs.get(key), value) for key, value in wanted.topic_configs.items()),
            ) if str(mine) != str(theirs)]
            if differs:
                problems.append(Problem(svc.name, "kafka-topics",
                                        f"{wanted.name} is created with {', '.join(differs)}"))
        kept = _int(created.get(ks.effects_topic, CreatedTopic(None, None, {})).configs.get("retention.ms"))
        if kept is not None and 0 <= kept < horizon_ms:  # -1: kept forever
            problems.append(Problem(svc.name, "kafka-topics",
                                    f"{ks.effects_topic} keeps {kept} ms, less than the outbox's replay "
                                    f"horizon ({horizon_ms:.0f} ms, PAYCORE_OUTBOX_RETENTION_S)"))
    return problems


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.lstrip("-").isdigit() else None


def _option(words: list[str], name: str) -> str | None:
    return words[words.index(name) + 1] if name in words[:-1] else None


def _bind_mounts(svc: Service, root: Path) -> dict[str, Path]:
    """Container path -> file or directory of this repository, for `./source:target` volumes."""
    return {str(v).split(":")[1]: root / str(v).split(":")[0]
            for v in svc.raw.get("volumes") or [] if isinstance(v, str) and str(v).startswith(".")}


def check_proxies(services: dict[str, Service], root: Path) -> list[Problem]:
    """A proxy's configuration (nginx) sends to paycore services where they listen."""
    problems: list[Problem] = []
    for svc in services.values():
        if svc.image.split("/")[-1].split(":")[0] != "nginx":
            continue
        for source in _bind_mounts(svc, root).values():
            text = source.read_text(encoding="utf-8") if source.is_file() else ""
            for host, port in PROXIED.findall(text):
                target = services.get(host)
                if target is None or (target.is_paycore and int(port) not in target.api):
                    problems.append(Problem(svc.name, "address", f"{source.name} sends to {host}:{port}, "
                                                                 "where no service of this file listens"))
    return problems


def check_monitoring(services: dict[str, Service], root: Path) -> list[Problem]:
    """Prometheus scrapes every paycore metrics listener; dashboards use metrics that exist."""
    problems: list[Problem] = []
    for svc in services.values():
        image = svc.image.split("/")[-1].split(":")[0]
        mounts = _bind_mounts(svc, root)
        if image == "prometheus" and "/etc/prometheus/prometheus.yml" in mounts:
            problems += _scrape_coverage(svc.name, mounts["/etc/prometheus/prometheus.yml"], services)
        if image == "grafana":
            for target, source in mounts.items():
                for dashboard in sorted(source.glob("*.json")) if source.is_dir() else []:
                    problems += _dashboard_metrics(svc.name, dashboard)
                if target == "/etc/grafana/provisioning" and not list(source.glob("datasources/*.y*ml")):
                    problems.append(Problem(svc.name, "monitoring", "no provisioned datasource"))
    return problems


def _scrape_coverage(name: str, config: Path, services: dict[str, Service]) -> list[Problem]:
    data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    targets: set[tuple[str, int]] = set()
    discovered: set[tuple[str, int]] = set()
    for job in data.get("scrape_configs") or []:
        for static in job.get("static_configs") or []:
            for t in static.get("targets") or []:
                host, _, port = str(t).rpartition(":")
                targets.add((host, int(port)))
        for sd in job.get("dns_sd_configs") or []:
            discovered.update((str(n), int(sd.get("port", 0))) for n in sd.get("names") or [])
    targets |= discovered
    static = {(host, port) for host, port in targets if (host, port) not in discovered}
    problems = [Problem(name, "monitoring", f"Prometheus does not scrape {s.name}:{port}/metrics")
                for s in services.values() if s.is_paycore and not s.runs("serve", "sandbox")
                for port in s.metrics if (s.name, port) not in targets]
    # A static target is scraped whether or not its service runs: one of a profile would be down
    # (up == 0, PaycoreTargetDown firing) whenever the profile is off. DNS finds it only running.
    problems += [Problem(name, "monitoring", f"Prometheus scrapes {host}:{port} as a static target, but "
                         f"{host} runs only with --profile {' or '.join(services[host].profiles)}: without "
                         "it the target is down and PaycoreTargetDown fires; find it by dns_sd_configs")
                 for host, port in sorted(static) if host in services and services[host].profiles]
    return problems


def defined_metrics() -> set[str]:
    """The metric names this checkout's code registers."""
    defined: set[str] = set()
    for source in [*ROOT.glob("services/*/paycore_*/**/*.py"), *ROOT.glob("libs/paycore/paycore/**/*.py")]:
        defined.update(METRIC_DEFINITION.findall(source.read_text(encoding="utf-8")))
    return defined


def is_defined(metric: str, defined: set[str]) -> bool:
    """Whether ``metric`` is a defined name or one of the series a counter/histogram exposes."""
    base = next((metric.removesuffix(s) for s in METRIC_SUFFIXES if metric.endswith(s)), metric)
    return metric in defined or base in defined


def _dashboard_metrics(name: str, dashboard: Path) -> list[Problem]:
    defined = defined_metrics()
    used = set(METRIC_USE.findall(json.dumps(json.loads(dashboard.read_text(encoding="utf-8")))))
    problems = []
    for metric in sorted(used):
        if not is_defined(metric, defined):
            problems.append(Problem(name, "monitoring", f"{dashboard.name} charts {metric}, which no service "
                                                        "defines"))
    return problems


def check_alert_grouping(services: dict[str, Service]) -> list[Problem]:
    """Alert delivery reads the pages topic (grouping on) only where the incident agent runs too:
    in every profile that starts alerts, an incidents service starts, or nothing is delivered."""
    from paycore.config import ConfigError
    from paycore_dispatcher.settings import ALERT_INCIDENT_GROUPING

    agents = [s for s in services.values() if s.runs("run", "incidents")]
    problems: list[Problem] = []
    for svc in services.values():
        if not svc.runs("run", "alerts"):
            continue
        try:
            grouped = ALERT_INCIDENT_GROUPING.read(svc.env)
        except ConfigError:
            continue  # reported by check_settings
        starts = svc.profiles or [""]
        alone = [p for p in starts if not any(not a.profiles or p in a.profiles for a in agents)]
        if grouped and alone:
            where = ", ".join(f"--profile {p}" if p else "by default" for p in alone)
            problems.append(Problem(svc.name, "alert-grouping",
                                    "PAYCORE_ALERT_INCIDENT_GROUPING=true, but no incidents service starts "
                                    f"with it ({where}): it would deliver the pages topic, which nothing "
                                    "writes"))
    return problems
