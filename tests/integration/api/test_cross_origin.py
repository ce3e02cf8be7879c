"""CSRF: a change made with credentials a browser sends by itself (HTTP Basic, or none when no
key is set) must come from this service's own origin, or from no page at all."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import EMBEDDED_ONLY
from tests.integration.api.test_auth import KEYS, READER, WRITER, basic, bearer, spec
from tests.integration.conftest import Harness

# The check sits in front of the app, before any store.
pytestmark = EMBEDDED_ONLY

# The harness's client reaches the app as http://localhost (Host: localhost).
OWN_ORIGIN = "http://localhost"
FOREIGN_ORIGINS = [
    pytest.param("https://evil.example", id="another site"),
    pytest.param("null", id="null"),
    pytest.param("http://localhost.evil.example", id="look-alike"),
    pytest.param("https://localhost", id="another scheme"),
    pytest.param("http://localhost:8080", id="another port"),
    pytest.param("http://localhost/ui", id="not an origin"),
]


async def _status(harness: Harness, schedule_id: str) -> str:
    response = await harness.client.get(f"/v1/schedules/{schedule_id}", headers=bearer(READER))
    status: str = response.json()["status"]
    return status


def _changes(schedule_id: str) -> list[tuple[str, str]]:
    return [
        ("POST", f"/v1/schedules/{schedule_id}/pause"),
        ("POST", f"/v1/schedules/{schedule_id}/trigger"),
        ("DELETE", f"/v1/schedules/{schedule_id}"),
        ("POST", "/v1/dead-letters/replay"),
    ]


@pytest.mark.parametrize("origin", FOREIGN_ORIGINS)
async def test_a_change_with_basic_from_another_origin_is_403_and_changes_nothing(
    make_harness: Callable[..., Any], origin: str
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        made = await h.client.post("/v1/schedules", json=spec(h), headers=bearer(WRITER))
        schedule_id = made.json()["id"]
        for method, path in _changes(schedule_id):
            response = await h.client.request(
                method, path, headers={**basic(WRITER), "Origin": origin}
            )

            assert response.status_code == 403, (method, path, response.text)
            assert response.headers["content-type"] == "application/problem+json"
            problem = response.json()
            assert problem["type"] == "urn:chronoq:problem:cross-origin"
            assert "another site" in problem["detail"]
        assert await _status(h, schedule_id) == "pending"
        events = await h.client.get(f"/v1/schedules/{schedule_id}/events", headers=bearer(WRITER))
        assert [e["kind"] for e in events.json()["items"]] == ["created"]


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({"Origin": OWN_ORIGIN}, id="own origin"),
        pytest.param({"Origin": "HTTP://LocalHost:80"}, id="own origin spelt otherwise"),
        pytest.param({}, id="no origin"),
        # Behind a proxy that ends TLS the request reaches the app as http://: the browser
        # still says that the page is this service's.
        pytest.param(
            {"Origin": "https://localhost", "Sec-Fetch-Site": "same-origin"}, id="fetch metadata"
        ),
    ],
)
async def test_a_change_with_basic_from_the_own_origin_or_no_page_is_made(
    make_harness: Callable[..., Any], headers: dict[str, str]
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        made = await h.client.post("/v1/schedules", json=spec(h), headers=bearer(WRITER))
        schedule_id = made.json()["id"]

        response = await h.client.post(
            f"/v1/schedules/{schedule_id}/pause", headers={**basic(WRITER), **headers}
        )

        assert response.status_code == 200, response.text
        assert await _status(h, schedule_id) == "paused"


async def test_a_bearer_key_is_never_sent_by_a_browser_on_its_own_so_any_origin_may_use_it(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        made = await h.client.post(
            "/v1/schedules",
            json=spec(h),
            headers={**bearer(WRITER), "Origin": "https://evil.example"},
        )
        assert made.status_code == 201, made.text
        schedule_id = made.json()["id"]

        response = await h.client.post(
            f"/v1/schedules/{schedule_id}/pause",
            headers={**bearer(WRITER), "Origin": "https://evil.example"},
        )

        assert response.status_code == 200, response.text
        assert await _status(h, schedule_id) == "paused"


async def test_reading_with_basic_from_another_origin_is_not_refused(
    make_harness: Callable[..., Any],
) -> None:
    # What a page of another site reads, the browser keeps from it (no CORS headers).
    async with make_harness(api_keys=KEYS) as h:
        response = await h.client.get(
            "/v1/schedules", headers={**basic(WRITER), "Origin": "https://evil.example"}
        )
        assert response.status_code == 200, response.text


async def test_an_open_instance_refuses_a_change_from_another_origin(harness: Harness) -> None:
    # No key set: a browser needs no credentials at all, so any page it shows could send this.
    created = await harness.create(trigger={"type": "once", "delay_seconds": 3600})
    pause = f"/v1/schedules/{created['id']}/pause"

    refused = await harness.client.post(pause, headers={"Origin": "https://evil.example"})

    assert refused.status_code == 403, refused.text
    assert refused.json()["type"] == "urn:chronoq:problem:cross-origin"
    assert await harness.schedule_status(created["id"]) == "pending"
    assert (await harness.client.post(pause, headers={"Origin": OWN_ORIGIN})).status_code == 200
    assert await harness.schedule_status(created["id"]) == "paused"


async def test_a_refusal_says_which_origins_it_compared_and_what_to_do(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        made = await h.client.post("/v1/schedules", json=spec(h), headers=bearer(WRITER))
        pause = f"/v1/schedules/{made.json()['id']}/pause"

        # What a proxy that passes the Host without the browser's port causes.
        refused = await h.client.post(
            pause, headers={**basic(WRITER), "Origin": "http://localhost:8080"}
        )

        assert refused.status_code == 403
        detail = refused.json()["detail"]
        assert "Origin 'http://localhost:8080'" in detail
        assert "this service's origin is 'http://localhost'" in detail
        assert "proxy_set_header Host $http_host" in detail
        assert "CHRONOQ_PUBLIC_ORIGIN" in detail
        assert WRITER not in detail
        assert len(detail) < 600
        assert await _status(h, made.json()["id"]) == "pending"


async def test_a_change_through_a_trusted_proxy_is_compared_with_the_host_it_forwards(
    make_harness: Callable[..., Any],
) -> None:
    # The harness's client is the peer 127.0.0.1, which CHRONOQ_FORWARDED_ALLOW_IPS trusts
    # unless told otherwise.
    forwarded = {
        **basic(WRITER),
        "X-Forwarded-Host": "localhost:8080",
        "Origin": "http://localhost:8080",
    }
    async with make_harness(api_keys=KEYS) as h:
        made = await h.client.post("/v1/schedules", json=spec(h), headers=bearer(WRITER))
        response = await h.client.post(
            f"/v1/schedules/{made.json()['id']}/pause", headers=forwarded
        )
        assert response.status_code == 200, response.text
        assert await _status(h, made.json()["id"]) == "paused"
    async with make_harness(api_keys=KEYS, forwarded_allow_ips="10.0.0.0/8") as h:
        made = await h.client.post("/v1/schedules", json=spec(h), headers=bearer(WRITER))
        response = await h.client.post(
            f"/v1/schedules/{made.json()['id']}/pause", headers=forwarded
        )
        assert response.status_code == 403, response.text
        assert await _status(h, made.json()["id"]) == "pending"


async def test_a_change_from_the_public_origin_is_made(make_harness: Callable[..., Any]) -> None:
    public = "https://chronoq.example.com"
    async with make_harness(api_keys=KEYS, public_origin=public) as h:
        made = await h.client.post("/v1/schedules", json=spec(h), headers=bearer(WRITER))
        schedule_id = made.json()["id"]

        refused = await h.client.post(
            f"/v1/schedules/{schedule_id}/pause",
            headers={**basic(WRITER), "Origin": "https://chronoq.example.com:8443"},
        )
        assert refused.status_code == 403
        assert f"'{public}' (CHRONOQ_PUBLIC_ORIGIN)" in refused.json()["detail"]

        response = await h.client.post(
            f"/v1/schedules/{schedule_id}/pause", headers={**basic(WRITER), "Origin": public}
        )
        assert response.status_code == 200, response.text
        assert await _status(h, schedule_id) == "paused"
