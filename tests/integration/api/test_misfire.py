"""Misfire policies: the delivery loop is stopped across several ticks of a one-second
interval and started again; what each policy fires and skips is read back over the API.

The ticks go by on the database clock, moved forward (tests.store.ports.move_clock)
rather than waited for. The assertions are about structure: every tick of the schedule
is accounted for exactly once (delivered or skipped), and each policy fires and skips the
ticks it promises to.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from app.worker.dispatcher import Dispatcher
from tests.factories import iso
from tests.integration.conftest import Harness
from tests.stepping import step
from tests.store import ports
from tests.waiting import eventually

TICK = timedelta(seconds=1)
# How long after the third missed tick the loop runs again.
OUTAGE_MARGIN = timedelta(milliseconds=100)


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def _run_loop_until(harness: Harness, condition: Callable[[], Awaitable[bool]]) -> None:
    """Step the delivery loop until `condition` holds. (A step claims nothing ahead of its
    instant: the ticks the clock has not reached wait for it.)"""
    # Claims 0.1 s apart: one claim takes all of a gap's catch-ups, whose order is kept.
    settings = harness.settings.model_copy(update={"min_cycle_delay": 0.1})
    dispatcher = Dispatcher(harness.database, harness.sinks, settings, rng=random.Random(3))

    async def ran() -> bool:
        await step(dispatcher, harness.database.clock)
        return await condition()

    await eventually(ran, within=20.0)


def _delivered_ticks(harness: Harness) -> list[datetime]:
    return [_at(r.headers["X-Scheduled-For"]) for r in harness.receiver.requests]


async def _stopped_across_ticks(harness: Harness, **policy: Any) -> tuple[str, datetime, datetime]:
    """A one-second interval fires once, the loop stops for three ticks, then runs
    again until the schedule has planned a tick after the restart. Returns the schedule
    id, the first tick and the restart instant."""
    now = await ports.database_now(harness.database)
    start = (now + timedelta(milliseconds=300)).replace(microsecond=0) + TICK
    created = await harness.create(
        trigger={"type": "interval", "every_seconds": 1, "start_at": iso(start)}, **policy
    )
    schedule_id = created["id"]
    # A create that a loaded machine delayed past `start` begins at the next tick.
    start = _at(created["next_fire_at"])

    async def first_delivered() -> bool:
        return len(harness.receiver.requests) >= 1

    await ports.move_clock_past(harness.database, start)
    await _run_loop_until(harness, first_delivered)
    # Stopped while three ticks after the first go by.
    restart = await ports.move_clock_past(harness.database, start + 3 * TICK + OUTAGE_MARGIN)

    async def caught_up() -> bool:
        snapshot = await harness.get(f"/v1/schedules/{schedule_id}")
        pending = [
            o
            for o in await harness.occurrences(schedule_id)
            if o["status"] == "pending" and (o["attempts"] > 0 or _at(o["fire_at"]) <= restart)
        ]
        planned = snapshot["next_fire_at"] is not None and _at(snapshot["next_fire_at"]) > restart
        return planned and not pending

    await _run_loop_until(harness, caught_up)
    return schedule_id, start, restart


def _entries(history: list[dict[str, Any]], until: datetime) -> dict[datetime, dict[str, Any]]:
    """The schedule's entries up to `until`, by tick; every tick has exactly one."""
    past = [o for o in history if _at(o["fire_at"]) <= until and o["skip_reason"] != "dst_gap"]
    by_tick = {_at(o["fire_at"]): o for o in past}
    assert len(by_tick) == len(past), "a tick has two entries"
    return by_tick


def _assert_every_tick_accounted(
    by_tick: dict[datetime, dict[str, Any]], start: datetime, restart: datetime
) -> list[datetime]:
    """Every tick from the first one to the restart has an entry; returns the gap's ticks."""
    ticks = []
    tick = start
    while tick <= restart:
        assert tick in by_tick, f"the tick at {iso(tick)} left no trace"
        ticks.append(tick)
        tick += TICK
    missed = ticks[1:]
    assert len(missed) >= 3, f"the outage should span several ticks, got {len(missed)}"
    return missed


async def test_fire_once_fires_one_catch_up_and_records_the_other_missed_ticks(
    harness: Harness,
) -> None:
    schedule_id, start, restart = await _stopped_across_ticks(harness)

    history = await harness.occurrences(schedule_id)
    by_tick = _entries(history, restart)
    missed = _assert_every_tick_accounted(by_tick, start, restart)

    # The first missed tick fires as the one catch-up; the rest collapse into it.
    assert by_tick[missed[0]]["status"] == "delivered"
    for tick in missed[1:]:
        assert by_tick[tick]["status"] == "skipped"
        assert by_tick[tick]["skip_reason"] == "misfire"
        assert by_tick[tick]["skipped_count"] == 1
    assert _delivered_ticks(harness)[:2] == [start, missed[0]]
    snapshot = await harness.get(f"/v1/schedules/{schedule_id}")
    assert snapshot["misfire_policy"] == "fire_once"
    assert snapshot["skipped_count"] == len(missed) - 1
    assert snapshot["last_skip_reason"] == "misfire"
    assert _at(snapshot["next_fire_at"]) > restart


