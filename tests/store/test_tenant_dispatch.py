"""A tenant's hold on its deliveries in the claim, on every store (DESIGN section 14): its
pause and its delivery quotas bound all its work, fleet-wide, and when more is due than a
claim may take, the tenants with due work share it by their weights."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

from app.domain.flow import FlowLimits
from app.domain.occurrence import Delivery, OccurrenceStatus, Settlement
from app.domain.tenants import Quotas
from tests.store import ports
from tests.store.ports import Database


async def _due(
    database: Database, tenant: str, count: int, *, key: str | None = None, since: float = 60.0
) -> list[uuid.UUID]:
    """`count` one-shots of `tenant` due already, the first the oldest."""
    now = datetime.now(UTC)
    drafts = [
        ports.draft(
            ports.once(now - timedelta(seconds=since - k / 10)), flow_key=key, tenant=tenant
        )
        for k in range(count)
    ]
    await ports.insert_schedules(database, drafts)
    return [d.id for d in drafts]


def _by_tenant(deliveries: list[Delivery]) -> Counter[str]:
    return Counter(d.tenant for d in deliveries)


def _delivered(deliveries: list[Delivery]) -> list[Settlement]:
    return [Settlement(d, OccurrenceStatus.DELIVERED) for d in deliveries]


async def test_a_paused_tenant_holds_every_delivery_uncharged_until_resumed(
    database: Database,
) -> None:
    await ports.put_tenant(database, "acme", paused=True)
    await ports.put_tenant(database, "zeta")
    held = await _due(database, "acme", 3)
    held_keyed = await _due(database, "acme", 2, key="orders")
    other = await _due(database, "zeta", 2)

    taken = await ports.claim(database, limit=10)
    assert {d.schedule_id for d in taken} == set(other), "only the other tenant's went"
    assert await ports.claim(database, limit=10) == []
    usage = await ports.tenant_usage(database, "acme")
    assert (usage.pending_occurrences, usage.waiting, usage.in_flight) == (5, 5, 0)

    await ports.put_tenant(database, "acme")  # whole: not paused
    released = await ports.claim(database, limit=10)
    assert {d.schedule_id for d in released} == {*held, *held_keyed}
    # Waiting charged nothing: each is its first attempt.
    assert {d.attempt for d in released} == {1}


async def test_a_paused_tenants_keys_are_visited_once_then_wait_out_of_the_claims_view(
    database: Database,
) -> None:
    await ports.put_tenant(database, "acme", paused=True)
    held = [
        *await _due(database, "acme", 2),
        *await _due(database, "acme", 1, key="orders"),
        *await _due(database, "acme", 1, key="billing"),
    ]
    await ports.put_flow_key(database, "billing", FlowLimits(paused=True), tenant="acme")
    assert len(await ports.visited_keys(database)) == 3

    assert await ports.claim(database, limit=10) == []

    assert await ports.visited_keys(database) == [], "a paused tenant's keys are still visited"
    await ports.put_tenant(database, "acme", paused=True)  # a put that leaves it paused
    assert await ports.visited_keys(database) == []

    await ports.put_tenant(database, "acme")

    released = await ports.claim(database, limit=10)
    # The key paused itself holds its row still, once a claim has found it so.
    assert sorted(d.schedule_id for d in released) == sorted(held[:3])
    assert await ports.visited_keys(database) == []
    await ports.put_flow_key(database, "billing", FlowLimits(), tenant="acme")
    assert [d.schedule_id for d in await ports.claim(database, limit=10)] == [held[3]]


async def test_a_tenants_in_flight_quota_bounds_all_its_keys_across_claimers(
    database: Database, store_url: str
) -> None:
    await ports.put_tenant(database, "acme", Quotas(max_in_flight=3))
    await _due(database, "acme", 6)
    await _due(database, "acme", 6, key="orders")
    await ports.put_flow_key(database, "invoices", FlowLimits(parallelism=10), tenant="acme")
    await _due(database, "acme", 6, key="invoices")
    await _due(database, "default", 4)
    claimers = [Database(store_url) for _ in range(3)]
    try:
        held: list[Delivery] = []
        for _ in range(4):
            rounds = await asyncio.gather(
                *(ports.claim(c, limit=10, owner=f"replica-{n}") for n, c in enumerate(claimers))
            )
            held += [d for batch in rounds for d in batch]
            assert _by_tenant(held)["acme"] <= 3, _by_tenant(held)
        assert _by_tenant(held) == {"acme": 3, "default": 4}
        usage = await ports.tenant_usage(database, "acme")
        assert (usage.in_flight, usage.waiting) == (3, 15)

        # A settle frees a slot of the tenant, whichever key it was.
        mine = [d for d in held if d.tenant == "acme"]
        await ports.settle(database, _delivered(mine[:2]))
        more = await ports.claim(claimers[1], limit=10)
        assert _by_tenant(more) == {"acme": 2}
    finally:
        for claimer in claimers:
            await claimer.close()


async def test_a_tenants_delivery_rate_is_a_bucket_a_second_deep(database: Database) -> None:
    await ports.put_tenant(database, "acme", Quotas(max_deliveries_per_second=1))
    await _due(database, "acme", 5)
    await _due(database, "acme", 5, key="orders")
    assert len(await ports.claim(database, limit=20)) == 1, "a full bucket: one second's worth"
    assert await ports.claim(database, limit=20) == []
    ports.move_clock(database, timedelta(seconds=5))
    # Five seconds refill the bucket, which holds a second's worth: one, whichever key.
    assert len(await ports.claim(database, limit=20)) == 1


async def test_saturating_tenants_share_a_claim_by_their_weights(database: Database) -> None:
    await ports.put_tenant(database, "heavy", weight=3)
    await ports.put_tenant(database, "light")
    await _due(database, "heavy", 40)
    await _due(database, "light", 40, since=120.0)  # older: oldest-first would take it all
    taken = await ports.claim(database, limit=20)
    assert _by_tenant(taken) == {"heavy": 15, "light": 5}


async def test_a_tenant_alone_takes_the_whole_claim_and_leftovers_go_to_the_rest(
    database: Database,
) -> None:
    await ports.put_tenant(database, "heavy", weight=3)
    await ports.put_tenant(database, "light")
    await _due(database, "light", 30)
    assert _by_tenant(await ports.claim(database, limit=20)) == {"light": 20}
    await _due(database, "heavy", 2)
    # heavy wants 2 of its 15: light gets the rest.
    assert _by_tenant(await ports.claim(database, limit=20)) == {"heavy": 2, "light": 10}


async def test_a_burst_of_one_tenant_leaves_room_for_another_tenants_due_work(
    database: Database,
) -> None:
    await ports.put_tenant(database, "burst")
    await ports.put_tenant(database, "stream")
    await _due(database, "burst", 200, since=30.0)
    stream = await _due(database, "stream", 3, since=1.0)  # due after the whole burst
    taken = await ports.claim(database, limit=20)
    assert {d.schedule_id for d in taken} >= set(stream)
    # And the claim lists them early, not behind the burst's rows.
    positions = [n for n, d in enumerate(taken) if d.tenant == "stream"]
    assert max(positions) < 8, positions


async def test_the_default_tenants_burst_shares_with_a_tenants_work(database: Database) -> None:
    await ports.put_tenant(database, "acme")
    await _due(database, "default", 200, since=30.0)
    await _due(database, "acme", 40, since=5.0)
    queue = ports.queue(database)  # kept from claim to claim, as a replica keeps it
    shares = []
    for _ in range(7):
        claimed = await queue.claim(limit=20, lease=30.0, owner="t", backoff=lambda _: 1.0)
        assert len(claimed.deliveries) == 20
        shares.append(_by_tenant(claimed.deliveries)["acme"])
    # The unkeyed burst fills the first claims; a look within a few finds the tenant's work
    # waiting, and from then on it has its weight's share (1 against the default's 1).
    assert shares[0] == 0
    assert shares[-2:] == [10, 10], shares


async def test_between_tenants_what_is_due_within_ahead_is_claimed_ahead_too(
    database: Database,
) -> None:
    await ports.put_tenant(database, "burst")
    await ports.put_tenant(database, "stream")
    await _due(database, "burst", 50)
    soon = ports.draft(ports.once(datetime.now(UTC) + timedelta(seconds=2)), tenant="stream")
    await ports.insert_schedules(database, [soon])
    claimed = await ports.claimed(database, limit=20, ahead=5.0)
    (ahead,) = [d for d in claimed.deliveries if d.tenant == "stream"]
    assert ahead.schedule_id == soon.id
    assert claimed.not_before[ahead.occurrence_id] > datetime.now(UTC), "held to its instant"
    assert _by_tenant(claimed.deliveries) == {"burst": 19, "stream": 1}


async def test_within_a_tenant_first_attempts_go_before_replays_due_earlier(
    database: Database,
) -> None:
    await ports.put_tenant(database, "acme")
    await ports.put_tenant(database, "zeta")
    old = [
        ports.draft(
            ports.once(datetime.now(UTC) - timedelta(minutes=10)), max_attempts=1, tenant="acme"
        )
        for _ in range(3)
    ]
    await ports.insert_schedules(database, old)
    failed = await ports.claim(database, limit=10)
    await ports.settle(
        database, [Settlement(d, OccurrenceStatus.DEAD_LETTERED, error="400") for d in failed]
    )
    assert len(await ports.replay(database, [d.occurrence_id for d in failed])) == 3
    fresh = await _due(database, "acme", 3, since=5.0)
    await _due(database, "zeta", 10)  # a second tenant: the claim shares between them
    taken = await ports.claim(database, limit=6)
    mine = [d for d in taken if d.tenant == "acme"]
    assert {d.schedule_id for d in mine} == set(fresh), "the replays wait for room"
