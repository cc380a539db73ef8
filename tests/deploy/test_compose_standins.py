"""deploy/compose/standins.yml against docker-compose.yml, with no container engine.

The override is what `make test-deploy` runs where no registry answers: every image the
compose file pulls must have a stand-in built by deploy/standins/build.sh, or its service
must sit under a profile nothing starts here; and kafka-init's replacement must create the
topics with the workers' own settings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
STANDINS = ROOT / "deploy" / "compose" / "standins.yml"
SKIPPED_PROFILE = "registry-only"


class _Loader(yaml.SafeLoader):
    """Compose's merge tags, read as their plain values (``!reset`` as None)."""


def _override(loader: yaml.SafeLoader, node: yaml.Node) -> object:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    assert isinstance(node, yaml.SequenceNode), node
    return loader.construct_sequence(node, deep=True)


_Loader.add_constructor("!reset", lambda loader, node: None)
_Loader.add_constructor("!override", _override)


def _services(path: Path, loader: type[yaml.SafeLoader] = yaml.SafeLoader) -> dict[str, Any]:
    data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    services = data["services"]
    assert isinstance(services, dict)
    return services


def test_every_pulled_image_has_a_stand_in_or_a_skipped_profile() -> None:
    compose, standins = _services(COMPOSE), _services(STANDINS, _Loader)
    build_sh = (ROOT / "deploy" / "standins" / "build.sh").read_text(encoding="utf-8")
    paycore = compose["checkout"]["image"]  # kafka-init's stand-in runs paycore's own code
    for name, service in compose.items():
        if "build" in service:
            continue  # the paycore image, built here
        override = standins.get(name) or {}
        if override.get("profiles") == [SKIPPED_PROFILE]:
            continue
        image = str(override.get("image") or "")
        if image == paycore:
            continue
        assert image.startswith("localhost/paycore-"), f"{name}: {service['image']} has no stand-in"
        assert f"image={image};" in build_sh, f"{name}: deploy/standins/build.sh does not build {image}"


def test_the_stand_ins_override_only_services_of_the_file() -> None:
    assert set(_services(STANDINS, _Loader)) <= set(_services(COMPOSE))


def test_kafka_init_creates_the_topics_with_the_workers_settings() -> None:
    workers = _services(COMPOSE)["dispatcher"]["environment"]
    init = _services(STANDINS, _Loader)["kafka-init"]
    assert init["environment"] == {key: workers[key] for key in init["environment"]}
    assert {"PAYCORE_KAFKA_BOOTSTRAP", "PAYCORE_KAFKA_REPLICATION_FACTOR",
            "PAYCORE_KAFKA_MIN_INSYNC_REPLICAS", "PAYCORE_KAFKA_RETENTION_S"} <= set(init["environment"])
    assert "ensure_topics" in " ".join(init["command"]) and init["read_only"] is True
