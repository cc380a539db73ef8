"""The message contracts: well-formed schemas, compatible with their released snapshots, safe messages."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from paycore import contracts, currencies
from paycore.domain import OPERATION_EFFECTS

from .compat import breaking_changes

RELEASED = Path(__file__).parent / "released"


def released(kind: str, version: int = 1) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((RELEASED / f"{kind}.v{version}.json").read_text("utf-8"))
    return schema


def released_versions() -> set[tuple[str, int]]:
    return {(p.name.split(".v")[0], int(p.name.split(".v")[1].removesuffix(".json")))
            for p in RELEASED.glob("*.json")}


SHIPPED = sorted(contracts.schema_files())


def test_the_contracts_cover_every_kind_the_producers_write() -> None:
    # paycore.attempts (confirmation, fulfillment), paycore.notifications (refund),
    # paycore.escalations and the reminder job (operator-alert); the incidents agent (incident);
    # paycore.operations (what captures, voids and refunds end as); paycore.holds (a lapse);
    # settlement reconciliation (paycore.settlement_effects: a batch reconciled).
    assert contracts.kinds() == {"order-confirmation", "fulfillment-request", "refund-request",
                                 "operator-alert", "incident", "authorization-lapsed",
                                 "settlement-reconciled", *OPERATION_EFFECTS.values()}


@pytest.mark.parametrize(("kind", "version"), SHIPPED)
def test_each_schema_is_a_2020_12_schema_with_the_envelope_and_a_conforming_example(
    kind: str, version: int
) -> None:
    schema = contracts.load_schema(kind, version)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)
    assert {"schema_version", "kind", "dedup_key"} <= set(schema["required"])
    assert schema["properties"]["schema_version"] == {**schema["properties"]["schema_version"],
                                                      "type": "integer", "const": version}
    assert schema["properties"]["kind"]["const"] == kind
    assert schema["additionalProperties"] is True  # an added optional field stays compatible
    for sample in schema["examples"]:
        assert contracts.validate(sample) == []
        assert contracts.validate({**sample, "added_later": {"any": "thing"}}) == []


@pytest.mark.parametrize(("kind", "version"), SHIPPED)
def test_every_shipped_schema_is_compatible_with_its_released_snapshot(kind: str, version: int) -> None:
    assert (kind, version) in released_versions(), (
        f"{kind} v{version} has no released snapshot: copy it to tests/contracts/released/ when it ships")
    assert breaking_changes(released(kind, version), contracts.load_schema(kind, version)) == []


def test_no_released_contract_disappears() -> None:
    # A consumer built against a released kind/version must keep finding it.
    assert released_versions() <= set(SHIPPED)


BASE: dict[str, Any] = {
    "type": "object", "required": ["a", "e"], "additionalProperties": True,
    "properties": {"a": {"type": "string"}, "n": {"type": ["integer", "null"], "minimum": 0},
                   "e": {"type": "string", "enum": ["x", "y"]}},
}


def mutated(change: Any) -> dict[str, Any]:
    schema = copy.deepcopy(BASE)
    change(schema)
    return schema


@pytest.mark.parametrize(("change", "expected"), [
    (lambda s: s["properties"].pop("n"), "$.n: removed or renamed"),
    (lambda s: s["properties"].update(m=s["properties"].pop("n")), "$.n: removed or renamed"),
    (lambda s: s["properties"]["a"].update(type="integer"), "$.a: type changed"),
    (lambda s: s["properties"]["n"].update(type="integer"), "$.n: type changed"),  # narrowed
    (lambda s: s["properties"]["a"].update(type=["string", "null"]), "$.a: type changed"),  # widened
    (lambda s: s["properties"]["e"].update(enum=["x"]), "$.e: enum changed"),
    (lambda s: s["properties"]["e"].update(enum=["x", "y", "z"]), "$.e: enum changed"),
    (lambda s: s["properties"]["n"].update(minimum=1), "$.n: minimum changed"),
    (lambda s: s["properties"]["a"].update(format="uuid"), "$.a: format changed"),
    (lambda s: s["required"].append("n"), "$.n: newly required"),
    (lambda s: s["required"].remove("e"), "$.e: no longer required"),
    (lambda s: s.update(additionalProperties=False), "$: additionalProperties changed"),
])
def test_the_comparison_finds_each_kind_of_breaking_change(change: Any, expected: str) -> None:
    problems = breaking_changes(BASE, mutated(change))
    assert any(p.startswith(expected) for p in problems), problems


def test_the_comparison_allows_optional_additions_annotations_and_reordering() -> None:
    def compatible(s: dict[str, Any]) -> None:
        s["properties"]["new"] = {"type": "string", "description": "optional, added later"}
        s["properties"]["a"]["description"] = "reworded"
        s["properties"]["n"]["type"] = ["null", "integer"]
        s["examples"] = [{"a": "1", "e": "x"}]
    assert breaking_changes(BASE, mutated(compatible)) == []


def test_removing_a_property_from_a_shipped_schema_is_caught_against_the_released_snapshot() -> None:
    current = contracts.load_schema("order-confirmation")
    del current["properties"]["provider_payment_id"]
    current["required"].remove("provider_payment_id")
    assert breaking_changes(released("order-confirmation"), current) == [
        "$.provider_payment_id: no longer required (old consumers rely on it)",
        "$.provider_payment_id: removed or renamed",
    ]


SECRET = "4242424242424242"  # stands for any payload value: it must never reach a problem text


@pytest.mark.parametrize(("change", "expected"), [
    ({"amount_minor": SECRET}, ["order-confirmation v1: $.amount_minor: violates type \"integer\""]),
    ({"attempt_id": SECRET}, ["order-confirmation v1: $.attempt_id: violates format \"uuid\""]),
    ({"currency": SECRET}, ["order-confirmation v1: $.currency: violates pattern \"^[A-Z]{3}$\""]),
    ({"order_id": None}, ["order-confirmation v1: $.order_id: violates type \"string\""]),
    ({"schema_version": 9}, ["$.kind: no schema for kind 'order-confirmation' version 9"]),
    ({"kind": "loyalty-points"}, ["$.kind: no schema for kind 'loyalty-points' version 1"]),
    ({"schema_version": "1"}, ["$.schema_version: required, an integer"]),
    ({"schema_version": True}, ["$.schema_version: required, an integer"]),
])
def test_a_problem_names_the_path_and_the_rule_never_the_value(
    change: dict[str, Any], expected: list[str]
) -> None:
    problems = contracts.validate(contracts.example("order-confirmation", **change))
    assert problems == expected
    assert SECRET not in " ".join(problems)


def test_a_missing_required_field_is_named() -> None:
    sample = contracts.example("operator-alert")
    del sample["escalation_id"], sample["reminder"]  # a reminder must say which one
    assert contracts.validate(sample) == [
        "operator-alert v1: $: required property 'escalation_id' missing",
        "operator-alert v1: $: required property 'reminder' missing",
    ]
    assert contracts.validate([sample]) == ["$: the payload is not a JSON object"]
    with pytest.raises(contracts.ContractViolation, match="escalation_id"):
        contracts.check(sample)


def test_a_payload_written_before_contracts_reads_as_version_1() -> None:
    legacy = contracts.example("refund-request")
    del legacy["schema_version"]
    assert contracts.validate(legacy) == ["$.schema_version: required, an integer"]
    assert contracts.validate(contracts.with_version(legacy)) == []


def test_every_accepted_currency_at_its_largest_amount_conforms() -> None:
    # The contract must not refuse what checkout accepts (property over paycore.currencies).
    for code in currencies.EXPONENTS:
        largest = currencies.max_amount_minor(code)
        sample = contracts.example("order-confirmation", currency=code, amount_minor=largest)
        assert contracts.validate(sample) == [], code


def test_validators_are_compiled_once_per_kind_and_version() -> None:
    contracts._validator.cache_clear()
    for _ in range(50):
        for kind, _version in SHIPPED:
            contracts.validate(contracts.example(kind))
    assert contracts._validator.cache_info().misses == len(SHIPPED)


ODD_VALUES: list[Any] = [None, True, False, 0, -1, 1, 1.0, 1.5, 2**70, "", "x", "EUR", "eur", "EURO",
                         "5f0c3c1e-8b7a-4f7e-9d2a-1c2b3d4e5f60", "5f0c3c1e8b7a4f7e9d2a1c2b3d4e5f60",
                         "5F0C3C1E-8B7A-4F7E-9D2A-1C2B3D4E5F60", "5f0c3c1e-8b7a-4f7e-9d2a-1c2b3d4e5f60\n",
                         "{5f0c3c1e-8b7a-4f7e-9d2a-1c2b3d4e5f60}",
                         "urn:uuid:5f0c3c1e-8b7a-4f7e-9d2a-1c2b3d4e5f60",
                         "5f0c3c1e-8b7a-4f7e-9d2a-1c2b3d4e5f6g", "5f0c3c1e-8b7a4f7e-9d2a-1c2b3d4e-5f60",
                         "initial", "reminder", "order-confirmation", [], {}, {"a": 1}]


@pytest.mark.parametrize(("kind", "version"), SHIPPED)
def test_the_fast_check_never_accepts_what_jsonschema_refuses(kind: str, version: int) -> None:
    compiled = contracts._validator(kind, version)
    assert compiled is not None
    validator, accept = compiled
    assert accept is not None, "a shipped schema uses a keyword the fast check does not compile"
    rng = random.Random(f"{kind}.v{version}")
    sample = contracts.example(kind)
    names = [*contracts.load_schema(kind, version)["properties"], "extra"]
    agreed = accepted = 0
    for _ in range(1500):
        payload = dict(sample)
        for _ in range(rng.randint(1, 3)):
            name = rng.choice(names)
            if rng.random() < 0.2:
                payload.pop(name, None)
            else:
                payload[name] = rng.choice(ODD_VALUES)
        fast, full = accept(payload), validator.is_valid(payload)
        assert not fast or full, payload  # sound: a fast "yes" is always jsonschema's "yes"
        agreed += fast == full
        accepted += fast
    assert accepted > 0 and agreed > 1400  # and it is not a check that says "no" to everything
    assert contracts.validate(sample) == [] and accept(sample)
