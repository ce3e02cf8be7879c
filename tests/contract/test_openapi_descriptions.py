"""Every field and parameter of the committed OpenAPI document says what it is, and every
request body has an example (tests/integration/api/test_openapi_examples.py sends them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"
DOCUMENT: dict[str, Any] = json.loads(SNAPSHOT.read_text(encoding="utf-8"))


def test_every_property_of_every_component_schema_has_a_description() -> None:
    missing = [
        f"{name}.{field}"
        for name, schema in DOCUMENT["components"]["schemas"].items()
        for field, prop in schema.get("properties", {}).items()
        if not prop.get("description")
    ]

    assert missing == []


def test_every_parameter_has_a_description() -> None:
    missing = [
        f"{operation['operationId']}: {parameter['name']}"
        for operations in DOCUMENT["paths"].values()
        for operation in operations.values()
        for parameter in operation.get("parameters", [])
        if not parameter.get("description")
    ]

    assert missing == []


def test_every_request_body_has_examples() -> None:
    missing = [
        operation["operationId"]
        for operations in DOCUMENT["paths"].values()
        for operation in operations.values()
        if "requestBody" in operation
        and not operation["requestBody"]["content"]["application/json"].get("examples")
    ]

    assert missing == []
