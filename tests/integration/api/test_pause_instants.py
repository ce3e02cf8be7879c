"""Resume gives each held occurrence its own instant; replays are not counted as firings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.integration.conftest import Harness
from tests.receiver import Reply
from tests.store import ports


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def test_a_paused_one_shot_resumed_before_its_instant_still_fires_at_its_instant(
    harness: Harness,
) -> None:
    at = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    created = await harness.create(trigger={"type": "once", "at": at.isoformat()})
    sid = created["id"]

    assert (await harness.client.post(f"/v1/schedules/{sid}/pause")).status_code == 200
    resumed = await harness.client.post(f"/v1/schedules/{sid}/resume")
    assert resumed.status_code == 200, resumed.text

    assert _instant(resumed.json()["next_fire_at"]) == at
    assert await harness.step() == 0  # not due: nothing is claimed, nothing delivered
    (occurrence,) = await harness.occurrences(sid)
    assert occurrence["status"] == "pending"
    assert _instant(occurrence["available_at"]) == at
    assert harness.receiver.on("/hook") == []


async def test_a_one_shot_whose_instant_passed_during_the_pause_fires_at_the_resume(
    harness: Harness,
) -> None:
    created = await harness.create(trigger={"type": "once", "delay_seconds": 3600})
    sid = created["id"]
    await harness.client.post(f"/v1/schedules/{sid}/pause")
    # The hour goes by while it is paused.
    await ports.move_clock_past(harness.database, _instant(created["next_fire_at"]))
    assert await harness.step() == 0  # paused: held
    assert harness.receiver.on("/hook") == []

    resumed = await harness.client.post(f"/v1/schedules/{sid}/resume")
    assert resumed.status_code == 200, resumed.text
    # Due at once: its instant is behind the resume.
    assert _instant(resumed.json()["next_fire_at"]) <= _instant(resumed.json()["updated_at"])

    assert await harness.step() == 1
    await harness.receiver.wait_for(1, "/hook")
    assert await harness.schedule_status(sid) == "completed"


async def test_a_retry_instant_held_by_a_pause_is_given_back_on_resume(make_harness) -> None:  # type: ignore[no-untyped-def]
    async with make_harness(retry_base_delay=3600.0, retry_max_delay=3600.0, jitter=False) as h:
        h.receiver.always("/flaky", Reply(503))
        created = await h.create(target=h.webhook("/flaky"))
        sid = created["id"]
        assert await h.step() == 1  # attempt 1 fails: retried in an hour
        (before,) = await h.occurrences(sid)
        retry_at = _instant(before["available_at"])
        assert retry_at > datetime.now(UTC) + timedelta(minutes=50)

        await h.client.post(f"/v1/schedules/{sid}/pause")
        await h.client.post(f"/v1/schedules/{sid}/resume")

        (after,) = await h.occurrences(sid)
        assert _instant(after["available_at"]) == retry_at
        assert await h.step() == 0


async def test_a_replayed_dead_letter_is_not_counted_as_another_firing(harness: Harness) -> None:
    harness.receiver.always("/gone", Reply(410))
    created = await harness.create(target=harness.webhook("/gone"))
    sid = created["id"]
    assert await harness.step() == 1
    assert (await harness.get(f"/v1/schedules/{sid}"))["fire_count"] == 1

    await harness.client.patch(f"/v1/schedules/{sid}", json={"target": harness.webhook("/ok")})
    replay = await harness.client.post(f"/v1/dead-letters/{created['next_occurrence_id']}/replay")
    assert replay.status_code == 202, replay.text
    assert await harness.step() == 1
    await harness.receiver.wait_for(1, "/ok")

    snapshot = await harness.get(f"/v1/schedules/{sid}")
    assert snapshot["status"] == "completed"
    assert snapshot["fire_count"] == 1


async def test_a_replayed_recurring_tick_plans_no_catch_up_and_is_counted_once(
    harness: Harness,
) -> None:
    """Replaying an old tick of a recurring schedule delivers it again, and only it: its
    cadence was planned when it first fired."""
    harness.receiver.script("/tick", Reply(410))
    # No start: the first tick is due at the create, however long the create took (a start
    # a moment ahead became the next hour's tick when a loaded machine delayed the create).
    created = await harness.create(
        target=harness.webhook("/tick"), trigger={"type": "interval", "every_seconds": 3600}
    )
    sid = created["id"]
    assert await harness.step() == 1  # the first tick dead-letters; the next is planned
    first = created["next_occurrence_id"]
    planned = {o["occurrence_id"] for o in await harness.occurrences(sid)}
    assert len(planned) == 2

    await harness.client.post(f"/v1/dead-letters/{first}/replay")
    assert await harness.step() == 1
    await harness.receiver.wait_for(2, "/tick")

    assert {o["occurrence_id"] for o in await harness.occurrences(sid)} == planned
    snapshot = await harness.get(f"/v1/schedules/{sid}")
    assert snapshot["fire_count"] == 1
    assert snapshot["skipped_count"] == 0
