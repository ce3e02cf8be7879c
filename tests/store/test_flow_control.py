"""Flow control in the claim, on every store: a key's parallelism across claimers, its
token bucket, fifo order with a retrying head, a lost lease freeing its slot, and held-back
keys that never hold up anything else."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.errors import PreconditionFailedError
from app.domain.flow import FlowLimits, Ordering
from app.domain.occurrence import Delivery, OccurrenceStatus, Settlement
from app.domain.tenants import key_name_or_none
from app.store.dialects import dialect_of
from app.store.dialects.claim_rows import DUE_WINDOW
from app.store.loop.sql import ClaimRows
from tests.store import ports
from tests.store.ports import Database


async def _keyed(
    database: Database, key: str, count: int, *, since: float = 60.0
) -> list[uuid.UUID]:
    """`count` one-shot schedules on `key`, each due already, the first the oldest."""
    now = datetime.now(UTC)
    drafts = [
        ports.draft(ports.once(now - timedelta(seconds=since - k)), flow_key=key)
        for k in range(count)
    ]
    await ports.insert_schedules(database, drafts)
    return [d.id for d in drafts]


def _delivered(deliveries: list[Delivery]) -> list[Settlement]:
    return [Settlement(d, OccurrenceStatus.DELIVERED) for d in deliveries]


async def test_parallelism_bounds_what_concurrent_claimers_hold_of_a_key(
    database: Database, store_url: str
) -> None:
    await ports.put_flow_key(database, "acme", FlowLimits(parallelism=3))
    await _keyed(database, "acme", 20)
    # Each claimer has a pool of its own, as separate replicas do.
    claimers = [Database(store_url) for _ in range(4)]
    try:
        held: list[Delivery] = []
        # Claims at once, round after round: a claim may pass over a row another one has
        # in hand for an instant (MySQL locks the row past its range), never exceed the
        # limit, and the slots fill within a few rounds.
        for _ in range(5):
            rounds = await asyncio.gather(
                *(ports.claim(c, limit=10, owner=f"replica-{n}") for n, c in enumerate(claimers))
            )
            held += [d for batch in rounds for d in batch]
            assert len(held) <= 3, f"{len(held)} in flight on a key of parallelism 3"
        assert len({d.occurrence_id for d in held}) == 3
        assert await ports.claim(claimers[0], limit=10) == [], "a fourth started"

        # Each settle frees one slot: the next claim, by any replica, takes one more.
        await ports.settle(database, _delivered(held[:1]))
        (more,) = await ports.claim(claimers[1], limit=10)
        assert more.occurrence_id not in {d.occurrence_id for d in held}
        assert (await ports.read_flow_key(database, "acme")).in_flight == 3
    finally:
        for claimer in claimers:
            await claimer.close()


async def test_a_lease_that_runs_out_frees_its_slot(database: Database) -> None:
    await ports.put_flow_key(database, "acme", FlowLimits(parallelism=1))
    await _keyed(database, "acme", 3)
    (first,) = await ports.claim(database, limit=10, owner="died")
    assert await ports.claim(database, limit=10) == []

    await ports.run_out_lease(database, first.occurrence_id)
    # The replica that held it is gone: its slot is free again, for one attempt only.
    again = await ports.claim(database, limit=10)
    assert len(again) == 1
    assert await ports.claim(database, limit=10) == []


async def test_the_token_bucket_starts_burst_then_rate_per_period(database: Database) -> None:
    await ports.put_flow_key(database, "acme", FlowLimits(rate=2, period_seconds=10, burst=3))
    await _keyed(database, "acme", 20)

    assert len(await ports.claim(database, limit=50)) == 3, "the burst is 3"
    held = await ports.claimed(database, limit=50)
    assert held.deliveries == []
    # One token comes every 5 s: the loop is told when, not left to poll.
    assert held.due_in is not None
    assert 4.0 < held.due_in <= 5.0
    assert (await ports.read_flow_key(database, "acme")).waiting == 17

    ports.move_clock(database, timedelta(seconds=5.1))
    assert len(await ports.claim(database, limit=50)) == 1
    ports.move_clock(database, timedelta(seconds=10))
    assert len(await ports.claim(database, limit=50)) == 2
    # A long quiet spell fills the bucket to its burst, no more.
    ports.move_clock(database, timedelta(hours=1))
    assert len(await ports.claim(database, limit=50)) == 3
    assert await ports.claim(database, limit=50) == []


async def test_fifo_starts_the_head_only_and_a_retrying_head_holds_the_key(
    database: Database,
) -> None:
    await ports.put_flow_key(database, "ledger", FlowLimits(ordering=Ordering.FIFO))
    schedules = await _keyed(database, "ledger", 3)

    (head,) = await ports.claim(database, limit=10)
    assert head.schedule_id == schedules[0]
    assert await ports.claim(database, limit=10) == [], "the next started before the head settled"

    await ports.settle(
        database, [Settlement(head, OccurrenceStatus.PENDING, error="503", retry_in=30.0)]
    )
    # The head waits for its retry, and the others wait for the head.
    held = await ports.claimed(database, limit=10)
    assert held.deliveries == []
    assert held.due_in is not None
    assert 25 < held.due_in <= 30

    await ports.move_clock_past(database, datetime.now(UTC) + timedelta(seconds=31))
    (retried,) = await ports.claim(database, limit=10)
    assert (retried.occurrence_id, retried.attempt) == (head.occurrence_id, 2)
    await ports.settle(database, _delivered([retried]))

    (second,) = await ports.claim(database, limit=10)
    assert second.schedule_id == schedules[1]
    await ports.settle(database, _delivered([second]))
    (third,) = await ports.claim(database, limit=10)
    assert third.schedule_id == schedules[2]


async def test_a_dead_lettered_head_lets_the_next_start(database: Database) -> None:
    await ports.put_flow_key(database, "ledger", FlowLimits(ordering=Ordering.FIFO))
    schedules = await _keyed(database, "ledger", 2)
    (head,) = await ports.claim(database, limit=10)
    await ports.settle(database, [Settlement(head, OccurrenceStatus.DEAD_LETTERED, error="410")])
    (second,) = await ports.claim(database, limit=10)
    assert second.schedule_id == schedules[1]


async def test_held_back_keys_never_hold_up_other_keys_or_unkeyed_occurrences(
    database: Database,
) -> None:
    now = datetime.now(UTC)
    await ports.put_flow_key(database, "paused", FlowLimits(paused=True))
    await ports.put_flow_key(database, "slow", FlowLimits(rate=1, period_seconds=3600))
    # The held-back keys' rows are the oldest due, and there are more of them than a
    # claim takes.
    await _keyed(database, "paused", 30, since=600)
    await _keyed(database, "slow", 30, since=600)
    free = await _keyed(database, "free", 3, since=30)
    unkeyed = [ports.draft(ports.once(now - timedelta(seconds=k))) for k in (1, 2, 3)]
    await ports.insert_schedules(database, unkeyed)

    taken = await ports.claim(database, limit=10)
    counts = Counter(key_name_or_none(d.flow_key) for d in taken)
    assert counts == {None: 3, "free": 3, "slow": 1}, counts
    assert {d.schedule_id for d in taken} >= set(free) | {u.id for u in unkeyed}
    # Nothing more may start: the paused key waits, the slow one has no token.
    assert await ports.claim(database, limit=10) == []
    paused = await ports.read_flow_key(database, "paused")
    assert (paused.waiting, paused.in_flight) == (30, 0)


async def test_a_claim_ahead_never_takes_a_keyed_occurrence_before_its_instant(
    database: Database,
) -> None:
    await ports.put_flow_key(database, "acme", FlowLimits(parallelism=5))
    soon = ports.draft(ports.once(datetime.now(UTC) + timedelta(seconds=2)), flow_key="acme")
    await ports.insert_schedules(database, [soon])
    claimed = await ports.claim_ahead(database, limit=10, ahead=10.0)
    assert claimed.deliveries == []
    assert claimed.due_in is not None
    assert claimed.due_in <= 2.0


async def test_a_key_without_limits_is_claimed_ahead_like_unkeyed_occurrences(
    database: Database,
) -> None:
    at = datetime.now(UTC) + timedelta(seconds=2)
    soon = ports.draft(ports.once(at), flow_key="no-limits")
    await ports.insert_schedules(database, [soon])
    claimed = await ports.claim_ahead(database, limit=10, ahead=10.0)
    (delivery,) = claimed.deliveries
    # Held by the loop until its instant, as any occurrence claimed ahead.
    assert claimed.not_before[delivery.occurrence_id] >= at - timedelta(milliseconds=1)


@pytest.mark.parametrize("dialect", [pytest.param("postgresql", marks=pytest.mark.postgres)])
async def test_a_claim_of_keys_without_limits_walks_due_order_and_leaves_the_planner_as_it_was(
    database: Database,
) -> None:
    # PostgreSQL: the claim of free keys' rows is planned with sorts disabled, so that it
    # walks the keys' index in due order and stops at its limit (docs/performance.md); the
    # statements after it in the claim's transaction plan as the session does.
    first = await _keyed(database, "a", 3, since=30.0)
    second = await _keyed(database, "b", 3, since=29.5)

    async def work(conn: AsyncConnection) -> tuple[list[uuid.UUID], str, str]:
        before = (await conn.execute(sa.text("SHOW enable_sort"))).scalar_one()
        taken = await dialect_of(conn).claim(
            conn,
            limit=4,
            lease=30.0,
            token=uuid.uuid4(),
            owner="walk",
            rows=ClaimRows.FREE,
            keys=["default/a", "default/b"],
        )
        after = (await conn.execute(sa.text("SHOW enable_sort"))).scalar_one()
        return [row.schedule_id for row in taken], before, after

    taken, before, after = await database.run(work)

    # In the order they fell due, across the keys.
    assert taken == [first[0], second[0], first[1], second[1]]
    assert before == after == "on"


async def test_a_claim_stopped_by_its_room_says_there_is_more(database: Database) -> None:
    await _keyed(database, "acme", 5)
    claimed = await ports.claimed(database, limit=3)
    assert len(claimed.deliveries) == 3
    assert claimed.more


async def test_a_key_paused_and_resumed_starts_again(database: Database) -> None:
    await ports.put_flow_key(database, "acme", FlowLimits(paused=True))
    await _keyed(database, "acme", 2)
    assert await ports.claim(database, limit=10) == []
    await ports.put_flow_key(database, "acme", FlowLimits())
    assert len(await ports.claim(database, limit=10)) == 2


async def test_limits_are_versioned_and_a_stale_if_match_changes_nothing(
    database: Database,
) -> None:
    with pytest.raises(PreconditionFailedError):
        await ports.put_flow_key(database, "acme", FlowLimits(rate=5), frozenset({1}))
    created, new = await ports.put_flow_key(database, "acme", FlowLimits(rate=5))
    assert new
    assert created.version == 1
    assert created.limits == FlowLimits(rate=5)
    replaced, new = await ports.put_flow_key(database, "acme", FlowLimits(rate=7), frozenset({1}))
    assert not new
    assert replaced.version == 2
    with pytest.raises(PreconditionFailedError):
        await ports.put_flow_key(database, "acme", FlowLimits(rate=9), frozenset({1}))
    assert (await ports.read_flow_key(database, "acme")).limits == FlowLimits(rate=7)

    with pytest.raises(PreconditionFailedError):
        await ports.delete_flow_key(database, "acme", frozenset({1}))
    assert await ports.delete_flow_key(database, "acme", frozenset({2}))
    gone = await ports.read_flow_key(database, "acme")
    assert (gone.limits, gone.version) == (None, None)
    assert not await ports.delete_flow_key(database, "acme")


async def test_the_list_has_keys_put_and_keys_only_schedules_name(database: Database) -> None:
    await ports.put_flow_key(database, "b-put", FlowLimits(parallelism=2))
    await _keyed(database, "a-named", 2)
    await _keyed(database, "b-put", 1)
    await _keyed(database, "c-named", 1)

    first = await ports.flow_keys(database, limit=2)
    assert [k.key for k in first] == ["a-named", "b-put"]
    assert (first[0].limits, first[0].waiting) == (None, 2)
    assert first[1].limits == FlowLimits(parallelism=2)
    rest = await ports.flow_keys(database, after="b-put")
    assert [k.key for k in rest] == ["c-named"]


@pytest.mark.parametrize(
    "dialect",
    [
        pytest.param("postgresql", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
    ],
)
async def test_a_key_another_claim_holds_is_passed_over_not_waited_on(
    database: Database, store_url: str
) -> None:
    await ports.put_flow_key(database, "busy", FlowLimits(parallelism=5))
    await _keyed(database, "busy", 2)
    await _keyed(database, "other", 2)
    holder = Database(store_url)
    try:
        async with holder.engine.begin() as conn:
            # Another replica's claim, in the middle of the key.
            await conn.execute(sa.text("SELECT 1 FROM flow_keys WHERE 1 = 1 FOR UPDATE"))
            taken = await asyncio.wait_for(ports.claim(database, limit=10), timeout=10)
            assert {key_name_or_none(d.flow_key) for d in taken} == {"other"}
        taken = await ports.claim(database, limit=10)
        assert {key_name_or_none(d.flow_key) for d in taken} == {"busy"}
    finally:
        await holder.close()


async def test_a_destination_asking_to_wait_holds_the_whole_key_until_then(
    database: Database,
) -> None:
    # A key never put: the back-off needs no limits, and keeps none.
    await _keyed(database, "acme", 4)
    first, second, *_ = await ports.claim(database, limit=2)
    asked = Settlement(
        first, OccurrenceStatus.PENDING, error="HTTP 429", retry_in=60.0, key_backoff=60.0
    )
    await ports.settle(database, [asked])

    assert await ports.claim(database, limit=10) == [], "the key started while it was to wait"
    key = await ports.read_flow_key(database, "acme")
    assert (key.limits, key.version, key.in_flight, key.waiting) == (None, None, 1, 2)
    assert key.backoff_until is not None
    # An attempt in flight when the answer came finishes as usual.
    await ports.settle(database, _delivered([second]))
    held = await ports.claimed(database, limit=10)
    assert held.deliveries == []
    assert held.due_in is not None
    assert 50 < held.due_in <= 60

    assert await ports.claim(database, limit=10) == []
    ports.move_clock(database, timedelta(seconds=61))
    taken = await ports.claim(database, limit=10)
    assert len(taken) == 3  # the two waiting and the retry
    assert (await ports.read_flow_key(database, "acme")).backoff_until is None


async def test_a_back_off_never_shortens_a_longer_one(database: Database) -> None:
    await _keyed(database, "acme", 2)
    long, short = await ports.claim(database, limit=2)
    await ports.settle(
        database,
        [
            Settlement(long, OccurrenceStatus.PENDING, error="429", retry_in=600, key_backoff=600),
            Settlement(short, OccurrenceStatus.PENDING, error="429", retry_in=5, key_backoff=5),
        ],
    )
    before = (await ports.read_flow_key(database, "acme")).backoff_until
    ports.move_clock(database, timedelta(seconds=10))
    assert await ports.claim(database, limit=10) == []
    assert (await ports.read_flow_key(database, "acme")).backoff_until == before


async def _stop(database: Database, how: str, schedule_id: uuid.UUID) -> None:
    if how == "pause":
        await ports.hold(database, schedule_id)
    else:
        await ports.cancel(database, schedule_id)


@pytest.mark.parametrize("how", ["pause", "cancel"])
@pytest.mark.parametrize(
    "limits", [FlowLimits(parallelism=1), FlowLimits(ordering=Ordering.FIFO)], ids=["one", "fifo"]
)
async def test_a_pause_or_a_cancel_leaves_an_attempt_in_flight_holding_its_slot(
    database: Database, limits: FlowLimits, how: str
) -> None:
    await ports.put_flow_key(database, "acme", limits)
    schedules = await _keyed(database, "acme", 3)
    (first,) = await ports.claim(database, limit=10)
    assert first.schedule_id == schedules[0]

    # The attempt runs on: stopping its schedule stops what has not started, not it.
    await _stop(database, how, first.schedule_id)
    assert await ports.claim(database, limit=10) == [], f"a second started after the {how}"
    assert (await ports.read_flow_key(database, "acme")).in_flight == 1

    # Its settle frees the slot (a cancelled one's changes nothing else).
    await ports.settle(database, _delivered([first]))
    assert (await ports.read_flow_key(database, "acme")).in_flight == 0
    (second,) = await ports.claim(database, limit=10)
    assert second.schedule_id == schedules[1]


@pytest.mark.parametrize("how", ["pause", "cancel"])
async def test_an_attempt_paused_or_cancelled_whose_replica_died_frees_its_slot_at_its_lease_end(
    database: Database, how: str
) -> None:
    await ports.put_flow_key(database, "acme", FlowLimits(parallelism=1))
    await _keyed(database, "acme", 2)
    (first,) = await ports.claim(database, limit=10, lease=30.0)
    await _stop(database, how, first.schedule_id)
    assert await ports.claim(database, limit=10) == []

    ports.move_clock(database, timedelta(seconds=31))
    assert (await ports.read_flow_key(database, "acme")).in_flight == 0
    assert len(await ports.claim(database, limit=10)) == 1


async def test_an_auto_pause_leaves_its_attempts_in_flight_holding_their_slots(
    database: Database,
) -> None:
    now = datetime.now(UTC)
    await ports.put_flow_key(database, "acme", FlowLimits(parallelism=2))
    # A schedule that pauses itself at its first dead letter, with two ticks in flight,
    # and two occurrences of others due after them.
    failing = ports.draft(ports.interval(1, start_at=now), flow_key="acme", pause_after_failures=1)
    others = [
        ports.draft(ports.once(now + timedelta(seconds=20)), flow_key="acme") for _ in range(2)
    ]
    await ports.insert_schedules(database, [failing, *others])
    await ports.move_clock_past(database, now + timedelta(seconds=1))
    (older,) = await ports.claim(database, limit=1)
    await ports.move_clock_past(database, now + timedelta(seconds=3))
    (newer,) = await ports.claim(database, limit=1)
    assert {older.schedule_id, newer.schedule_id} == {failing.id}
    await ports.move_clock_past(database, now + timedelta(seconds=21))

    await ports.settle(database, [Settlement(older, OccurrenceStatus.DEAD_LETTERED, error="410")])
    assert await ports.read_schedule_status(database, failing.id) == "paused"
    # The newer tick's attempt still runs: one slot of two is free.
    assert (await ports.read_flow_key(database, "acme")).in_flight == 1
    assert len(await ports.claim(database, limit=10)) == 1


async def test_a_hand_back_of_an_attempt_never_started_gives_its_token_back(
    database: Database,
) -> None:
    await ports.put_flow_key(database, "acme", FlowLimits(rate=1, period_seconds=3600))
    await _keyed(database, "acme", 3)
    (first,) = await ports.claim(database, limit=10)
    assert await ports.claim(database, limit=10) == [], "the bucket held one token"

    await ports.release(database, [first], started=False)
    (again,) = await ports.claim(database, limit=10)
    # Given back once, not twice: the bucket holds no more than its burst.
    await ports.release(database, [again], started=False)
    await ports.release(database, [again], started=False)
    assert len(await ports.claim(database, limit=10)) == 1
    assert await ports.claim(database, limit=10) == []


async def test_a_hand_back_of_a_started_attempt_keeps_its_token_spent(database: Database) -> None:
    await ports.put_flow_key(database, "acme", FlowLimits(rate=1, period_seconds=3600))
    await _keyed(database, "acme", 2)
    (first,) = await ports.claim(database, limit=10)
    await ports.release(database, [first], started=True)
    assert await ports.claim(database, limit=10) == [], "a started attempt was given its token"


async def test_clearing_a_back_off_starts_the_key_at_once_and_keeps_its_limits(
    database: Database,
) -> None:
    await ports.put_flow_key(database, "acme", FlowLimits(parallelism=5))
    await _keyed(database, "acme", 3)
    (first,) = await ports.claim(database, limit=1)
    asked = Settlement(
        first, OccurrenceStatus.PENDING, error="HTTP 429", retry_in=3600, key_backoff=3600
    )
    await ports.settle(database, [asked])
    assert await ports.claim(database, limit=10) == []

    cleared = await ports.clear_flow_key_backoff(database, "acme")
    assert cleared.backoff_until is None
    # A back-off is the destination's, not a change of the limits: the version stays.
    assert (cleared.limits, cleared.version) == (FlowLimits(parallelism=5), 1)
    assert len(await ports.claim(database, limit=10)) == 2  # the first retries in an hour
    # Clearing a key with no back-off changes nothing.
    assert await ports.clear_flow_key_backoff(database, "acme") == await ports.read_flow_key(
        database, "acme"
    )


async def test_clearing_the_back_off_of_a_key_never_put_leaves_it_as_never_put(
    database: Database,
) -> None:
    await _keyed(database, "acme", 2)
    (first,) = await ports.claim(database, limit=1)
    await ports.settle(
        database,
        [Settlement(first, OccurrenceStatus.PENDING, error="503", retry_in=60, key_backoff=60)],
    )
    assert (await ports.read_flow_key(database, "acme")).backoff_until is not None

    cleared = await ports.clear_flow_key_backoff(database, "acme")
    assert (cleared.limits, cleared.version, cleared.backoff_until) == (None, None, None)
    assert cleared.created_at is None
    assert len(await ports.claim(database, limit=10)) == 1


async def test_a_keyed_claim_starts_no_more_than_its_free_slots_across_its_statements(
    database: Database,
) -> None:
    # Keys with limits and keys without are claimed by two statements: what the first
    # started is no longer free for the second, so the claim as a whole starts at most
    # its free slots, and what does not fit waits unstarted for its start mark.
    await ports.put_flow_key(database, "acme", FlowLimits(parallelism=5))
    await _keyed(database, "acme", 2)
    await _keyed(database, "unlimited", 2)

    claimed = await ports.claimed(database, limit=10, start=3)

    assert len(claimed.deliveries) == 4
    started = [d for d in claimed.deliveries if d.occurrence_id not in claimed.unstarted]
    assert len(started) <= 3


async def test_a_paused_key_is_visited_once_then_its_rows_wait_out_of_the_claims_view(
    database: Database,
) -> None:
    await ports.put_flow_key(database, "held", FlowLimits(paused=True))
    await _keyed(database, "held", 3)
    await _keyed(database, "open", 1)
    assert await ports.visited_keys(database) == ["held", "open"]

    assert {key_name_or_none(d.flow_key) for d in await ports.claim(database, limit=10)} == {"open"}

    assert await ports.visited_keys(database) == [], "a paused key is still visited"
    key = await ports.read_flow_key(database, "held")
    assert key.waiting == 3, "what a paused key holds still waits on it"
    # A row that arrives while the key is paused is held by the claim that finds it.
    await _keyed(database, "held", 1)
    assert await ports.visited_keys(database) == ["held"]
    assert await ports.claim(database, limit=10) == []
    assert await ports.visited_keys(database) == []

    await ports.put_flow_key(database, "held", FlowLimits(parallelism=10))

    assert await ports.visited_keys(database) == ["held"]
    assert len(await ports.claim(database, limit=10)) == 4, "the resume gives back all four"


async def test_a_removed_key_gives_back_what_its_pause_held(database: Database) -> None:
    await ports.put_flow_key(database, "held", FlowLimits(paused=True))
    await _keyed(database, "held", 2)
    assert await ports.claim(database, limit=10) == []
    assert await ports.visited_keys(database) == []

    assert await ports.delete_flow_key(database, "held")

    assert len(await ports.claim(database, limit=10)) == 2


async def test_a_schedule_moved_off_a_paused_key_starts_on_its_new_one(
    database: Database,
) -> None:
    await ports.put_flow_key(database, "held", FlowLimits(paused=True))
    moved, _ = await _keyed(database, "held", 2)
    assert await ports.claim(database, limit=10) == []

    await ports.move_to_key(database, moved, "open")

    (taken,) = await ports.claim(database, limit=10)
    assert (taken.schedule_id, taken.flow_key) == (moved, "default/open")
    assert await ports.visited_keys(database) == []


async def test_a_backed_off_key_is_out_of_view_until_its_back_off_ends(
    database: Database,
) -> None:
    await _keyed(database, "acme", 3)
    first, *_ = await ports.claim(database, limit=1)
    asked = Settlement(
        first, OccurrenceStatus.PENDING, error="HTTP 429", retry_in=30.0, key_backoff=30.0
    )
    await ports.settle(database, [asked])
    held = await ports.claimed(database, limit=10)
    assert held.deliveries == []
    assert await ports.visited_keys(database) == []
    # Out of view, the key still tells the loop when it may start again.
    assert (await ports.claimed(database, limit=10)).due_in is not None

    ports.move_clock(database, timedelta(seconds=31))

    assert len(await ports.claim(database, limit=10)) == 3


async def test_keys_with_work_due_are_found_beyond_a_window_full_of_one_keys_rows(
    database: Database,
) -> None:
    # More rows of one key are due than the window of due rows the claim reads first: it
    # then walks every key, and finds the one due after them all.
    await ports.put_flow_key(database, "busy", FlowLimits(parallelism=1))
    await _keyed(database, "busy", DUE_WINDOW + 1, since=DUE_WINDOW + 100)
    await _keyed(database, "other", 1, since=1.0)

    assert await ports.visited_keys(database) == ["busy", "other"]

    taken = await ports.claim(database, limit=10)
    assert Counter(key_name_or_none(d.flow_key) for d in taken) == {"busy": 1, "other": 1}


async def test_a_tick_skipped_while_its_key_held_it_starts_once_a_backfill_revives_it(
    database: Database,
) -> None:
    await ports.put_flow_key(database, "held", FlowLimits(paused=True))
    schedule = ports.draft(ports.interval(60), flow_key="held")  # its first tick is due now
    await ports.insert_schedules(database, [schedule])
    assert await ports.claim(database, limit=10) == []  # the paused key shelves it
    assert await ports.skip_due_ticks(database, schedule.id) == 1
    await ports.put_flow_key(database, "held", FlowLimits())
    (row,) = await ports.read_occurrence_rows(database, schedule.id)

    revived = await ports.backfill(database, schedule.id, [row.fire_at], flow_key="held")

    assert revived == [row.occurrence_id]
    assert [d.occurrence_id for d in await ports.claim(database, limit=10)] == revived
