"""Activity by the minute: the roll-up of the attempt log counts each attempt once, in the
minute it started, for the fleet and for its tenant, endpoint and flow key, with its
delivery's lateness in the right bucket; rolling up again gives the same figures; a
schedule's figures read from its log agree; old minutes are pruned."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from app.domain.activity import BUCKETS, MINUTE, Minute, Scope, bucket_of, floor_minute
from app.domain.occurrence import OccurrenceStatus, Settlement
from app.worker.activity import ActivityRollup
from tests.conftest import make_settings
from tests.store import ports
from tests.store.ports import Database

LATE = timedelta(seconds=3.5)  # well inside the (2.5 s, 5 s] bucket however slow the claim


def _sum(minutes: tuple[Minute, ...]) -> Minute:
    total = Minute(at=minutes[0].at)
    for minute in minutes:
        total = total + minute
    return total


async def _three_outcomes(database: Database) -> dict[str, Any]:
    """Four schedules due `LATE` ago: one delivered on flow key "acme", one delivered to an
    endpoint, one retried, one dead-lettered, each settled after one attempt."""
    now = await ports.database_now(database)
    endpoint = await ports.make_endpoint(database)
    drafts = {
        "delivered": ports.draft(ports.once(now - LATE), flow_key="acme"),
        "to_endpoint": ports.draft(ports.once(now - LATE), target=ports.endpoint_target(endpoint)),
        "retried": ports.draft(ports.once(now - LATE)),
        "dead": ports.draft(ports.once(now - LATE)),
    }
    await ports.insert_schedules(database, list(drafts.values()))
    by_schedule = {d.schedule_id: d for d in await ports.claim(database, limit=10)}
    outcome: dict[str, dict[str, Any]] = {
        "delivered": dict(status=OccurrenceStatus.DELIVERED, status_code=200),
        "to_endpoint": dict(status=OccurrenceStatus.DELIVERED, status_code=200),
        "retried": dict(status=OccurrenceStatus.PENDING, error="503", retry_in=60),
        "dead": dict(status=OccurrenceStatus.DEAD_LETTERED, error="410"),
    }
    await ports.settle(
        database,
        [Settlement(by_schedule[drafts[name].id], **fields) for name, fields in outcome.items()],
    )
    return {**drafts, "endpoint": endpoint}


async def test_each_attempt_counts_once_in_its_minute_for_each_of_its_subjects(
    database: Database,
) -> None:
    made = await _three_outcomes(database)
    now = await ports.database_now(database)
    since, until = floor_minute(now) - MINUTE, floor_minute(now) + 2 * MINUTE

    await ports.roll_up_activity(database, since, until)

    fleet = await ports.activity(database, Scope.FLEET, "", since, until)
    assert [m.at for m in fleet] == [since, since + MINUTE, since + 2 * MINUTE]
    late = [0] * BUCKETS
    late[bucket_of(LATE.total_seconds())] = 1
    both = [2 * n for n in late]
    expected = (2, 2, 1, tuple(both))
    total = _sum(fleet)
    assert (total.delivered, total.failed, total.dead_lettered, total.lateness) == expected
    tenant = _sum(await ports.activity(database, Scope.TENANT, "default", since, until))
    assert (tenant.delivered, tenant.failed, tenant.dead_lettered) == (2, 2, 1)
    key = _sum(await ports.activity(database, Scope.FLOW_KEY, "default/acme", since, until))
    assert (key.delivered, key.failed, key.lateness) == (1, 0, tuple(late))
    endpoint = str(made["endpoint"])
    to_endpoint = _sum(await ports.activity(database, Scope.ENDPOINT, endpoint, since, until))
    assert (to_endpoint.delivered, to_endpoint.failed) == (1, 0)
    other = _sum(await ports.activity(database, Scope.TENANT, "other", since, until))
    assert (other.delivered, other.failed) == (0, 0)


async def test_rolling_up_again_gives_the_same_figures_and_a_schedules_log_agrees(
    database: Database,
) -> None:
    made = await _three_outcomes(database)
    now = await ports.database_now(database)
    since, until = floor_minute(now) - MINUTE, floor_minute(now) + 2 * MINUTE
    await ports.roll_up_activity(database, since, until)
    first = await ports.activity(database, Scope.FLEET, "", since, until)
    rows = await ports.count_rows(database, "activity_minutes")

    await ports.roll_up_activity(database, since, until)

    assert await ports.activity(database, Scope.FLEET, "", since, until) == first
    assert await ports.count_rows(database, "activity_minutes") == rows
    dead = _sum(await ports.schedule_activity(database, made["dead"].id, since, until))
    assert (dead.delivered, dead.failed, dead.dead_lettered) == (0, 1, 1)
    delivered = _sum(await ports.schedule_activity(database, made["delivered"].id, since, until))
    assert (delivered.delivered, delivered.failed) == (1, 0)
    assert delivered.lateness[bucket_of(LATE.total_seconds())] == 1


async def test_a_settled_attempt_carries_its_occurrences_instant_tenant_and_flow_key(
    database: Database,
) -> None:
    made = await _three_outcomes(database)

    (occurrence,) = await ports.read_occurrence_rows(database, made["delivered"].id)
    copies = await ports.attempt_copies(database, made["delivered"].id)

    assert copies == [(occurrence.fire_at, "default", "default/acme")]


async def test_attempts_that_carry_nothing_of_their_occurrence_count_the_same(
    database: Database,
) -> None:
    """Attempts logged before they carried their occurrence's instant, tenant and flow key
    (or by a claim or a stop) are read through their occurrence, beside those that do, and
    add up in the same minutes."""
    made = await _three_outcomes(database)
    now = await ports.database_now(database)
    since, until = floor_minute(now) - MINUTE, floor_minute(now) + 2 * MINUTE
    subjects = [
        (Scope.FLEET, ""),
        (Scope.TENANT, "default"),
        (Scope.FLOW_KEY, "default/acme"),
        (Scope.ENDPOINT, str(made["endpoint"])),
    ]
    await ports.roll_up_activity(database, since, until)
    carried = [await ports.activity(database, *subject, since, until) for subject in subjects]

    await ports.forget_attempt_copies(database, [made["delivered"].id, made["dead"].id])
    await ports.roll_up_activity(database, since, until)

    assert [await ports.activity(database, *s, since, until) for s in subjects] == carried
    assert (_sum(carried[0]).delivered, _sum(carried[2]).delivered) == (2, 1)


async def test_an_attempt_outside_the_minutes_rolled_up_is_not_counted(
    database: Database,
) -> None:
    await _three_outcomes(database)
    now = await ports.database_now(database)
    since = floor_minute(now) + MINUTE

    await ports.roll_up_activity(database, since, since + MINUTE)

    (minute,) = await ports.activity(database, Scope.FLEET, "", since, since + MINUTE)
    assert (minute.delivered, minute.failed) == (0, 0)


async def test_old_minutes_are_pruned_and_later_ones_kept(database: Database) -> None:
    await _three_outcomes(database)
    now = await ports.database_now(database)
    since, until = floor_minute(now) - 2 * MINUTE, floor_minute(now) + MINUTE
    await ports.roll_up_activity(database, since, until)

    deleted = await ports.prune_activity(database, since + MINUTE)

    assert deleted == 1  # the fleet's empty minute, two before the attempts'
    kept = await ports.activity(database, Scope.FLEET, "", since, until)
    assert _sum(kept).delivered == 2


async def test_the_first_rounds_catch_up_an_hour_at_a_time_from_the_first_attempt(
    database: Database,
) -> None:
    await _three_outcomes(database)
    attempted = floor_minute(await ports.database_now(database))
    ports.move_clock(database, timedelta(hours=2, minutes=30))
    rollup = ActivityRollup(database, make_settings("sqlite://"))

    await rollup.run_once()

    rolled = await ports.count_rows(database, "activity_minutes")
    first = await ports.activity(database, Scope.FLEET, "", attempted, attempted + 2 * MINUTE)
    assert _sum(first).delivered == 2
    now = floor_minute(await ports.database_now(database))
    for _ in range(4):  # the rest of the two and a half hours, an hour a round
        await rollup.run_once()
    assert rolled < await ports.count_rows(database, "activity_minutes")
    every = await ports.activity(database, Scope.FLEET, "", attempted, now + MINUTE)
    assert _sum(every).delivered == 2
    rolled_to = await ports.activity_rolled_to(database)
    assert rolled_to is not None
    assert rolled_to >= now
