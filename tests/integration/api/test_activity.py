"""GET /v1/activity: what happened minute by minute, of the fleet or of one tenant,
schedule, flow key or endpoint, as the attempt log says once it is rolled up; bad input
is a 4xx naming its parameter."""

from __future__ import annotations

from typing import Any

from app.worker.activity import ActivityRollup
from tests.integration.conftest import Harness
from tests.receiver import Reply


async def _roll_up(harness: Harness) -> None:
    await ActivityRollup(harness.database, harness.settings).run_once()


async def _delivered_and_dead(harness: Harness) -> tuple[dict[str, Any], dict[str, Any]]:
    """One schedule delivered on flow key "acme", one dead-lettered (a 410)."""
    harness.receiver.always("/gone", Reply(410))
    delivered = await harness.create(flow_key="acme")
    dead = await harness.create(target=harness.webhook("/gone"))
    assert await harness.step() == 2
    return delivered, dead


def _totals(found: dict[str, Any]) -> tuple[int, int, int]:
    totals = found["totals"]
    return totals["delivered"], totals["failed"], totals["dead_lettered"]


async def test_the_fleets_minutes_add_up_to_what_was_delivered_and_dead_lettered(
    harness: Harness,
) -> None:
    await _delivered_and_dead(harness)
    before = await harness.get("/v1/activity")
    assert before["current_to"] is None  # nothing rolled up yet
    assert _totals(before) == (0, 0, 0)

    await _roll_up(harness)
    found = await harness.get("/v1/activity")

    assert (found["scope"], found["subject"], found["window"]) == ("fleet", None, "1h")
    assert len(found["minutes"]) == 60
    assert found["current_to"] is not None
    assert _totals(found) == (1, 1, 1)
    minutes = found["minutes"]
    assert sum(m["delivered"] for m in minutes) == 1
    assert sum(m["dead_lettered"] for m in minutes) == 1
    (busy,) = [m for m in minutes if m["delivered"]]
    assert busy["lateness_p99_seconds"] == found["totals"]["lateness_p99_seconds"]
    assert sum(b["count"] for b in found["totals"]["lateness_buckets"]) == 1
    day = await harness.get("/v1/activity?window=24h")
    assert len(day["minutes"]) == 1440
    assert _totals(day) == (1, 1, 1)


async def test_one_schedule_flow_key_or_tenant_has_its_own_figures(harness: Harness) -> None:
    delivered, dead = await _delivered_and_dead(harness)
    await _roll_up(harness)

    of_dead = await harness.get(f"/v1/activity?schedule_id={dead['id']}")
    of_key = await harness.get("/v1/activity?flow_key=acme")
    of_tenant = await harness.get("/v1/activity?tenant=default")
    of_other_key = await harness.get("/v1/activity?flow_key=other")

    assert (of_dead["scope"], of_dead["subject"]) == ("schedule", dead["id"])
    assert _totals(of_dead) == (0, 1, 1)
    assert (of_key["scope"], of_key["subject"]) == ("flow_key", "acme")
    assert _totals(of_key) == (1, 0, 0)
    assert _totals(of_tenant) == (1, 1, 1)
    assert _totals(of_other_key) == (0, 0, 0)
    of_delivered = await harness.get(f"/v1/activity?schedule_id={delivered['id']}")
    assert _totals(of_delivered) == (1, 0, 0)


async def test_bad_input_is_a_4xx_naming_its_parameter(harness: Harness) -> None:
    created = await harness.create()
    cases = {
        "?window=2h": (422, "window"),
        "?flow_key=a%20b": (422, "flow_key"),
        "?schedule_id=nope": (422, "schedule_id"),
        f"?schedule_id={created['id']}&flow_key=acme": (422, "flow_key"),
        "?tenant=Nope": (422, "tenant"),
        "?schedule_id=01a24eea-34cc-7e40-bf06-d03d9953e77a": (404, None),
        "?endpoint_id=01a24eea-34cc-7e40-bf06-d03d9953e77a": (404, None),
        "?tenant=missing": (404, None),
    }
    for query, (status, parameter) in cases.items():
        response = await harness.client.get(f"/v1/activity{query}")
        assert response.status_code == status, (query, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        if parameter is not None:
            assert parameter in response.text, (query, response.text)