async def test_fire_all_fires_every_missed_tick_in_order_with_its_own_id(
    harness: Harness,
) -> None:
    schedule_id, start, restart = await _stopped_across_ticks(harness, misfire_policy="fire_all")

    history = await harness.occurrences(schedule_id)
    by_tick = _entries(history, restart)
    missed = _assert_every_tick_accounted(by_tick, start, restart)

    for tick in missed:
        assert by_tick[tick]["status"] == "delivered", by_tick[tick]
    assert {by_tick[t]["origin"] for t in missed[1:]} == {"catchup"}
    delivered = _delivered_ticks(harness)
    assert delivered[: len(missed) + 1] == [start, *missed]  # in order
    ids = [r.occurrence_id for r in harness.receiver.requests]
    assert len(set(ids)) == len(ids)
    assert {str(by_tick[t]["occurrence_id"]) for t in missed} <= set(ids)
    snapshot = await harness.get(f"/v1/schedules/{schedule_id}")
    assert snapshot["skipped_count"] == 0
    assert snapshot["last_skip_reason"] is None


async def test_fire_all_fires_at_most_max_catchup_and_records_the_rest(
    harness: Harness,
) -> None:
    schedule_id, start, restart = await _stopped_across_ticks(
        harness, misfire_policy="fire_all", max_catchup=1
    )

    by_tick = _entries(await harness.occurrences(schedule_id), restart)
    missed = _assert_every_tick_accounted(by_tick, start, restart)

    # The claimed tick plus one catch-up fire; of the rest one is listed, then a summary.
    assert [by_tick[t]["status"] for t in missed[:2]] == ["delivered", "delivered"]
    rest = missed[2:]
    assert by_tick[rest[0]]["status"] == "skipped"
    assert by_tick[rest[0]]["skipped_count"] == 1
    if len(rest) > 1:
        summary = by_tick[rest[1]]
        assert summary["status"] == "skipped"
        assert summary["skipped_count"] == len(rest) - 1
    snapshot = await harness.get(f"/v1/schedules/{schedule_id}")
    assert snapshot["skipped_count"] == len(rest)


async def test_skip_drops_ticks_older_than_the_grace_and_fires_the_rest(
    harness: Harness,
) -> None:
    grace = 1.0
    schedule_id, start, restart = await _stopped_across_ticks(
        harness, misfire_policy="skip", misfire_grace_seconds=grace
    )

    by_tick = _entries(await harness.occurrences(schedule_id), restart)
    missed = _assert_every_tick_accounted(by_tick, start, restart)

    cutoff = restart - timedelta(seconds=grace)
    skipped = [t for t in missed if by_tick[t]["status"] == "skipped"]
    fired = [t for t in missed if by_tick[t]["status"] == "delivered"]
    assert sorted(skipped + fired) == missed
    assert len(skipped) >= 2
    # The claim came after the restart: what it skipped was older than the grace by then,
    # and what it fired was not.
    assert all(t < cutoff for t in skipped)
    assert all(t >= cutoff for t in fired)
    assert {by_tick[t]["skip_reason"] for t in skipped} == {"misfire"}
    snapshot = await harness.get(f"/v1/schedules/{schedule_id}")
    assert snapshot["misfire_policy"] == "skip"
    assert snapshot["misfire_grace_seconds"] == grace
    assert snapshot["skipped_count"] == len(skipped)


async def test_ticks_inside_a_pause_are_recorded_as_skipped(harness: Harness) -> None:
    start = (await ports.database_now(harness.database)).replace(microsecond=0) + 2 * TICK
    created = await harness.create(
        trigger={"type": "interval", "every_seconds": 1, "start_at": iso(start)}
    )
    schedule_id = created["id"]
    paused = await harness.client.post(f"/v1/schedules/{schedule_id}/pause")
    assert paused.status_code == 200
    # Three ticks inside the pause.
    await ports.move_clock_past(harness.database, start + 2 * TICK)
    assert await harness.step() == 0  # nothing fires while paused

    resumed = (await harness.client.post(f"/v1/schedules/{schedule_id}/resume")).json()

    resumed_at = _at(resumed["updated_at"])
    skipped = sorted(
        _at(o["fire_at"])
        for o in await harness.occurrences(schedule_id)
        if o["status"] == "skipped" and o["skip_reason"] == "paused"
    )
    expected = []
    tick = start
    while tick <= resumed_at:
        expected.append(tick)
        tick += TICK
    assert skipped == expected
    assert resumed["skipped_count"] == len(expected)
    assert resumed["last_skip_reason"] == "paused"
    assert _at(resumed["next_fire_at"]) == expected[-1] + TICK
    assert harness.receiver.requests == []


async def test_a_pause_lists_max_catchup_ticks_then_one_entry_for_the_rest(
    harness: Harness,
) -> None:
    start = await ports.database_now(harness.database) - timedelta(hours=1)
    created = await harness.create(
        trigger={"type": "interval", "every_seconds": 1, "start_at": iso(start)},
        max_catchup=1,
    )
    schedule_id = created["id"]
    paused = (await harness.client.post(f"/v1/schedules/{schedule_id}/pause")).json()
    # Three ticks inside the pause.
    await ports.move_clock_past(harness.database, _at(paused["updated_at"]) + 3 * TICK)

    resumed = (await harness.client.post(f"/v1/schedules/{schedule_id}/resume")).json()

    paused_at, resumed_at = _at(paused["updated_at"]), _at(resumed["updated_at"])
    ticks = int((resumed_at - start) / TICK) - int((paused_at - start) / TICK)
    entries = sorted(
        (o for o in await harness.occurrences(schedule_id) if o["status"] == "skipped"),
        key=lambda o: o["fire_at"],
    )
    assert ticks >= 3
    assert [o["skipped_count"] for o in entries] == [1, ticks - 1]
    assert {o["skip_reason"] for o in entries} == {"paused"}
    assert resumed["skipped_count"] == ticks
