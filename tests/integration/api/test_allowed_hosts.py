"""The Host allow list (DNS rebinding) and redirects that never repeat the Host."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import EMBEDDED_ONLY
from tests.integration.api.test_auth import KEYS, WRITER, basic, bearer
from tests.integration.conftest import Harness

# The check sits in front of the app, before any store.
pytestmark = EMBEDDED_ONLY

PROBLEM = "application/problem+json"


def _spec(harness: Harness) -> dict[str, Any]:
    return {
        "event_type": "hosts",
        "target": harness.webhook(),
        "trigger": {"type": "once", "delay_seconds": 3600},
    }


def assert_host_refused(response: Any) -> None:
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == PROBLEM
    problem = response.json()
    assert problem["type"] == "urn:chronoq:problem:host-not-allowed"
    assert "CHRONOQ_ALLOWED_HOSTS" in problem["detail"]


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:8000",
        "localhost.evil.example",
        "127.0.0.1.nip.io",
        "0.0.0.0:8000",
        "10.0.0.5:8000",
        "[::ffff:127.0.0.1]:8000",
    ],
)
async def test_an_open_instance_refuses_a_host_that_is_not_a_loopback_name(
    harness: Harness, host: str
) -> None:
    # What a page of a rebinding site sends: its own name, now resolving to 127.0.0.1.
    created = await harness.client.post(
        "/v1/schedules", json=_spec(harness), headers={"Host": host}
    )
    listed = await harness.client.get("/v1/schedules", headers={"Host": host})

    assert_host_refused(created)
    assert_host_refused(listed)
    assert host[:30] in created.json()["detail"]
    assert (await harness.get("/v1/schedules"))["items"] == []


@pytest.mark.parametrize(
    "host",
    ["localhost", "localhost:8000", "LocalHost.:8000", "127.0.0.1:8000", "127.1.2.3", "[::1]:8000"],
)
async def test_an_open_instance_answers_the_loopback_names(harness: Harness, host: str) -> None:
    response = await harness.client.post(
        "/v1/schedules", json=_spec(harness), headers={"Host": host}
    )
    assert response.status_code == 201, response.text


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
async def test_the_probes_answer_whatever_the_host(harness: Harness, path: str) -> None:
    # An orchestrator's probe names the address it dials: a pod's IP.
    response = await harness.client.get(path, headers={"Host": "10.1.2.3:8000"})
    assert response.status_code == 200, response.text


async def test_with_keys_set_any_host_is_answered_by_default(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        response = await h.client.get(
            "/v1/schedules", headers={**bearer(WRITER), "Host": "chronoq.example.com"}
        )
        assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("host", "answered"),
    [
        ("chronoq.example.com", True),
        ("chronoq.example.com:443", True),
        ("a.internal.example", True),
        ("a.b.internal.example", True),
        ("internal.example", False),
        ("10.1.2.3:8000", True),
        ("11.0.0.1", False),
        ("[fd00::5]", True),
        ("localhost", False),
    ],
)
async def test_a_configured_list_is_applied_even_with_a_valid_key(
    make_harness: Callable[..., Any], host: str, answered: bool
) -> None:
    allowed = "chronoq.example.com,*.internal.example,10.0.0.0/8,[fd00::/8]"
    async with make_harness(api_keys=KEYS, allowed_hosts=allowed) as h:
        response = await h.client.get("/v1/schedules", headers={**bearer(WRITER), "Host": host})
        if answered:
            assert response.status_code == 200, response.text
        else:
            assert_host_refused(response)


@pytest.mark.parametrize(
    ("path", "location"),
    [
        ("/docs/", "/docs"),
        ("/redoc/", "/redoc"),
        ("/docs/?x=1", "/docs?x=1"),
        ("/docs/assets/swagger-ui", "/docs/assets/swagger-ui/"),
        ("/v1/schedules/", "/v1/schedules"),
        ("/ui/static", "/ui/static/"),
    ],
)
async def test_a_redirect_is_relative_so_it_never_repeats_the_host(
    make_harness: Callable[..., Any], path: str, location: str
) -> None:
    # Keys set, so any Host is answered: the one a request names must not come back.
    async with make_harness(api_keys=KEYS) as h:
        response = await h.client.get(path, headers={**basic(WRITER), "Host": "evil.example"})

        assert response.status_code == 307, response.text
        assert response.headers["location"] == location
        assert "evil" not in response.text
