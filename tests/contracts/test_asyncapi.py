"""docs/asyncapi.yaml parses, its references resolve, and it documents exactly the shipped schemas."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from paycore import contracts
from paycore.config import (
    KAFKA_ALERTS_PARTITIONS,
    KAFKA_ALERTS_TOPIC,
    KAFKA_EFFECTS_PARTITIONS,
    KAFKA_EFFECTS_TOPIC,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"


def document() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((DOCS / "asyncapi.yaml").read_text("utf-8"))
    return doc


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from refs(item)


def resolve(doc: dict[str, Any], pointer: str) -> Any:
    node: Any = doc
    for part in pointer.removeprefix("#/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def test_the_document_is_asyncapi_3_and_every_internal_reference_resolves() -> None:
    doc = document()
    assert doc["asyncapi"] == "3.0.0"
    for ref in refs(doc):
        if ref.startswith("#/"):
            resolve(doc, ref)  # raises KeyError when dangling


def test_it_references_exactly_the_shipped_schema_files() -> None:
    doc = document()
    files = {(DOCS / ref).resolve() for ref in refs(doc) if not ref.startswith("#")}
    assert all(f.is_file() for f in files), files
    assert files == {p.resolve() for p in contracts.schema_files().values()}


def test_each_kind_is_a_message_on_its_topic_with_its_key_and_headers() -> None:
    doc = document()
    channels = doc["channels"]
    assert channels["effects"]["address"] == KAFKA_EFFECTS_TOPIC.default
    assert channels["alerts"]["address"] == KAFKA_ALERTS_TOPIC.default
    assert channels["effects"]["bindings"]["kafka"]["partitions"] == KAFKA_EFFECTS_PARTITIONS.default
    assert channels["alerts"]["bindings"]["kafka"]["partitions"] == KAFKA_ALERTS_PARTITIONS.default
    documented = {name for c in channels.values() for name in c["messages"]}
    assert documented == contracts.kinds()
    for kind in contracts.kinds():
        message = doc["components"]["messages"][kind]
        assert message["name"] == kind
        schema_ref = message["payload"]["schema"]["$ref"]
        shipped = contracts.schema_files()[(kind, contracts.SCHEMA_VERSION)]
        assert (DOCS / schema_ref).resolve() == shipped.resolve()
        assert "key" in message["bindings"]["kafka"]
    headers = doc["components"]["schemas"]["RecordHeaders"]
    assert {"kind", "dedup_key", "message_id", "schema_version", "traceparent"} <= set(headers["properties"])
    for operation in doc["operations"].values():
        channel = resolve(doc, operation["channel"]["$ref"])
        assert all(resolve(doc, m["$ref"]) in channel["messages"].values() for m in operation["messages"])
