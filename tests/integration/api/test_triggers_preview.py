"""POST /v1/triggers/preview: when a trigger would fire, without creating anything."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.conftest import Harness


async def _preview(harness: Harness, body: dict[str, Any], expect: int = 200) -> Any:
    response = await harness.client.post("/v1/triggers/preview", json=body)
    assert response.status_code == expect, response.text
    return response.json()


async def test_cron_in_a_zone_previews_utc_instants_across_a_dst_gap(harness: Harness) -> None:
    body = {
        "trigger": {"type": "cron", "expression": "30 2 * * *", "timezone": "America/New_York"},
        "after": "2027-03-13T12:00:00Z",
        "count": 3,
    }

    result = await _preview(harness, body)

    assert result["fire_times"] == [
        "2027-03-14T07:00:00Z",
        "2027-03-15T06:30:00Z",
        "2027-03-16T06:30:00Z",
    ]


async def test_the_dst_policy_of_the_trigger_is_honoured(harness: Harness) -> None:
    trigger = {
        "type": "cron",
        "expression": "30 1 * * *",
        "timezone": "Europe/London",
        "dst_repeat": "both",
    }

    result = await _preview(
        harness, {"trigger": trigger, "after": "2027-10-30T12:00:00Z", "count": 2}
    )

    assert result["fire_times"] == ["2027-10-31T00:30:00Z", "2027-10-31T01:30:00Z"]


async def test_interval_preview_counts_from_its_start(harness: Harness) -> None:
    trigger = {"type": "interval", "every_seconds": 90, "start_at": "2030-01-01T00:00:00Z"}

    result = await _preview(
        harness, {"trigger": trigger, "after": "2030-01-01T00:00:00Z", "count": 3}
    )

    assert result["fire_times"] == [
        "2030-01-01T00:01:30Z",
        "2030-01-01T00:03:00Z",
        "2030-01-01T00:04:30Z",
    ]


async def test_a_one_shot_previews_its_single_instant_or_nothing(harness: Harness) -> None:
    at = "2031-05-06T07:08:09Z"
    once = {"type": "once", "at": at}

    assert (await _preview(harness, {"trigger": once, "count": 5}))["fire_times"] == [at]
    later = {"trigger": once, "after": "2031-05-06T07:08:09Z"}
    assert (await _preview(harness, later))["fire_times"] == []


async def test_preview_defaults_to_after_now(harness: Harness) -> None:
    before = datetime.now(UTC)

    result = await _preview(
        harness, {"trigger": {"type": "cron", "expression": "* * * * * *"}, "count": 2}
    )

    first = datetime.fromisoformat(result["fire_times"][0])
    assert before < first < before + timedelta(seconds=3)


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        ({"trigger": {"type": "cron", "expression": "0 0 30 2 *"}}, "#/trigger/expression"),
        (
            {"trigger": {"type": "cron", "expression": "* * * * *", "timezone": "Mars/Base"}},
            "#/trigger/timezone",
        ),
        ({"trigger": {"type": "weekly"}}, "#/trigger/type"),
        ({"trigger": {"type": "immediate"}, "count": 0}, "#/count"),
        ({"trigger": {"type": "immediate"}, "count": 101}, "#/count"),
        ({"trigger": {"type": "immediate"}, "after": "2030-01-01T00:00:00"}, "#/after"),
    ],
)
async def test_an_invalid_preview_is_the_same_422_as_on_create(
    harness: Harness, body: dict[str, Any], pointer: str
) -> None:
    result = await _preview(harness, body, expect=422)

    assert pointer in [e["pointer"] for e in result["errors"]]


@pytest.mark.parametrize(
    ("expression", "complaint"),
    [
        ("0 0 * 2 1#5", "at least once in any 10 consecutive years"),
        ("0 0 29 2 1#5", "give * (or ?) for one of the two"),
    ],
)
async def test_a_preview_of_a_cron_too_sparse_is_refused_naming_the_expression(
    harness: Harness, expression: str, complaint: str
) -> None:
    trigger = {"type": "cron", "expression": expression, "timezone": "Asia/Kathmandu"}

    problem = await _preview(harness, {"trigger": trigger, "count": 100}, expect=422)

    assert [e["pointer"] for e in problem["errors"]] == ["#/trigger/expression"]
    assert complaint in problem["errors"][0]["detail"]


async def test_a_preview_of_a_rare_cron_lists_its_ticks(harness: Harness) -> None:
    # A fifth Monday in January: at most 6 years apart.
    trigger = {"type": "cron", "expression": "0 0 * 1 1#5", "timezone": "Asia/Kathmandu"}

    result = await _preview(harness, {"trigger": trigger, "after": "2026-01-01T00:00:00Z"})

    assert len(result["fire_times"]) == 10
    years = [int(at[:4]) for at in result["fire_times"]]
    assert all(0 < b - a <= 6 for a, b in itertools.pairwise(years))
