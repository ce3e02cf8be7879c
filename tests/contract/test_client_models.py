"""The client speaks the document: each model it reads or sends is described in
openapi/openapi.json exactly as the client's class describes it, and each operation the
document lists has a client call of that method and path."""

from __future__ import annotations

import inspect
import json
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pytest
from fastapi.openapi.models import Schema
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

import app.client as client
from app.client import Page, calls
from app.client.calls import Call

OPENAPI = json.loads(
    (Path(__file__).parents[2] / "openapi" / "openapi.json").read_text(encoding="utf-8")
)
COMPONENTS: dict[str, Any] = OPENAPI["components"]["schemas"]
REF = "#/components/schemas/{model}"

# Served for machines, not for an API client: Prometheus scrapes /metrics, and an orchestrator
# probes /readyz.
# For scrapers and probes; HEAD /healthz is GET /healthz (a client call) without its body.
NOT_FOR_CLIENTS = {("GET", "/metrics"), ("GET", "/readyz"), ("HEAD", "/healthz")}

ID = uuid.UUID("0b8a3b0e-8a58-4bb5-9c8e-0f8f3a1c2d4e")
NOW = datetime(2026, 12, 1, tzinfo=UTC)
SAMPLE: dict[str, Any] = {
    "schedule_id": ID,
    "occurrence_id": ID,
    "key": "customer-42",
    "tenant": "customer-42",
    "key_id": ID,
    "endpoint_id": ID,
    "topic": "customer-42",
    "subscription_id": ID,
    "body": {},
    "spec": {},
    "specs": [{}],
    "changes": {},
    "limits": {},
    "request": {},
    "start": NOW,
    "end": NOW,
}


def builders() -> dict[str, Any]:
    return {
        name: build
        for name, build in vars(calls).items()
        if inspect.isfunction(build)
        and build.__module__ == calls.__name__
        and not name.startswith("_")
    }


def built(build: Any) -> Call[Any]:
    required = {
        name: SAMPLE[name]
        for name, parameter in inspect.signature(build).parameters.items()
        if parameter.default is inspect.Parameter.empty
        and parameter.kind is not parameter.VAR_KEYWORD
    }
    call: Call[Any] = build(**required)
    return call


def template(path: str) -> str:
    path = path.replace(str(ID), "{id}").replace("customer-42", "{key}")
    return re.sub(r"\{[a-z_]+\}", "{id}", path)


def test_every_operation_of_the_document_has_a_client_call() -> None:
    documented = {
        (method.upper(), template(path))
        for path, operations in OPENAPI["paths"].items()
        for method in operations
    } - {(m, template(p)) for m, p in NOT_FOR_CLIENTS}
    made = {(call.method, template(call.path)) for call in map(built, builders().values())}
    assert made == documented


def read_models() -> list[type[BaseModel]]:
    """The models the client reads answers into and takes as bodies, and the page of each
    list it follows."""
    exported = [
        model
        for model in vars(client).values()
        if isinstance(model, type) and issubclass(model, BaseModel) and model is not Page
    ]
    pages = [Page[model] for model in exported if model.__name__ in _LISTED]  # type: ignore[valid-type]
    return exported + pages


_LISTED = {
    "ScheduleOut",
    "OccurrenceOut",
    "ScheduleEventOut",
    "AttemptOut",
    "DeadLetterOut",
    "FlowKeyOut",
    "TenantOut",
    "TenantKeyOut",
    "TenantEventOut",
    "EndpointOut",
    "EndpointEventOut",
    "EndpointAttemptOut",
    "TopicOut",
    "SubscriptionOut",
}


def as_documented(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema as an OpenAPI document holds it: read into OpenAPI's Schema object and
    written without the keywords that are null (`"default": null` says nothing there)."""
    return Schema.model_validate(schema).model_dump(by_alias=True, exclude_none=True)


def component_name(model: type[BaseModel]) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", model.__name__)


@pytest.mark.parametrize("model", read_models(), ids=lambda m: m.__name__)
def test_each_model_of_the_client_is_the_documents(model: type[BaseModel]) -> None:
    mode: Literal["validation", "serialization"] = (
        "validation" if component_name(model) in _REQUEST_BODIES else "serialization"
    )
    _, schema = models_json_schema([(model, mode)], ref_template=REF)
    ours = schema.get("$defs", {})
    for name, definition in ours.items():
        assert name in COMPONENTS, f"{name} is not in openapi.json"
        assert as_documented(definition) == as_documented(COMPONENTS[name]), name


_REQUEST_BODIES = {
    ref.rsplit("/", 1)[1]
    for operations in OPENAPI["paths"].values()
    for operation in operations.values()
    for media in (operation.get("requestBody") or {}).get("content", {}).values()
    if (ref := media.get("schema", {}).get("$ref"))
}


def test_the_pages_compared_are_those_the_lists_read() -> None:
    listed = {
        re.sub(r"Call\[Page\[(\w+)\]\]", r"\1", inspect.signature(build).return_annotation)
        for name, build in builders().items()
        if name.startswith("list_")
    }
    assert listed == _LISTED
