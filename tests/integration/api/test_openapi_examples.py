"""The examples of the served OpenAPI document succeed as they are: what Swagger's "Try it
out" sends from /docs is accepted, not a 422."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from app.cli.command import build_parser
from tests.integration.api.test_auth import KEYS, WRITER
from tests.integration.conftest import Harness

ROOT = Path(__file__).resolve().parents[3]

# Every store takes the same bodies: one is enough.
SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

_METHOD_ORDER = {"put": 0, "post": 1, "patch": 2, "get": 3, "delete": 4}


@pytest.fixture
async def harness(make_harness: Callable[..., Any]) -> AsyncIterator[Harness]:
    """A service with operator keys, as a deployment has them (a tenant key is made only
    then), and each request with the write key."""
    async with make_harness(api_keys=KEYS) as keyed:
        keyed.client.headers["Authorization"] = f"Bearer {WRITER}"
        yield keyed


async def _document(harness: Harness) -> dict[str, Any]:
    response = await harness.client.get("/openapi.json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    found = [
        (method, path, operation)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        if path.startswith("/v1/")
    ]
    return sorted(found, key=lambda item: (_METHOD_ORDER[item[0]], item[1]))


async def _made(harness: Harness, document: dict[str, Any], path: str) -> str:
    """A resource made from the create operation's first example at `path` (a schedule,
    an endpoint), as a reader of the document would make one before trying the operations
    on it: its id."""
    create = document["paths"][path]["post"]
    examples = create["requestBody"]["content"]["application/json"]["examples"]
    first = await _with_endpoint(harness, document, next(iter(examples.values()))["value"])
    response = await harness.client.post(path, json=first)
    assert response.status_code == 201, response.text
    made: str = response.json()["id"]
    return made


async def _with_endpoint(harness: Harness, document: dict[str, Any], value: Any) -> Any:
    """A body example as a reader sends it: one that names an endpoint (a subscription's)
    names one made from the endpoint create's example first (its topic is the example
    topic, put by the PUT example run before)."""
    if not isinstance(value, dict) or "endpoint_id" not in value:
        return value
    if "topic" in value:
        await harness.client.put(f"/v1/topics/{value['topic']}", json={})
    return {**value, "endpoint_id": await _made(harness, document, "/v1/endpoints")}


# The path parameters named by a resource's id, and where that resource is made.
_MADE_AT = {
    "schedule_id": "/v1/schedules",
    "endpoint_id": "/v1/endpoints",
    "subscription_id": "/v1/subscriptions",
}


def _has_example(parameter: dict[str, Any]) -> bool:
    return any(
        "example" in where or "examples" in where for where in (parameter, parameter["schema"])
    )


def _example(parameter: dict[str, Any]) -> Any:
    """A parameter's example, where OpenAPI lets it be: on the parameter, or its schema."""
    if "example" in parameter:
        return parameter["example"]
    if "examples" in parameter:
        return next(iter(parameter["examples"].values()))["value"]
    schema = parameter["schema"]
    return schema["example"] if "example" in schema else schema["examples"][0]


async def _path(
    harness: Harness, document: dict[str, Any], path: str, operation: dict[str, Any]
) -> str:
    for parameter in operation.get("parameters", []):
        if parameter["in"] != "path":
            continue
        name = parameter["name"]
        if _has_example(parameter):
            value = str(_example(parameter))
        elif name in _MADE_AT:
            value = await _made(harness, document, _MADE_AT[name])
        else:
            raise AssertionError(f"no example for path parameter {name} of {path}")
        path = path.replace("{" + name + "}", value)
    return path


@SQLITE
async def test_every_request_body_example_succeeds_as_it_is(harness: Harness) -> None:
    document = await _document(harness)
    tried = []
    for method, path, operation in _operations(document):
        body = operation.get("requestBody")
        if body is None:
            continue
        examples = body["content"]["application/json"]["examples"]
        assert examples, f"{method.upper()} {path} has no example"
        for name, example in examples.items():
            url = await _path(harness, document, path, operation)
            value = await _with_endpoint(harness, document, example["value"])
            response = await harness.client.request(method, url, json=value)
            assert 200 <= response.status_code < 300, (method, path, name, response.text)
            tried.append(operation["operationId"])
    assert {
        "create_schedule",
        "create_schedules",
        "patch_schedule",
        "backfill_schedule",
        "replay_dead_letters",
        "put_flow_key",
        "put_tenant",
        "preview_trigger",
        "create_endpoint",
        "patch_endpoint",
        "rotate_endpoint_secret",
        "put_topic",
        "create_subscription",
        "patch_subscription",
    } <= set(tried)


@SQLITE
async def test_operations_called_with_their_example_parameters_succeed(harness: Harness) -> None:
    """Operations without a body whose path parameters all carry examples (a flow key's
    name, a tenant's id), called with them: read and removed, each after the example of the
    path's PUT put it."""
    document = await _document(harness)
    called = []
    for method, path, operation in _operations(document):
        parameters = [p for p in operation.get("parameters", []) if p["in"] == "path"]
        if "requestBody" in operation or not parameters or not all(map(_has_example, parameters)):
            continue
        url = await _path(harness, document, path, operation)
        put = document["paths"][path].get("put")
        if put is not None:  # there is something to read and to remove
            examples = put["requestBody"]["content"]["application/json"]["examples"]
            await harness.client.put(url, json=next(iter(examples.values()))["value"])
        response = await harness.client.request(method, url)
        assert 200 <= response.status_code < 300, (method, path, response.text)
        called.append(operation["operationId"])
    assert {"get_flow_key", "delete_flow_key", "get_tenant", "delete_tenant"} <= set(called)


def _webhook_urls(node: Any) -> list[str]:
    """Every webhook target's URL in a part of the document."""
    if isinstance(node, list):
        return [url for item in node for url in _webhook_urls(item)]
    if not isinstance(node, dict):
        return []
    found = [url for value in node.values() for url in _webhook_urls(value)]
    if node.get("type") == "webhook" and isinstance(node.get("url"), str):
        found.append(node["url"])
    return found


@SQLITE
async def test_the_examples_deliver_to_the_walkthroughs_receiver(harness: Harness) -> None:
    """A schedule made with "Try it out" is delivered where the README's walkthrough runs
    `chronoq receiver`, which prints it, rather than to a port nothing listens on."""
    walkthrough = (ROOT / "README.md").read_text(encoding="utf-8")
    ports = set(re.findall(r"chronoq receiver --port (\d+)", walkthrough))
    assert len(ports) == 1, ports
    (port,) = ports
    assert int(port) == build_parser().parse_args(["receiver"]).port
    document = await _document(harness)
    examples = [
        example["value"]
        for operations in document["paths"].values()
        for operation in operations.values()
        for example in operation.get("requestBody", {})
        .get("content", {})
        .get("application/json", {})
        .get("examples", {})
        .values()
    ]
    urls = _webhook_urls(examples)
    assert urls, "the examples create webhooks"
    for url in urls:
        assert url.startswith(f"http://127.0.0.1:{port}/"), url
