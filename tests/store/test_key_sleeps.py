"""Keys asleep, on every store: a key with nothing due for a while leaves the walks of the keys
once a walk has found it so, and its rows are back in view before their instant, whatever
moved, paused or joined them meanwhile."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

from app.domain.flow import FlowLimits
from app.domain.occurrence import Delivery, OccurrenceStatus, Settlement
from app.domain.tenants import key_name_or_none
from app.store.dialects.claim_rows import DUE_WINDOW
from app.store.loop.sleeps import SLEEP_AFTER, WAKE_BEFORE
from tests.store import ports
from tests.store.ports import Database

FAR = timedelta(hours=2)


async def _due_on(database: Database, key: str, count: int) -> None:
    """`count` one-shots on `key`, each due already."""
    now = datetime.now(UTC)
    drafts = [
        ports.draft(ports.once(now - timedelta(seconds=count + 10 - k)), flow_key=key)
        for k in range(count)
    ]
    await ports.insert_schedules(database, drafts)


async def _later_on(
    database: Database, key: str, at: timedelta, *, tenant: str = "default"
) -> uuid.UUID:
    """One one-shot on `key` (None: the tenant's rows of no key), `at` from now."""
    schedule = ports.draft(
        ports.once(await ports.database_now(database) + at),
        flow_key=key or None,
        tenant=tenant,
    )
    await ports.insert_schedules(database, [schedule])
    return schedule.id


async def _walking(database: Database) -> None:
    """More rows of one key due than the claim's window of due rows holds: its claims then
    walk the keys."""
    await ports.put_flow_key(database, "busy", FlowLimits(parallelism=1))
    await _due_on(database, "busy", DUE_WINDOW + 1)


def _others(deliveries: list[Delivery]) -> list[tuple[uuid.UUID, str | None]]:
    """What was claimed but for the busy key's: each schedule, and its key."""
    return [
        (d.schedule_id, key) for d in deliveries if (key := key_name_or_none(d.flow_key)) != "busy"
    ]


def _keys(deliveries: list[Delivery]) -> Counter[str | None]:
    """The keys of what was claimed, but for the busy key's (its leases run out as the clock
    moves)."""
    return Counter(key for d in deliveries if (key := key_name_or_none(d.flow_key)) != "busy")


async def test_keys_with_work_only_later_leave_the_walk_and_wake_before_their_instant(
    database: Database,
) -> None:
    await _walking(database)
    for n in range(5):
        await _later_on(database, f"later-{n}", FAR + timedelta(minutes=n))
    await _later_on(database, "soon", SLEEP_AFTER / 2)
    assert await ports.walked_keys(database) == [
        "busy",
        "later-0",
        "later-1",
        "later-2",
        "later-3",
        "later-4",
        "soon",
    ]

    assert _keys(await ports.claim(database, limit=10)) == {}

    # Nothing of them is due for a while: the walks visit them no more.
    assert await ports.walked_keys(database) == ["busy", "soon"]
    asleep = await ports.sleeping_keys(database)
    assert sorted(asleep) == [f"later-{n}" for n in range(5)]
    now = await ports.database_now(database)
    assert all(
        FAR - timedelta(seconds=5) < at - now <= FAR + timedelta(minutes=5)
        for at in asleep.values()
    )
    # The loop still knows when the first of them is due.
    assert (await ports.claimed(database, limit=0)).due_in is not None

    # Within WAKE_BEFORE of the first one's instant, its key wakes; the others sleep on.
    ports.move_clock(database, FAR - WAKE_BEFORE + timedelta(seconds=1))
    assert _keys(await ports.claim(database, limit=10)) == {"soon": 1}
    assert await ports.walked_keys(database) == ["busy", "later-0", "soon"]  # soon: in flight
    assert sorted(await ports.sleeping_keys(database)) == [f"later-{n}" for n in range(1, 5)]

    ports.move_clock(database, WAKE_BEFORE)
    assert _keys(await ports.claim(database, limit=10)) == {"later-0": 1}


async def test_a_row_that_joins_a_sleeping_key_is_claimed_at_its_instant(
    database: Database,
) -> None:
    await _walking(database)
    await _later_on(database, "acme", FAR)
    await ports.claim(database, limit=10)
    assert "acme" in await ports.sleeping_keys(database)

    # A row due sooner than what sleeps: it is awake, and the key with it.
    await _later_on(database, "acme", timedelta(seconds=1))
    assert "acme" in await ports.walked_keys(database)
    ports.move_clock(database, timedelta(seconds=2))

    assert _keys(await ports.claim(database, limit=10)) == {"acme": 1}
    assert "acme" in await ports.sleeping_keys(database), "what was far off sleeps on"


async def test_a_tenants_rows_of_no_key_sleep_and_wake_under_its_own_key(
    database: Database,
) -> None:
    await ports.put_tenant(database, "acme")
    await _walking(database)
    later = await _later_on(database, "", FAR, tenant="acme")
    await ports.claim(database, limit=10)
    assert await ports.walked_keys(database) == ["busy"]

    await ports.move_clock_past(database, datetime.now(UTC) + FAR + timedelta(seconds=1))

    assert _others(await ports.claim(database, limit=10)) == [(later, None)]


async def test_a_row_asleep_whose_schedule_is_paused_wakes_at_the_resume(
    database: Database,
) -> None:
    await _walking(database)
    held = await _later_on(database, "acme", FAR)
    await _later_on(database, "acme", FAR / 2)
    await ports.claim(database, limit=10)
    await ports.hold(database, held)
    # The row of the same key due first wakes; what is left asleep has no instant, and its
    # key leaves the sleeping keys.
    ports.move_clock(database, FAR / 2 + timedelta(seconds=1))
    first = [d for d in await ports.claim(database, limit=10) if d.schedule_id != held]
    assert _keys(first) == {"acme": 1}
    await ports.settle(database, [Settlement(d, OccurrenceStatus.DELIVERED) for d in first])
    assert "acme" not in await ports.sleeping_keys(database)

    await ports.unhold(database, held)

    ports.move_clock(database, FAR / 2)
    assert _others(await ports.claim(database, limit=10)) == [(held, "acme")]


async def test_a_row_asleep_moved_to_another_key_starts_on_it(database: Database) -> None:
    await _walking(database)
    moved = await _later_on(database, "acme", FAR)
    await ports.claim(database, limit=10)
    assert "acme" in await ports.sleeping_keys(database)

    await ports.move_to_key(database, moved, "other")
    # The sleep row of the key it left wakes nothing of it, and goes.
    ports.move_clock(database, FAR + timedelta(seconds=1))

    assert _others(await ports.claim(database, limit=10)) == [(moved, "other")]
    assert await ports.sleeping_keys(database) == {}


async def test_a_sleeping_key_paused_and_resumed_starts_its_rows_at_their_instant(
    database: Database,
) -> None:
    await _walking(database)
    await _later_on(database, "acme", FAR)
    await ports.claim(database, limit=10)
    await ports.put_flow_key(database, "acme", FlowLimits(paused=True))
    ports.move_clock(database, FAR + timedelta(seconds=1))
    assert _keys(await ports.claim(database, limit=10)) == {}, "a paused key starts nothing"
    assert await ports.visited_keys(database) == ["busy"]

    await ports.put_flow_key(database, "acme", FlowLimits(paused=False))

    assert _keys(await ports.claim(database, limit=10)) == {"acme": 1}


async def test_a_claim_that_never_walks_the_keys_puts_those_with_work_only_later_to_sleep(
    database: Database,
) -> None:
    for n in range(3):
        await _later_on(database, f"later-{n}", FAR)
    await _later_on(database, "soon", SLEEP_AFTER / 2)

    assert await ports.claim(database, limit=10) == []

    assert sorted(await ports.sleeping_keys(database)) == ["later-0", "later-1", "later-2"]
    assert await ports.walked_keys(database) == ["soon"]


async def test_rows_made_while_claims_sleep_and_wake_their_keys_are_all_claimed(
    database: Database, store_url: str
) -> None:
    # Claimers with pools of their own (as replicas) put keys to sleep and wake them while
    # rows keep arriving on those keys, far off and soon, and the clock moves through the
    # wake windows: once it is past every instant, every row is claimed, none left asleep.
    keys = [f"k{n}" for n in range(12)]
    made = {await _later_on(database, key, FAR) for key in keys}
    await ports.claim(database, limit=10)
    assert sorted(await ports.sleeping_keys(database)) == sorted(keys)
    claimers = [Database(store_url) for _ in range(3)]
    try:

        async def write(round_: int) -> None:
            for n, key in enumerate(keys):
                if n % 3 == round_ % 3:
                    made.add(await _later_on(database, key, FAR + timedelta(minutes=round_)))
                    made.add(await _later_on(database, key, WAKE_BEFORE * 2))

        taken: set[uuid.UUID] = set()
        for round_ in range(8):
            _, *rounds = await asyncio.gather(
                write(round_),
                *(ports.claim(c, limit=50, owner=f"replica-{n}") for n, c in enumerate(claimers)),
            )
            taken |= {d.schedule_id for batch in rounds if batch for d in batch}
            ports.move_clock(database, timedelta(seconds=20))

        ports.move_clock(database, FAR + timedelta(hours=1))
        for _ in range(5):
            taken |= {d.schedule_id for d in await ports.claim(database, limit=500)}

        assert made - taken == set(), f"{len(made - taken)} of {len(made)} never claimed"
    finally:
        for claimer in claimers:
            await claimer.close()


async def test_a_sleeping_keys_rows_wake_each_before_its_own_instant(database: Database) -> None:
    await _walking(database)
    first = await _later_on(database, "acme", FAR)
    second = await _later_on(database, "acme", 2 * FAR)
    await ports.claim(database, limit=10)
    asleep_at = (await ports.sleeping_keys(database))["acme"]

    ports.move_clock(database, FAR + timedelta(seconds=1))
    assert _others(await ports.claim(database, limit=10)) == [(first, "acme")]
    # The other sleeps on, its key's sleep row moved on to it.
    assert (await ports.sleeping_keys(database))["acme"] - asleep_at >= FAR - timedelta(seconds=5)

    ports.move_clock(database, FAR)
    assert (second, "acme") in _others(await ports.claim(database, limit=10))
    assert await ports.sleeping_keys(database) == {}


async def test_a_far_row_that_joins_a_sleeping_key_before_its_first_wakes_at_its_own_instant(
    database: Database,
) -> None:
    await _walking(database)
    await _later_on(database, "acme", FAR)
    await ports.claim(database, limit=10)
    sooner = await _later_on(database, "acme", FAR / 2)
    await ports.claim(database, limit=10)  # it sleeps too, and the key's sleep row with it
    assert "acme" not in await ports.walked_keys(database)

    ports.move_clock(database, FAR / 2 + timedelta(seconds=1))

    assert _others(await ports.claim(database, limit=10)) == [(sooner, "acme")]
