"""Every tagged union of the committed OpenAPI document (targets, triggers, in requests and
responses alike) is a `oneOf` with a `discriminator` whose mapping names each member."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"
DOCUMENT: dict[str, Any] = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
SCHEMAS: dict[str, Any] = DOCUMENT["components"]["schemas"]
PREFIX = "#/components/schemas/"


def _unions(node: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each schema below `node` whose alternatives are all components."""
    if isinstance(node, dict):
        for key in ("oneOf", "anyOf"):
            options = node.get(key, [])
            refs = [option for option in options if "$ref" in option]
            if len(refs) > 1:
                yield where, node
        for key, value in node.items():
            yield from _unions(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _unions(value, f"{where}/{index}")


def _tag(ref: str) -> str:
    const: str = SCHEMAS[ref.removeprefix(PREFIX)]["properties"]["type"]["const"]
    return const


def test_every_union_of_components_is_one_of_with_a_discriminator_mapping_each_member() -> None:
    unions = list(_unions(SCHEMAS, "#/components/schemas"))

    assert len(unions) >= 6  # target, trigger and on_failure in ScheduleSpec alone are 3
    for where, union in unions:
        assert "anyOf" not in union, where
        refs = [option["$ref"] for option in union["oneOf"]]
        assert union["discriminator"] == {
            "propertyName": "type",
            "mapping": {_tag(ref): ref for ref in refs},
        }, where


def test_request_and_response_schemas_name_the_same_trigger_union() -> None:
    spec = SCHEMAS["ScheduleSpec"]["properties"]["trigger"]
    shown = SCHEMAS["ScheduleOut"]["properties"]["trigger"]

    assert spec["oneOf"] == shown["oneOf"]
    assert spec["discriminator"] == shown["discriminator"]
    assert set(spec["discriminator"]["mapping"]) == {"once", "immediate", "cron", "interval"}
