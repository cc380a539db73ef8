"""The Kubernetes overlays render, and every check of tools/deploy_check/kubernetes.py passes on
them; each check fails on a rendered copy broken the way it guards against.

Renders with the real kustomize (`make test` installs it) and validates against the
Kubernetes OpenAPI schemas kubernetes-validate ships; no cluster, no container engine.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

import pytest

from tools.deploy_check import kubernetes as k8s

Mutation = Callable[[k8s.Manifests], object]


@functools.cache
def _rendered(overlay: str) -> k8s.Manifests:
    return k8s.render(overlay)


def rendered(overlay: str) -> k8s.Manifests:
    """A copy of the overlay's rendering, free to break."""
    return copy.deepcopy(_rendered(overlay))


@pytest.mark.parametrize("check", list(k8s.CHECKS))
@pytest.mark.parametrize("overlay", k8s.OVERLAYS)
def test_overlay_passes(overlay: str, check: str) -> None:
    problems = k8s.CHECKS[check](rendered(overlay))
    assert problems == [], "\n".join(map(str, problems))


@pytest.mark.parametrize("overlay", k8s.OVERLAYS)
def test_overlay_renders_what_paycore_runs(overlay: str) -> None:
    """Every process; the incident agent and the demo consumers where their components are."""
    m = rendered(overlay)
    roles = sorted(role for w in k8s.workloads(m) for role in w.roles)
    optional = {"incidents": {"incidents"}, "demo-consumers": {"consumer-fulfillment", "consumer-email"}}
    absent = {role for component, some in optional.items() if component not in m.components for role in some}
    assert roles == sorted(k8s.KNOWN_ROLES - absent)
    assert {o["metadata"].get("namespace") for o in m.objects} == {
        "dev": {"paycore-dev"}, "prod": {"paycore"}}[m.overlay]


def test_production_runs_no_demo_consumer() -> None:
    """They record effects in demo tables; a store's own systems consume payments.effects."""
    m = rendered("prod")
    assert "demo-consumers" not in m.components
    assert not [w.where for w in k8s.workloads(m) if any(r.startswith("consumer-") for r in w.roles)]


def test_stripe_alone_reads_no_cardco_key() -> None:
    """A provider is a component: without Cardco's, no pod names a Cardco secret (a Secret
    without one would leave those pods in CreateContainerConfigError)."""
    m = rendered("prod+stripe")
    refs = {e["valueFrom"]["secretKeyRef"]["key"] for w in k8s.workloads(m) for c, _ in w.containers
            for e in c.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})}
    assert {"PAYCORE_STRIPE_API_KEY", "PAYCORE_STRIPE_WEBHOOK_SECRET"} <= refs
    assert not {k for k in refs | set(secret(m)) if k.startswith("PAYCORE_CARDCO_")}


# --------------------------------------------------------------------------- breaking it


def workload(m: k8s.Manifests, name: str) -> dict[str, Any]:
    return next(o for o in m.objects if o["kind"] in ("Deployment", "Job") and o["metadata"]["name"] == name)


