"""Auto-pause through the HTTP API: dead letters in a row pause a schedule by itself."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest

from app.domain.occurrence import Delivery
from app.store.loop.claims import ClaimStore
from app.telemetry.logs import TextFormatter
from tests.integration.api.test_bad_input import assert_problem_names
from tests.integration.api.test_events import events, kinds, ok
from tests.integration.conftest import Harness
from tests.receiver import Reply
from tests.store import ports

HOUR = {"type": "once", "delay_seconds": 3600}


async def failing(harness: Harness, threshold: int | None, path: str = "/bad") -> dict[str, Any]:
    """A one-shot due in an hour whose deliveries dead-letter at once (one attempt, 400):
    each trigger adds an occurrence that fails."""
    harness.receiver.always(path, Reply(400))
    return await harness.create(
        target=harness.webhook(path),
        trigger=HOUR,
        max_attempts=1,
        pause_after_failures=threshold,
    )


async def fire(harness: Harness, schedule_id: str, times: int = 1) -> None:
    for _ in range(times):
        await ok(harness, "POST", f"/v1/schedules/{schedule_id}/trigger")
    await harness.step()


async def test_dead_letters_in_a_row_pause_the_schedule_with_reason_failures(
    harness: Harness,
) -> None:
    created = await failing(harness, threshold=3)
    assert created["pause_after_failures"] == 3
    assert created["consecutive_failures"] == 0
    path = f"/v1/schedules/{created['id']}"

    await fire(harness, created["id"], times=2)  # two of one schedule in one batch
    counted = await harness.get(path)
    assert (counted["status"], counted["consecutive_failures"]) == ("pending", 2)

    await fire(harness, created["id"])
    paused = await harness.get(path)

    assert paused["status"] == "paused"
    assert paused["pause_reason"] == "failures"
    assert paused["consecutive_failures"] == 3
    assert paused["version"] == counted["version"] + 2  # its trigger, then the pause
    # Held as a manual pause holds it: the hour's occurrence is not claimable.
    pending = [o for o in await harness.occurrences(created["id"]) if o["status"] == "pending"]
    assert len(pending) == 1
    assert pending[0]["available_at"] is None
    assert kinds(await events(harness, created["id"]))[-1] == (
        "auto_paused",
        paused["version"],
        "system",
    )


async def test_a_delivery_in_between_starts_the_count_again(harness: Harness) -> None:
    created = await failing(harness, threshold=2, path="/mixed")
    harness.receiver.script("/mixed", Reply(400), Reply(200), Reply(400))
    path = f"/v1/schedules/{created['id']}"

    await fire(harness, created["id"])
    assert (await harness.get(path))["consecutive_failures"] == 1
    await fire(harness, created["id"])
    assert (await harness.get(path))["consecutive_failures"] == 0
    await fire(harness, created["id"])

    snapshot = await harness.get(path)
    assert (snapshot["status"], snapshot["consecutive_failures"]) == ("pending", 1)
    assert snapshot["pause_reason"] is None


async def test_without_a_threshold_dead_letters_are_counted_and_nothing_pauses(
    harness: Harness,
) -> None:
    created = await failing(harness, threshold=None)

    await fire(harness, created["id"], times=3)

    snapshot = await harness.get(f"/v1/schedules/{created['id']}")
    assert (snapshot["status"], snapshot["consecutive_failures"]) == ("pending", 3)


async def test_resume_clears_the_reason_and_the_count(harness: Harness) -> None:
    created = await failing(harness, threshold=1)
    path = f"/v1/schedules/{created['id']}"
    await fire(harness, created["id"])
    assert (await harness.get(path))["pause_reason"] == "failures"

    resumed = await ok(harness, "POST", f"{path}/resume")

    assert resumed["status"] == "pending"
    assert resumed["pause_reason"] is None
    assert resumed["consecutive_failures"] == 0
    assert [k for k, _, _ in kinds(await events(harness, created["id"]))][-2:] == [
        "auto_paused",
        "resumed",
    ]


async def test_a_manual_pause_says_manual(harness: Harness) -> None:
    created = await harness.create(trigger=HOUR)
    path = f"/v1/schedules/{created['id']}"

    paused = await ok(harness, "POST", f"{path}/pause")
    assert paused["pause_reason"] == "manual"
    cancelled = await ok(harness, "DELETE", path)
    assert cancelled["pause_reason"] is None


async def test_a_threshold_set_by_patch_applies_and_can_be_lifted(harness: Harness) -> None:
    created = await failing(harness, threshold=None, path="/later")
    path = f"/v1/schedules/{created['id']}"

    patched = await ok(harness, "PATCH", path, json={"pause_after_failures": 1})
    assert patched["pause_after_failures"] == 1
    lifted = await ok(harness, "PATCH", path, json={"pause_after_failures": None})
    assert lifted["pause_after_failures"] is None
    await ok(harness, "PATCH", path, json={"pause_after_failures": 1})
    await fire(harness, created["id"])

    assert (await harness.get(path))["pause_reason"] == "failures"


@pytest.mark.parametrize("value", [0, 1001, "5", 1.5, True])
async def test_a_bad_threshold_is_a_422_naming_the_field(harness: Harness, value: Any) -> None:
    body = {
        "event_type": "e",
        "target": harness.webhook(),
        "trigger": HOUR,
        "pause_after_failures": value,
    }
    created = await harness.client.post("/v1/schedules", json=body)
    assert_problem_names(created, 422, "#/pause_after_failures")

    schedule = await harness.create(trigger=HOUR)
    patched = await harness.client.patch(
        f"/v1/schedules/{schedule['id']}", json={"pause_after_failures": value}
    )
    assert_problem_names(patched, 422, "#/pause_after_failures")
    batch = await harness.client.post("/v1/schedules/batch", json={"items": [body]})
    assert_problem_names(batch, 422, "#/items/0/pause_after_failures")


async def test_an_attempt_lost_with_its_replica_counts_when_its_lease_runs_out(
    harness: Harness,
) -> None:
    """A replica that dies on the last attempt leaves it unsettled; the claim that finds
    its lease run out dead-letters it, and that dead letter counts like any other."""
    created = await failing(harness, threshold=1)
    await ok(harness, "POST", f"/v1/schedules/{created['id']}/trigger")
    claims = ClaimStore()

    async def claim() -> list[Delivery]:
        found = await harness.database.run(
            lambda conn: claims.claim(conn, limit=10, lease=30.0, owner="lost-replica")
        )
        return list(found.deliveries)

    (lost,) = await claim()  # claimed, never settled: the replica is gone
    assert await harness.schedule_status(created["id"]) == "pending"
    await ports.run_out_lease(harness.database, lost.occurrence_id)
    assert await claim() == []  # its budget was spent: dead-lettered, not delivered

    paused = await harness.get(f"/v1/schedules/{created['id']}")
    assert (paused["status"], paused["pause_reason"]) == ("paused", "failures")
    assert paused["consecutive_failures"] == 1
    assert kinds(await events(harness, created["id"]))[-1][::2] == ("auto_paused", "system")


async def test_an_auto_pause_is_counted_in_the_metrics(harness: Harness) -> None:
    name = "chronoq_schedules_auto_paused_total"

    async def paused_so_far() -> float:
        text = (await harness.client.get("/metrics")).text
        found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
        assert found, f"{name} is exported"
        return float(found.group(1))

    before = await paused_so_far()
    created = await failing(harness, threshold=2)
    await fire(harness, created["id"])
    assert await paused_so_far() == before  # one dead letter, below the threshold
    await fire(harness, created["id"])

    assert await harness.schedule_status(created["id"]) == "paused"
    assert await paused_so_far() == before + 1


async def test_an_auto_pause_is_one_warning_naming_the_schedule_its_failures_and_threshold(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    harness.receiver.always("/down", Reply(400))
    created = await harness.create(
        name="nightly-report",
        target=harness.webhook("/down"),
        trigger=HOUR,
        max_attempts=1,
        pause_after_failures=2,
    )
    with caplog.at_level(logging.INFO, logger="app.worker"):
        await fire(harness, created["id"], times=2)

    warnings = [
        r for r in caplog.records if r.levelno == logging.WARNING and "paused itself" in r.message
    ]
    assert len(warnings) == 1
    line = TextFormatter().format(warnings[0])
    assert f"schedule {created['id']} (nightly-report) paused itself after 2 occurrences" in line
    assert line.endswith(
        f"schedule_id={created['id']} schedule_name=nightly-report consecutive_failures=2 "
        "pause_after_failures=2"
    )
