"""Claims: exclusive leases, oldest due first, attempts counted, leases that run out."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

from app.domain.destinations import destination_of
from app.domain.ids import occurrence_id
from app.domain.occurrence import Delivery, OccurrenceStatus, Settlement
from app.domain.schedule import ScheduleStatus
from app.domain.target import WebhookTarget
from tests.store import ports
from tests.store.ports import Database


async def test_concurrent_claimers_each_take_every_occurrence_exactly_once(
    database: Database, store_url: str
) -> None:
    drafts = [ports.draft(ports.immediate()) for _ in range(300)]
    await ports.insert_schedules(database, drafts)
    expected = {row.occurrence_id for row in await ports.read_occurrence_rows(database)}
    assert len(expected) == 300
    # Each claimer has a pool of its own, as separate replicas do.
    claimers = [Database(store_url) for _ in range(4)]

    async def drain(claimer: Database) -> list[Delivery]:
        mine: list[Delivery] = []
        while batch := await ports.claim(claimer, limit=25, owner=f"replica-{id(claimer)}"):
            assert len(batch) <= 25
            mine += batch
        return mine

    try:
        results = await asyncio.gather(*(drain(claimer) for claimer in claimers))
    finally:
        for claimer in claimers:
            await claimer.close()

    counts = Counter(d.occurrence_id for claimed in results for d in claimed)
    assert set(counts) == expected, "an occurrence was skipped"
    assert max(counts.values()) == 1, "an occurrence was claimed twice"
    assert {d.attempt for claimed in results for d in claimed} == {1}
    rows = await ports.read_occurrence_rows(database)
    assert {row.attempts for row in rows} == {1}
    # Every lease is one of the tokens handed out, so each claimer can settle its own.
    tokens = {d.occurrence_id: d.lease_token for claimed in results for d in claimed}
    assert all(row.lease_token == tokens[row.occurrence_id] for row in rows)


async def test_claim_takes_the_oldest_due_first_counts_the_attempt_and_keeps_the_limit(
    database: Database,
) -> None:
    now = datetime.now(UTC)
    # Stored newest first: the claim must still hand out the oldest due first.
    due = [ports.draft(ports.once(now - timedelta(seconds=k))) for k in range(1, 6)]
    future = ports.draft(ports.once(now + timedelta(hours=1)))
    await ports.insert_schedules(database, [*due, future])
    oldest_first = [d.id for d in reversed(due)]

    batch = await ports.claim(database, limit=3)

    assert [d.schedule_id for d in batch] == oldest_first[:3]
    assert [d.attempt for d in batch] == [1, 1, 1]
    assert len({d.lease_token for d in batch}) == 1, "one claim, one lease token"
    for d in batch:
        (row,) = await ports.read_occurrence_rows(database, d.schedule_id)
        assert (row.status, row.attempts, row.lease_token) == (
            OccurrenceStatus.PENDING,
            1,
            d.lease_token,
        )

    rest = await ports.claim(database, limit=10)
    assert [d.schedule_id for d in rest] == oldest_first[3:]
    assert await ports.claim(database, limit=10) == [], "a future occurrence was claimed"
    (row,) = await ports.read_occurrence_rows(database, future.id)
    assert (row.attempts, row.lease_token) == (0, None)


async def test_keyed_occurrences_fill_the_room_unkeyed_ones_leave_in_one_claim(
    database: Database,
) -> None:
    now = datetime.now(UTC)
    unkeyed = [ports.draft(ports.once(now - timedelta(seconds=k))) for k in (1, 2)]
    keyed = [
        ports.draft(ports.once(now - timedelta(seconds=k)), flow_key="customer-42")
        for k in (3, 4, 5)
    ]
    later = ports.draft(ports.once(now + timedelta(hours=1)), flow_key="customer-42")
    await ports.insert_schedules(database, [*unkeyed, *keyed, later])

    batch = await ports.claim(database, limit=4)
    # Every unkeyed one (no key holds them back) and the oldest keyed ones fill the
    # limit, under one lease, handed out oldest first.
    assert [d.schedule_id for d in batch] == [
        keyed[2].id,
        keyed[1].id,
        unkeyed[1].id,
        unkeyed[0].id,
    ]
    assert len({d.lease_token for d in batch}) == 1
    rest = await ports.claim(database, limit=10)
    assert [d.schedule_id for d in rest] == [keyed[0].id]
    assert await ports.claim(database, limit=10) == [], "a future keyed occurrence was claimed"
    (row,) = await ports.read_occurrence_rows(database, later.id)
    assert (row.attempts, row.lease_token) == (0, None)


async def test_an_idle_claim_waits_for_the_next_keyed_occurrence_too(database: Database) -> None:
    soon = ports.draft(ports.once(datetime.now(UTC) + timedelta(seconds=60)), flow_key="k.1")
    later = ports.draft(ports.once(datetime.now(UTC) + timedelta(hours=2)))
    await ports.insert_schedules(database, [later, soon])

    due = await ports.due_in(database)
    assert due is not None
    assert 50 < due <= 60


async def test_an_expired_lease_is_claimed_again_and_only_the_new_token_settles(
    database: Database,
) -> None:
    schedule = ports.draft(ports.immediate())
    await ports.insert_schedules(database, [schedule])

    (first,) = await ports.claim(database, limit=1, lease=30.0)
    assert await ports.claim(database, limit=1) == [], "claimed again at once"
    lease_end = (await ports.read_lease(database, first.occurrence_id)).available_at
    assert lease_end is not None
    await ports.move_clock_past(database, lease_end - timedelta(seconds=5))
    assert await ports.claim(database, limit=1) == [], "claimed again before its lease ran out"

    await ports.move_clock_past(database, lease_end)
    (second,) = await ports.claim(database, limit=1)
    assert second.occurrence_id == first.occurrence_id
    assert second.attempt == 2
    assert second.lease_token != first.lease_token

    # A late answer of the first attempt, a delivery or a failure for good, changes
    # nothing: the occurrence is the second claim's now.
    for late in (
        Settlement(first, OccurrenceStatus.DELIVERED),
        Settlement(first, OccurrenceStatus.DEAD_LETTERED, error="late"),
    ):
        await ports.settle(database, [late])
        (row,) = await ports.read_occurrence_rows(database, schedule.id)
        assert (row.status, row.attempts, row.lease_token, row.last_error) == (
            OccurrenceStatus.PENDING,
            2,
            second.lease_token,
            None,
        ), f"a {late.status.value} settle under the expired lease changed the row"
        assert await ports.read_schedule_status(database, schedule.id) is ScheduleStatus.PENDING

    await ports.settle(database, [Settlement(second, OccurrenceStatus.DELIVERED)])
    (row,) = await ports.read_occurrence_rows(database, schedule.id)
    assert row.status is OccurrenceStatus.DELIVERED
    assert row.delivered_at is not None
    assert row.lease_token is None


async def test_a_claim_hands_out_the_schedule_definition_and_its_payload_as_stored(
    database: Database,
) -> None:
    # Keys out of order, text beyond ASCII, numbers a float would round: all kept.
    payload = {"zeta": 1, "alpha": ["é ✓", None, 0.1, 2**60], "mid": {"b": True, "a": "x"}}
    schedule = ports.draft(ports.immediate(), max_attempts=3, payload=payload)
    await ports.insert_schedules(database, [schedule])

    (delivery,) = await ports.claim(database, limit=1)

    assert delivery.schedule_id == schedule.id
    assert delivery.occurrence_id == occurrence_id(schedule.id, schedule.first_fire_at)
    assert delivery.fire_at == schedule.first_fire_at
    assert (delivery.event_type, delivery.target) == (schedule.event_type, schedule.target)
    assert (delivery.max_attempts, delivery.one_shot) == (3, True)
    assert json.loads(delivery.body, object_pairs_hook=list) == json.loads(
        json.dumps(payload), object_pairs_hook=list
    ), "the payload changed, or its keys were reordered"
    assert delivery.body == json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


async def test_a_bare_number_payload_is_claimed_and_read_back_as_its_own_text(
    database: Database,
) -> None:
    # A column declared JSON has numeric affinity on SQLite: these must not become numbers.
    payloads = [2.5, 1.0, 7, 12345678901234567890123, -0.0, 1e16]
    drafts = [ports.draft(ports.immediate(), payload=payload) for payload in payloads]
    await ports.insert_schedules(database, drafts)

    claimed = {d.schedule_id: d for d in await ports.claim(database, limit=len(drafts))}

    for draft, payload in zip(drafts, payloads, strict=True):
        text = json.dumps(payload)
        assert claimed[draft.id].body == text.encode()
        assert json.dumps((await ports.read_schedule(database, draft.id)).payload) == text


async def test_a_payload_an_earlier_version_stored_as_a_number_still_claims_and_reads(
    database: Database,
) -> None:
    # SQLite stored the text `2.5` of such a payload as the number 2.5 before payloads
    # were kept as bytes there; the other stores keep the text either way.
    schedule = ports.draft(ports.immediate(), payload="placeholder")
    await ports.insert_schedules(database, [schedule])
    await ports.write_payload_text(database, schedule.id, "2.5")

    (delivery,) = await ports.claim(database, limit=1)

    assert delivery.body == b"2.5"
    assert (await ports.read_schedule(database, schedule.id)).payload == 2.5


async def test_a_claim_that_finds_nothing_due_tells_how_soon_the_next_occurrence_is(
    database: Database,
) -> None:
    assert await ports.due_in(database) is None, "nothing is scheduled"
    soon = ports.draft(ports.once(datetime.now(UTC) + timedelta(seconds=60)))
    later = ports.draft(ports.once(datetime.now(UTC) + timedelta(hours=2)))
    await ports.insert_schedules(database, [later, soon])

    due = await ports.due_in(database)
    assert due is not None
    assert 50 < due <= 60

    await ports.hold(database, soon.id)  # a held occurrence is not waited for
    due = await ports.due_in(database)
    assert due is not None
    assert 7100 < due <= 7200


async def test_a_first_claim_counts_one_firing_and_a_claim_again_counts_none(
    database: Database,
) -> None:
    now = datetime.now(UTC)
    schedules = [ports.draft(ports.once(now - timedelta(seconds=1))) for _ in range(3)]
    await ports.insert_schedules(database, schedules)
    before = await ports.database_now(database)

    first = await ports.claim(database, limit=10)
    assert len(first) == 3
    for schedule in schedules:
        stored = await ports.read_schedule(database, schedule.id)
        assert stored.fire_count == 1
        assert stored.last_fired_at is not None
        assert stored.last_fired_at >= before

    # The leases run out unsettled: the claim that takes them again is the same firing.
    for delivery in first:
        await ports.run_out_lease(database, delivery.occurrence_id)
    again = await ports.claim(database, limit=10)
    assert {d.occurrence_id for d in again} == {d.occurrence_id for d in first}
    assert {d.attempt for d in again} == {2}
    for schedule in schedules:
        assert (await ports.read_schedule(database, schedule.id)).fire_count == 1


async def _replayed(database: Database, count: int) -> set[uuid.UUID]:
    """`count` schedules whose occurrence was dead-lettered and then replayed: due now, and
    attempted before; their ids."""
    old = [
        ports.draft(ports.once(datetime.now(UTC) - timedelta(minutes=10)), max_attempts=1)
        for _ in range(count)
    ]
    await ports.insert_schedules(database, old)
    failed = await ports.claim(database, limit=count)
    assert len(failed) == count
    await ports.settle(
        database, [Settlement(d, OccurrenceStatus.DEAD_LETTERED, error="400") for d in failed]
    )
    assert len(await ports.replay(database, [d.occurrence_id for d in failed])) == count
    return {d.id for d in old}


async def test_first_attempts_are_claimed_before_replays_that_fell_due_earlier(
    database: Database,
) -> None:
    now = datetime.now(UTC)
    await _replayed(database, 20)
    fresh = [ports.draft(ports.once(now - timedelta(seconds=1))) for _ in range(3)]
    await ports.insert_schedules(database, fresh)

    claimed = await ports.claim(database, limit=10)
    # Every first attempt, though the replays were due first; the replays fill the rest.
    assert {d.schedule_id for d in claimed} >= {f.id for f in fresh}
    assert len(claimed) == 10


async def test_replays_keep_a_share_of_each_claim_beside_a_backlog_of_first_attempts(
    database: Database,
) -> None:
    now = datetime.now(UTC)
    replayed = await _replayed(database, 30)
    await ports.insert_schedules(
        database, [ports.draft(ports.once(now - timedelta(seconds=1))) for _ in range(60)]
    )

    queue = ports.queue(database)
    shares = []
    for _ in range(6):
        claimed = await queue.claim(limit=9, lease=30.0, owner="t", backoff=lambda _: 1.0)
        assert len(claimed.deliveries) == 9
        assert claimed.more
        shares.append(sum(d.schedule_id in replayed for d in claimed.deliveries))
    # First attempts fill the first claims; a look within a few claims finds the replays
    # waiting, and from then on a third of each claim is theirs.
    assert shares[-2:] == [3, 3]
    assert shares[0] == 0


async def test_a_retry_policy_stored_below_the_floor_still_runs_at_the_floor(
    database: Database,
) -> None:
    schedule = ports.draft(ports.once(datetime.now(UTC) - timedelta(seconds=1)))
    await ports.insert_schedules(database, [schedule])
    await ports.write_retry_text(
        database, schedule.id, '{"base_delay_seconds": 0.001, "max_delay_seconds": 0.001}'
    )
    (delivery,) = await ports.claim(database, limit=10)
    assert delivery.retry is not None
    assert (delivery.retry.base_delay_seconds, delivery.retry.max_delay_seconds) == (0.1, 0.1)


async def test_a_claim_passes_over_the_rows_of_the_destinations_it_is_told_to_skip(
    database: Database,
) -> None:
    slow = WebhookTarget(type="webhook", url="http://127.0.0.1:9/slow")
    other = WebhookTarget(type="webhook", url="http://127.0.0.1:10/other")
    now = datetime.now(UTC)
    held = [ports.draft(ports.once(now - timedelta(seconds=10 - k)), target=slow) for k in range(3)]
    # A flow key without limits is claimed as unkeyed rows are, and passed over alike.
    keyed = ports.draft(ports.once(now - timedelta(seconds=5)), target=slow, flow_key="no-limits")
    fine = ports.draft(ports.once(now - timedelta(seconds=1)), target=other)
    await ports.insert_schedules(database, [*held, keyed, fine])

    passed = await ports.claimed(database, limit=10, skip=[destination_of(slow)])

    assert [d.schedule_id for d in passed.deliveries] == [fine.id]
    rest = await ports.claimed(database, limit=10, skip=[destination_of(other)])
    assert {d.schedule_id for d in rest.deliveries} == {s.id for s in [*held, keyed]}


async def test_a_changed_target_moves_the_schedule_to_its_new_destination(
    database: Database,
) -> None:
    before = WebhookTarget(type="webhook", url="http://127.0.0.1:9/before")
    after = WebhookTarget(type="webhook", url="http://127.0.0.1:10/after")
    schedule = ports.draft(ports.immediate(), target=before)
    await ports.insert_schedules(database, [schedule])

    await ports.update_schedule(database, schedule.id, target=after)

    assert await ports.read_destinations(database) == {schedule.id: destination_of(after)}
    passed = await ports.claimed(database, limit=1, skip=[destination_of(before)])
    assert [d.schedule_id for d in passed.deliveries] == [schedule.id]
