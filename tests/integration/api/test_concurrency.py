"""Optimistic concurrency: every change a client or operator makes bumps `version`, the
ETag of a schedule, and a stale If-Match is a 412 that changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.conftest import ALL_STORES
from tests.integration.conftest import Harness

# A conditional update (the version) is one of the things a database may count differently.
pytestmark = ALL_STORES

PROBLEM = "application/problem+json"
CRON = {"type": "cron", "expression": "0 9 * * *"}


async def _recurring(harness: Harness) -> dict[str, Any]:
    return await harness.create(trigger=CRON)


async def test_a_new_schedule_is_version_1_and_says_so_in_its_etag(harness: Harness) -> None:
    response = await harness.client.post(
        "/v1/schedules",
        json={"event_type": "e", "target": harness.webhook(), "trigger": CRON},
    )
    assert response.status_code == 201
    assert response.json()["version"] == 1
    assert response.headers["ETag"] == '"1"'

    read = await harness.client.get(f"/v1/schedules/{response.json()['id']}")
    assert read.headers["ETag"] == '"1"'
    assert read.json()["version"] == 1


async def test_every_change_bumps_the_version_and_deliveries_do_not(harness: Harness) -> None:
    created = await harness.create()  # immediate: delivered by the step below
    url = f"/v1/schedules/{created['id']}"
    await harness.step_until(lambda: _status_is(harness, created["id"], "completed"))
    assert (await harness.get(url))["version"] == 1  # the delivery changed nothing

    recurring = await _recurring(harness)
    url = f"/v1/schedules/{recurring['id']}"
    versions = []
    for method, path, body in [
        ("PATCH", "", {"payload": {"n": 2}}),
        ("POST", "/pause", None),
        ("POST", "/resume", None),
        ("POST", "/trigger", None),
        ("POST", "/backfill", _past_day()),
        ("DELETE", "", None),
    ]:
        response = await harness.client.request(method, url + path, json=body)
        assert response.status_code < 300, (path, response.text)
        versions.append((await harness.get(url))["version"])
    assert versions == [2, 3, 4, 5, 6, 7]


def _past_day() -> dict[str, str]:
    now = datetime.now(UTC)
    return {
        "from": (now - timedelta(days=2)).isoformat(),
        "to": (now - timedelta(days=1)).isoformat(),
    }


async def _status_is(harness: Harness, schedule_id: str, status: str) -> bool:
    return await harness.schedule_status(schedule_id) == status


CHANGES = [
    pytest.param("PATCH", "", {"payload": {"changed": True}}, id="patch"),
    pytest.param("DELETE", "", None, id="cancel"),
    pytest.param("POST", "/pause", None, id="pause"),
    pytest.param("POST", "/trigger", None, id="trigger"),
    pytest.param("POST", "/backfill", "past", id="backfill"),
]


@pytest.mark.parametrize(("method", "path", "body"), CHANGES)
async def test_a_stale_if_match_is_a_412_and_changes_nothing(
    harness: Harness, method: str, path: str, body: Any
) -> None:
    created = await _recurring(harness)
    url = f"/v1/schedules/{created['id']}"
    patched = await harness.client.patch(url, json={"labels": {"v": "2"}}, headers=_if("1"))
    assert patched.status_code == 200
    assert patched.headers["ETag"] == '"2"'
    before = await harness.get(url)
    history = await harness.occurrences(created["id"])

    response = await harness.client.request(
        method, url + path, json=_past_day() if body == "past" else body, headers=_if("1")
    )

    assert response.status_code == 412, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    assert "version 2" in response.json()["detail"]
    assert await harness.get(url) == before
    assert await harness.occurrences(created["id"]) == history


async def test_resume_honours_if_match_too(harness: Harness) -> None:
    created = await _recurring(harness)
    url = f"/v1/schedules/{created['id']}"
    paused = await harness.client.post(f"{url}/pause", headers=_if("1"))
    assert paused.headers["ETag"] == '"2"'

    stale = await harness.client.post(f"{url}/resume", headers=_if("1"))
    fresh = await harness.client.post(f"{url}/resume", headers=_if("2"))

    assert stale.status_code == 412
    assert fresh.status_code == 200
    assert fresh.json()["status"] == "pending"
    assert fresh.headers["ETag"] == '"3"'


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        pytest.param("*", 200, id="any version"),
        pytest.param('"7", "1"', 200, id="a list naming the current one"),
        pytest.param('W/"1"', 412, id="a weak tag never matches"),
        pytest.param("1", 412, id="an unquoted tag names nothing"),
        pytest.param('"99999999999999999999999"', 412, id="a huge number"),
    ],
)
async def test_if_match_forms(harness: Harness, header: str, expected: int) -> None:
    created = await _recurring(harness)
    response = await harness.client.patch(
        f"/v1/schedules/{created['id']}", json={"payload": {}}, headers={"If-Match": header}
    )
    assert response.status_code == expected, response.text


def _if(version: str) -> dict[str, str]:
    return {"If-Match": f'"{version}"'}