def pod(m: k8s.Manifests, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = workload(m, name)["spec"]["template"]["spec"]
    return spec


def container(m: k8s.Manifests, name: str) -> dict[str, Any]:
    c: dict[str, Any] = workload(m, name)["spec"]["template"]["spec"]["containers"][0]
    return c


def named(m: k8s.Manifests, kind: str, name: str) -> dict[str, Any]:
    return next(o for o in m.objects if o["kind"] == kind and o["metadata"]["name"] == name)


def config_map(m: k8s.Manifests, prefix: str) -> dict[str, str]:
    data: dict[str, str] = next(o for o in m.objects if o["kind"] == "ConfigMap"
                                and o["metadata"]["name"].startswith(prefix + "-"))["data"]
    return data


def named_config(m: k8s.Manifests, prefix: str) -> str:
    name: str = next(o["metadata"]["name"] for o in m.objects if o["kind"] == "ConfigMap"
                     and o["metadata"]["name"].startswith(prefix + "-"))
    return name


def secret(m: k8s.Manifests) -> dict[str, str]:
    data: dict[str, str] = m.secret_example["stringData"]
    return data


def set_env(m: k8s.Manifests, name: str, var: str, value: str) -> None:
    c = container(m, name)
    c["env"] = [e for e in c["env"] if e["name"] != var] + [{"name": var, "value": value}]


def drop_mount(m: k8s.Manifests, name: str, volume: str) -> None:
    c = container(m, name)
    c["volumeMounts"] = [v for v in c["volumeMounts"] if v["name"] != volume]


def ingress_paths(m: k8s.Manifests) -> list[dict[str, Any]]:
    paths: list[dict[str, Any]] = named(m, "Ingress", "paycore")["spec"]["rules"][0]["http"]["paths"]
    return paths


def route_console(m: k8s.Manifests) -> None:
    ingress_paths(m).insert(0, {"path": "/ops", "pathType": "Prefix", "backend": {
        "service": {"name": "paycore-console", "port": {"number": 8500}}}})


def expose_admin_port(m: k8s.Manifests) -> None:
    named(m, "Service", "paycore-checkout")["spec"]["ports"].append(
        {"name": "metrics", "port": 8001, "targetPort": "metrics"})


def drop_env(m: k8s.Manifests, name: str, var: str) -> None:
    c = container(m, name)
    c["env"] = [e for e in c["env"] if e["name"] != var]


def remove(m: k8s.Manifests, kind: str, name: str) -> None:
    m.objects.remove(named(m, kind, name))


def hpa_for_recovery(m: k8s.Manifests) -> None:
    hpa = copy.deepcopy(named(m, "HorizontalPodAutoscaler", "paycore-checkout"))
    hpa["metadata"]["name"] = "paycore-recovery"
    hpa["spec"]["scaleTargetRef"]["name"] = "paycore-recovery"
    m.objects.append(hpa)


def open_to_everyone(m: k8s.Manifests) -> None:
    named(m, "NetworkPolicy", "paycore-checkout-ingress")["spec"]["podSelector"] = {}


def scrape_from_anywhere(m: k8s.Manifests) -> None:
    rule = named(m, "NetworkPolicy", "paycore-metrics-scrape")["spec"]["ingress"][0]
    rule["from"] = [{"ipBlock": {"cidr": "0.0.0.0/0"}}]


BREAKAGES: list[tuple[str, str, str, Mutation, str]] = [
    # (id, overlay, check, what breaks it, what the problem says)
    ("unknown-field", "dev", "schema",
     lambda m: workload(m, "paycore-checkout")["spec"].update(replica=2), "replica"),
    ("port-not-a-number", "prod", "schema",
     lambda m: named(m, "Service", "paycore-webhooks")["spec"]["ports"][0].update(port="http"),
     "is not of type 'integer'"),
    ("secret-rendered", "dev", "no-secrets",
     lambda m: m.objects.append(copy.deepcopy(m.secret_example)), "a Secret is rendered"),
    ("unknown-flag", "dev", "cli-args",
     lambda m: container(m, "paycore-checkout")["args"].extend(["--threads", "4"]), "unrecognized arguments"),
    ("bad-port", "prod", "cli-args",
     lambda m: container(m, "paycore-webhooks").update(args=["serve", "webhooks", "--port", "http"]),
     "not a port number"),
    ("sandbox-deployed", "dev", "cli-args",
     lambda m: container(m, "paycore-checkout").update(args=["serve", "sandbox", "--host", "0.0.0.0"]),
     "not deployed here"),
    ("entrypoint-replaced", "dev", "cli-args",
     lambda m: container(m, "paycore-dispatcher").update(command=["sh", "-c"]), "replaces the image's entry"),
    ("no-readiness-probe", "dev", "probes",
     lambda m: container(m, "paycore-checkout").pop("readinessProbe"), "no readinessProbe"),
    ("no-liveness-probe", "prod", "probes",
     lambda m: container(m, "paycore-dispatcher").pop("livenessProbe"), "no livenessProbe"),
    ("probe-on-wrong-port", "dev", "probes",
     lambda m: container(m, "paycore-webhooks")["livenessProbe"]["httpGet"].update(port=8000),
     "the command binds 8200"),
    ("serves-on-another-port", "prod", "probes",
     lambda m: container(m, "paycore-checkout")["args"].__setitem__(5, "9000"), "the command binds 9000"),
    ("binds-loopback", "dev", "probes",
     lambda m: container(m, "paycore-checkout")["args"].__setitem__(3, "127.0.0.1"), "not loopback"),
    ("exec-probe", "dev", "probes",
     lambda m: container(m, "paycore-webhooks").update(readinessProbe={"exec": {"command": ["true"]}}),
     "not an httpGet probe"),
    ("liveness-restarts-a-live-worker", "prod", "probes",
     lambda m: container(m, "paycore-recovery")["livenessProbe"].update(failureThreshold=3), "wait longer"),
    ("lease-outgrows-liveness-probe", "dev", "probes",
     lambda m: config_map(m, "paycore-config").update(PAYCORE_RECOVERY_LEASE_S="600"), "allows 635 s"),
    ("no-limits", "dev", "resources",
     lambda m: container(m, "paycore-recovery")["resources"].pop("limits"), "no limits for cpu, memory"),
    ("no-memory-request", "prod", "resources",
     lambda m: container(m, "paycore-migrate")["resources"]["requests"].pop("memory"),
     "no requests for memory"),
    ("runs-as-root", "prod", "security",
     lambda m: pod(m, "paycore-checkout")["securityContext"].update(
         runAsUser=0), "runAsUser is 0"),
    ("writable-root", "dev", "security",
     lambda m: container(m, "paycore-webhooks")["securityContext"].update(readOnlyRootFilesystem=False),
     "readOnlyRootFilesystem"),
    ("privilege-escalation", "prod", "security",
     lambda m: container(m, "paycore-migrate")["securityContext"].pop("allowPrivilegeEscalation"),
     "allowPrivilegeEscalation"),
    ("capability-added", "dev", "security",
     lambda m: container(m, "paycore-alerts")["securityContext"]["capabilities"].update(add=["NET_RAW"]),
     "capabilities"),
    ("unconfined-seccomp", "prod", "security",
     lambda m: pod(m, "paycore-recovery")["securityContext"].update(
         seccompProfile={"type": "Unconfined"}), "seccompProfile"),
    ("token-mounted", "dev", "security",
     lambda m: pod(m, "paycore-dispatcher").pop("automountServiceAccountToken"),
     "automountServiceAccountToken"),
    ("secret-key-undocumented", "prod", "settings-refs",
     lambda m: secret(m).pop("PAYCORE_CARDCO_API_KEY"), "reads key 'PAYCORE_CARDCO_API_KEY'"),
    ("other-secret", "dev", "settings-refs",
     lambda m: container(m, "paycore-alerts")["env"][0]["valueFrom"]["secretKeyRef"].update(name="db"),
     "Secret 'db'"),
    ("config-map-missing", "dev", "settings-refs",
     lambda m: container(m, "paycore-recovery")["envFrom"][1]["configMapRef"].update(name="accounts"),
     "ConfigMap 'accounts'"),
    ("secret-example-elsewhere", "prod", "settings-refs",
     lambda m: m.secret_example["metadata"].update(namespace="paycore-dev"), "creates Secret paycore-dev/"),
    ("config-key-missing", "prod", "settings-refs",
     lambda m: container(m, "paycore-checkout")["env"].append({"name": "PAYCORE_LOG_LEVEL", "valueFrom": {
         "configMapKeyRef": {"name": named_config(m, "paycore-config"), "key": "LOG_LEVEL"}}}),
     "reads key 'LOG_LEVEL'"),
    ("no-database", "dev", "settings",
     lambda m: drop_env(m, "paycore-consumer-email", "PAYCORE_DATABASE_URL"), "PAYCORE_DATABASE_URL"),
    ("migrate-without-database", "prod", "settings",
     lambda m: drop_env(m, "paycore-migrate", "PAYCORE_DATABASE_URL"), "migrate would not start"),
    ("no-cardco-account", "prod", "settings",
     lambda m: config_map(m, "paycore-provider-accounts").pop("PAYCORE_CARDCO_ACCOUNT"),
     "PAYCORE_CARDCO_ACCOUNT"),
    ("no-kafka", "dev", "settings",
     lambda m: config_map(m, "paycore-config").pop("PAYCORE_KAFKA_BOOTSTRAP"), "PAYCORE_KAFKA_BOOTSTRAP"),
    ("min-insync-above-replication", "dev", "settings",
     lambda m: config_map(m, "paycore-config").update(PAYCORE_KAFKA_MIN_INSYNC_REPLICAS="2"),
     "PAYCORE_KAFKA_MIN_INSYNC_REPLICAS"),
    ("alerts-without-url", "prod", "settings",
     lambda m: drop_env(m, "paycore-alerts", "PAYCORE_ALERT_WEBHOOK_URL"), "PAYCORE_ALERT_WEBHOOK_URL"),
    ("no-customer-token-key", "dev", "settings",
     lambda m: secret(m).pop("PAYCORE_JWT_SECRET"), "PAYCORE_JWT_SECRET"),
    ("jwks-without-issuer", "prod", "settings",
     lambda m: config_map(m, "paycore-config").pop("PAYCORE_JWT_ISSUER"), "PAYCORE_JWT_ISSUER"),
    ("live-key-in-test-mode", "dev", "settings",
     lambda m: secret(m).update(PAYCORE_CARDCO_API_KEY="sk_live_REPLACE_ME"), "test-mode key"),
    ("malformed-webhook-secret", "prod", "settings",
     lambda m: secret(m).update(PAYCORE_CARDCO_WEBHOOK_SECRET="whsec_REPLACE_ME"), "base64"),
    ("malformed-previous-webhook-secret", "prod", "settings",
     lambda m: secret(m).update(PAYCORE_CARDCO_WEBHOOK_SECRET_PREVIOUS="whsec_old"),
     "webhooks would not start"),
    ("webhooks-without-secret", "dev", "settings",
     lambda m: drop_env(m, "paycore-webhooks", "PAYCORE_CARDCO_WEBHOOK_SECRET"), "webhooks would not start"),
    ("dispatcher-sees-accounts-without-key", "dev", "settings",
     lambda m: container(m, "paycore-dispatcher")["envFrom"].append(
         {"configMapRef": {"name": named_config(m, "paycore-provider-accounts")}}), "PAYCORE_CARDCO_API_KEY"),
    ("recovery-lease-too-short", "prod", "settings",
     lambda m: config_map(m, "paycore-config").update(PAYCORE_RECOVERY_LEASE_S="30"),
     "PAYCORE_RECOVERY_LEASE_S"),
    ("no-default-deny", "dev", "network",
     lambda m: remove(m, "NetworkPolicy", "paycore-default-deny"), "no default-deny ingress policy"),
    ("every-pod-public", "prod", "network", open_to_everyone, "to Deployment/paycore-recovery"),
    ("scrape-from-anywhere", "dev", "network", scrape_from_anywhere, "to Deployment/paycore-dispatcher"),
    ("public-on-every-port", "prod", "network",
     lambda m: named(m, "NetworkPolicy", "paycore-webhooks-ingress")["spec"]["ingress"][0].pop("ports"),
     "on every port"),
    ("recovery-autoscaled", "dev", "autoscaling", hpa_for_recovery, "only checkout and webhooks scale"),
    ("webhooks-not-autoscaled", "prod", "autoscaling",
     lambda m: remove(m, "HorizontalPodAutoscaler", "paycore-webhooks"), "has no HorizontalPodAutoscaler"),
    ("replicas-beside-autoscaler", "prod", "autoscaling",
     lambda m: workload(m, "paycore-checkout")["spec"].update(replicas=3), "sets replicas"),
    ("autoscaling-v1", "dev", "autoscaling",
     lambda m: named(m, "HorizontalPodAutoscaler", "paycore-checkout").update(apiVersion="autoscaling/v1"),
     "not autoscaling/v2"),
    ("one-recovery-in-prod", "prod", "disruption",
     lambda m: workload(m, "paycore-recovery")["spec"].update(replicas=1), "prod needs 2"),
    ("two-checkouts-in-prod", "prod", "disruption",
     lambda m: named(m, "HorizontalPodAutoscaler", "paycore-checkout")["spec"].update(minReplicas=1),
     "prod needs 2"),
    ("no-webhooks-budget-in-prod", "prod", "disruption",
     lambda m: remove(m, "PodDisruptionBudget", "paycore-webhooks"), "no minAvailable"),
    ("budget-blocks-drains", "dev", "disruption",
     lambda m: named(m, "PodDisruptionBudget", "paycore-recovery")["spec"].update(
         minAvailable=1, maxUnavailable=None), "could never evict"),
    ("migration-runs-code", "dev", "migration",
     lambda m: container(m, "paycore-migrate").update(args=["run", "dispatcher"]), "not paycore migrate"),
    ("migration-other-image", "prod", "migration",
     lambda m: container(m, "paycore-migrate").update(image="registry.example.com/paycore:old"),
     "migrates with"),
    ("no-migration", "dev", "migration",
     lambda m: remove(m, "Job", "paycore-migrate"), "0 Jobs rendered"),
    ("two-images", "dev", "image",
     lambda m: container(m, "paycore-alerts").update(image="paycore:other"), "more than one image"),
    ("prod-by-tag-only", "prod", "image",
     lambda m: [container(m, o["metadata"]["name"]).update(image="registry.example.com/paycore:2026.12.1")
                for o in m.objects if o["kind"] in ("Deployment", "Job")], "is not pinned"),
    ("service-wrong-target", "dev", "services",
     lambda m: named(m, "Service", "paycore-checkout")["spec"]["ports"][0].update(targetPort=9000),
     "targets 9000"),
    ("service-selects-nothing", "prod", "services",
     lambda m: named(m, "Service", "paycore-webhooks")["spec"]["selector"].update(
         {"app.kubernetes.io/component": "intake"}), "selects no Deployment"),
    ("scrape-public-port", "dev", "metrics",
     lambda m: workload(m, "paycore-checkout")["spec"]["template"]["metadata"]["annotations"].update(
         {"prometheus.io/port": "8000"}), "is not its admin port 8001"),
    ("metrics-port-undeclared", "prod", "metrics",
     lambda m: container(m, "paycore-webhooks")["ports"].pop(), "declares no containerPort 8201"),
    # -- the console, the incident agent, providers as components, Kafka and PostgreSQL over TLS --
    ("console-public", "prod", "network",
     lambda m: named(m, "NetworkPolicy", "paycore-console-ingress")["spec"]["ingress"][0].update(
         {"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}), "to Deployment/paycore-console"),
    ("operators-ingress-reaches-recovery", "dev", "network",
     lambda m: named(m, "NetworkPolicy", "paycore-console-ingress")["spec"].update(podSelector={}),
     "to Deployment/paycore-recovery"),
    ("no-dispatcher-budget-in-prod", "prod", "disruption",
     lambda m: remove(m, "PodDisruptionBudget", "paycore-dispatcher"), "dispatcher has no minAvailable"),
    ("one-dispatcher-in-prod", "prod", "disruption",
     lambda m: workload(m, "paycore-dispatcher")["spec"].update(replicas=1), "dispatcher runs 1 pod(s)"),
    ("service-exposes-metrics", "dev", "services", expose_admin_port, "admin port (/metrics)"),
    ("console-on-the-public-ingress", "prod", "ingress", route_console,
     "only checkout and the webhook intake are public"),
    ("intake-at-the-root", "prod", "ingress",
     lambda m: ingress_paths(m)[0].update(path="/"), "only /webhooks/<provider> should"),
    ("ingress-reaches-an-admin-port", "prod", "ingress",
     lambda m: named(m, "Service", "paycore-webhooks")["spec"]["ports"][0].update(targetPort="metrics"),
     "not its public port 8200"),
    ("ingress-without-tls", "prod", "ingress",
     lambda m: named(m, "Ingress", "paycore")["spec"].update(tls=[]), "without TLS"),
    ("ingress-to-nothing", "prod+stripe", "ingress",
     lambda m: ingress_paths(m)[1]["backend"]["service"].update(name="checkout"), "is not rendered"),
    ("verify-full-without-ca", "prod", "tls-files",
     lambda m: secret(m).update(PAYCORE_DATABASE_URL=secret(m)["PAYCORE_DATABASE_URL"].split("&")[0]),
     "without sslrootcert"),
    ("postgres-ca-not-mounted", "prod", "tls-files",
     lambda m: drop_mount(m, "paycore-migrate", "postgres-ca"), "which no volume of the container holds"),
    ("kafka-ca-not-mounted", "prod+stripe", "tls-files",
     lambda m: drop_mount(m, "paycore-dispatcher", "kafka-ca"), "PAYCORE_KAFKA_SSL_CA_FILE"),
    ("grouping-without-the-agent", "prod+stripe", "alert-grouping",
     lambda m: remove(m, "Deployment", "paycore-incidents"), "no incident agent runs"),
    ("the-agent-without-grouping", "dev", "alert-grouping",
     lambda m: config_map(m, "paycore-config").update(PAYCORE_ALERT_INCIDENT_GROUPING="false"),
     "delivers ops.alerts although"),
    ("stripe-secret-undocumented", "prod+stripe", "settings-refs",
     lambda m: secret(m).pop("PAYCORE_STRIPE_WEBHOOK_SECRET"), "reads key 'PAYCORE_STRIPE_WEBHOOK_SECRET'"),
    ("kafka-sasl-without-password", "prod", "settings",
     lambda m: secret(m).pop("PAYCORE_KAFKA_SASL_PASSWORD"), "PAYCORE_KAFKA_SASL_PASSWORD: is required"),
    ("kafka-ca-without-tls", "prod+stripe", "settings",
     lambda m: config_map(m, "paycore-config").update(PAYCORE_KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT"),
     "PAYCORE_KAFKA_SSL_CA_FILE: is set"),
    ("console-secret-too-short", "dev", "settings",
     lambda m: secret(m).update(PAYCORE_CONSOLE_SECRET="short"), "PAYCORE_CONSOLE_SECRET"),
    ("incidents-threshold-of-one", "dev", "settings",
     lambda m: config_map(m, "paycore-config").update(PAYCORE_INCIDENTS_THRESHOLD="1"),
     "PAYCORE_INCIDENTS_THRESHOLD"),
    ("adyen-hmac-not-hex", "prod+cardco+adyen", "settings",
     lambda m: secret(m).update(PAYCORE_ADYEN_HMAC_KEY="not-hex"), "hex HMAC key"),
    ("incidents-liveness-too-short", "dev", "probes",
     lambda m: container(m, "paycore-incidents")["livenessProbe"].update(failureThreshold=3), "wait longer"),
    ("console-probe-on-admin-port", "prod", "probes",
     lambda m: container(m, "paycore-console")["readinessProbe"]["httpGet"].update(port="metrics"),
     "the command binds 8500"),
]


def test_every_check_has_a_breakage() -> None:
    assert {check for _, _, check, _, _ in BREAKAGES} == set(k8s.CHECKS)


@pytest.mark.parametrize(("overlay", "check", "mutate", "says"),
                         [pytest.param(*case[1:], id=case[0]) for case in BREAKAGES])
def test_check_fails_on_breakage(overlay: str, check: str, mutate: Mutation, says: str) -> None:
    run = k8s.CHECKS[check]
    before = run(rendered(overlay))
    m = rendered(overlay)
    mutate(m)
    new = [str(p) for p in run(m) if p not in before]
    assert any(says in p for p in new), f"{check} did not report {says!r}; new problems: {new}"
