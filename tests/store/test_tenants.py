"""Tenants in the store (DESIGN section 14): names, Idempotency-Keys and flow keys are each
tenant's own, a tenant goes only once nothing of it is live, and each change of a tenant or
of its keys is an audit event of its own transaction that outlives the tenant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.domain.errors import (
    ConflictError,
    InvalidInputError,
    PreconditionFailedError,
    QuotaExceededError,
)
from app.domain.flow import FlowLimits
from app.domain.schedule import ScheduleStatus
from app.domain.tenant_events import TenantEvent
from app.domain.tenants import Quotas, key_name, refilled, wait_for
from tests.store import ports
from tests.store.ports import Database


async def test_names_and_idempotency_keys_are_unique_per_tenant(database: Database) -> None:
    await ports.put_tenant(database, "acme")
    ours = ports.draft(ports.immediate(), name="nightly", idempotency_key="k-1")
    theirs = ports.draft(ports.immediate(), name="nightly", idempotency_key="k-1", tenant="acme")
    await ports.insert_schedules(database, [ours])
    await ports.insert_schedules(database, [theirs])  # the same name and key, another tenant

    assert await ports.names_taken(database, "default", ["nightly"]) == ["nightly"]
    assert await ports.names_taken(database, "acme", ["nightly", "other"]) == ["nightly"]
    assert await ports.names_taken(database, "zeta", ["nightly"]) == []
    found = await ports.find_by_idempotency_key(database, "k-1", None, tenant="acme")
    assert found is not None
    assert (found.id, found.tenant) == (theirs.id, "acme")
    found = await ports.find_by_idempotency_key(database, "k-1", None)
    assert found is not None
    assert (found.id, found.tenant) == (ours.id, "default")
    with pytest.raises(ConflictError):  # twice in one tenant
        await ports.insert_schedules(
            database, [ports.draft(ports.immediate(), name="nightly", tenant="acme")]
        )


async def test_one_key_name_in_two_tenants_is_two_keys(database: Database) -> None:
    await ports.put_tenant(database, "acme")
    await ports.put_flow_key(database, "shared", FlowLimits(paused=True))
    await ports.put_flow_key(database, "shared", FlowLimits(parallelism=1), tenant="acme")
    due = datetime.now(UTC) - timedelta(seconds=5)
    ours = [ports.draft(ports.once(due), flow_key="shared") for _ in range(2)]
    theirs = [ports.draft(ports.once(due), flow_key="shared", tenant="acme") for _ in range(2)]
    await ports.insert_schedules(database, [*ours, *theirs])

    # The default tenant's pause holds its own rows only; acme's key lets one through.
    taken = await ports.claim(database, limit=10)
    assert [d.schedule_id for d in taken] in ([s.id] for s in theirs)
    assert [d.flow_key for d in taken] == ["acme/shared"]
    assert await ports.claim(database, limit=10) == []

    mine = await ports.read_flow_key(database, "shared")
    acme = await ports.read_flow_key(database, "shared", tenant="acme")
    assert (mine.key, mine.limits, mine.waiting, mine.in_flight) == (
        "shared",
        FlowLimits(paused=True),
        2,
        0,
    )
    assert (acme.key, acme.limits, acme.waiting, acme.in_flight) == (
        "shared",
        FlowLimits(parallelism=1),
        1,
        1,
    )


async def test_a_tenants_list_of_keys_holds_its_own_only(database: Database) -> None:
    await ports.put_tenant(database, "acme")
    await ports.put_tenant(database, "acme-eu")  # a tenant whose id starts like another's
    await ports.put_flow_key(database, "a", FlowLimits(rate=1))
    await ports.put_flow_key(database, "b", FlowLimits(rate=1), tenant="acme")
    await ports.put_flow_key(database, "c", FlowLimits(rate=1), tenant="acme-eu")
    await ports.insert_schedules(
        database,
        [
            ports.draft(ports.interval(60), flow_key="named-only", tenant="acme"),
            ports.draft(ports.interval(60), flow_key="elsewhere", tenant="acme-eu"),
        ],
    )

    assert [k.key for k in await ports.flow_keys(database)] == ["a"]
    assert [k.key for k in await ports.flow_keys(database, tenant="acme")] == ["b", "named-only"]
    assert [k.key for k in await ports.flow_keys(database, tenant="acme", after="b")] == [
        "named-only"
    ]
    assert [k.key for k in await ports.flow_keys(database, tenant="acme-eu")] == [
        "c",
        "elsewhere",
    ]
    assert [k.key for k in await ports.flow_keys(database, tenant="nobody")] == []


async def test_a_tenant_goes_with_what_it_holds_once_nothing_of_it_is_live(
    database: Database,
) -> None:
    await ports.put_tenant(database, "acme")
    live = ports.draft(ports.interval(60), flow_key="k", tenant="acme")
    ended = ports.draft(ports.immediate(), tenant="acme")
    kept = ports.draft(ports.immediate(), flow_key="k")  # the default tenant's own key k
    await ports.insert_schedules(database, [live, ended, kept])
    await ports.put_flow_key(database, "k", FlowLimits(rate=3), tenant="acme")
    await ports.put_flow_key(database, "k", FlowLimits(rate=4))
    await ports.update_schedule(database, ended.id, status=ScheduleStatus.COMPLETED)

    with pytest.raises(ConflictError, match="1 pending or paused"):
        await ports.delete_tenant(database, "acme")
    with pytest.raises(ConflictError, match="default tenant"):
        await ports.delete_tenant(database, "default")

    await ports.update_schedule(database, live.id, status=ScheduleStatus.CANCELLED)
    await ports.delete_tenant(database, "acme")

    assert set(await ports.read_tenants(database)) == {kept.id}
    stored = await ports.stored_flow_keys(database)
    assert stored["flow_keys"] == ["default/k"]
    assert {key_name(k) for k in stored["occurrences"] if k is not None} == {"k"}


async def test_max_schedules_counts_the_live_schedules_of_its_tenant_only(
    database: Database,
) -> None:
    await ports.put_tenant(database, "acme", Quotas(max_schedules=2))
    live = [ports.draft(ports.interval(60), tenant="acme") for _ in range(2)]
    await ports.insert_schedules(database, [*live, ports.draft(ports.interval(60))])

    with pytest.raises(QuotaExceededError) as refused:
        await ports.admit(database, "acme", 1)
    assert (refused.value.quota, refused.value.limit, refused.value.used) == (
        "max_schedules",
        2,
        2,
    )
    assert refused.value.retry_after is None
    await ports.admit(database, "default", 50)  # another tenant's quota is not its
    await ports.update_schedule(database, live[0].id, status=ScheduleStatus.COMPLETED)
    await ports.admit(database, "acme", 1)
    with pytest.raises(QuotaExceededError):  # a batch is counted whole
        await ports.admit(database, "acme", 2)


async def test_max_creates_per_minute_is_a_bucket_a_batch_draws_whole(
    database: Database,
) -> None:
    await ports.put_tenant(database, "acme", Quotas(max_creates_per_minute=3))
    await ports.admit(database, "acme", 2)
    with pytest.raises(QuotaExceededError) as refused:
        await ports.admit(database, "acme", 2)
    assert (refused.value.quota, refused.value.limit) == ("max_creates_per_minute", 3)
    assert refused.value.used in (1, 2)  # a second's refill may have come in between
    assert refused.value.retry_after is not None
    assert 1 <= refused.value.retry_after <= 20  # one token, a third of a minute at most
    await ports.admit(database, "acme", 1)  # what is left is still there
    with pytest.raises(QuotaExceededError) as larger:
        await ports.admit(database, "acme", 4)  # more than the quota holds at all
    assert larger.value.retry_after is not None
    assert larger.value.retry_after <= 60


def test_a_bucket_refills_at_its_rate_up_to_its_size() -> None:
    assert refilled(None, 0, 60) == 60
    assert refilled(0.0, 30, 60) == 30
    assert refilled(10.0, 3600, 60) == 60
    assert refilled(5.0, -3, 60) == 5  # a clock that went back adds nothing
    assert wait_for(0.0, 1, 60) == 1
    assert wait_for(0.5, 3, 6) == 25
    assert wait_for(0.0, 1_000, 10) == 60


def trail(events: list[TenantEvent]) -> list[tuple[str, int | None, str | None, list[str] | None]]:
    return [(e.kind.value, e.version, e.actor, e.fields) for e in events]


async def test_each_change_of_a_tenant_or_its_keys_is_an_event_naming_its_actor(
    database: Database,
) -> None:
    before = await ports.database_now(database)
    await ports.put_tenant(database, "acme", actor="deploy-bot")
    await ports.put_tenant(database, "acme", actor="deploy-bot")  # changes nothing
    await ports.put_tenant(database, "acme", Quotas(max_in_flight=5), actor="cli", weight=3)
    await ports.put_tenant(database, "acme", Quotas(max_in_flight=5), weight=3, paused=True)
    await ports.put_tenant(
        database, "acme", Quotas(max_in_flight=5), actor="ops", weight=3, display_name="Acme"
    )
    key = await ports.make_tenant_key(database, "acme", "deploy-bot", actor="cli")
    assert await ports.revoke_tenant_key(database, "acme", key.id, actor="ops")
    # Revoked already: nothing changes, and nothing is recorded.
    assert await ports.revoke_tenant_key(database, "acme", key.id, actor="ops")
    await ports.put_tenant(database, "zeta", actor="ops", paused=True)  # made paused

    events = await ports.tenant_events(database, "acme")
    assert trail(events) == [
        ("created", 1, "deploy-bot", None),
        ("updated", 2, "deploy-bot", []),
        ("updated", 3, "cli", ["weight", "quotas"]),
        ("updated", 4, None, ["paused"]),
        ("paused", 4, None, None),
        ("updated", 5, "ops", ["display_name", "paused"]),
        ("resumed", 5, "ops", None),
        ("key_created", None, "cli", None),
        ("key_revoked", None, "ops", None),
    ]
    assert [(e.key_id, e.key_name) for e in events[-2:]] == [(key.id, "deploy-bot")] * 2
    assert {(e.key_id, e.key_name) for e in events[:-2]} == {(None, None)}
    assert {e.tenant for e in events} == {"acme"}
    assert [e.id for e in events] == sorted(e.id for e in events)
    after = await ports.database_now(database)
    assert all(before <= e.at <= after for e in events)
    assert trail(await ports.tenant_events(database, "zeta")) == [
        ("created", 1, "ops", None),
        ("paused", 1, "ops", None),
    ]
    # Oldest first after a given event: the cursor the API pages with.
    rest = await ports.tenant_events(database, "acme", after=events[6].id, limit=1)
    assert [e.id for e in rest] == [events[7].id]


async def test_a_refused_or_rolled_back_change_records_nothing(database: Database) -> None:
    await ports.put_tenant(database, "acme", actor="ops")
    key = await ports.make_tenant_key(database, "acme", "deploy-bot", actor="ops")
    await ports.insert_schedules(database, [ports.draft(ports.interval(60), tenant="acme")])
    recorded = await ports.tenant_events(database, "acme")
    assert trail(recorded) == [("created", 1, "ops", None), ("key_created", None, "ops", None)]

    with pytest.raises(ConflictError, match="1 pending or paused"):
        await ports.delete_tenant(database, "acme", actor="ops")
    with pytest.raises(PreconditionFailedError):
        await ports.put_tenant(database, "acme", actor="ops", if_match=frozenset({7}), weight=2)
    with pytest.raises(PreconditionFailedError):
        await ports.delete_tenant(database, "acme", actor="ops", if_match=frozenset({7}))
    with pytest.raises(ConflictError, match="has a key named"):
        await ports.make_tenant_key(database, "acme", "deploy-bot", actor="ops")
    assert not await ports.revoke_tenant_key(database, "zeta", key.id, actor="ops")
    with pytest.raises(InvalidInputError):  # the default tenant takes no pause
        await ports.put_tenant(database, "default", actor="ops", paused=True)
    # A change whose transaction is rolled back takes its events with it.
    await ports.put_tenant_rolled_back(database, "ghost", weight=2)
    await ports.put_tenant_rolled_back(database, "acme", weight=2)

    assert await ports.tenant_events(database, "acme") == recorded
    assert await ports.tenant_events(database, "default") == []
    assert not await ports.has_tenant_events(database, "ghost")
    assert await ports.read_tenant(database, "ghost") is None
    acme = await ports.read_tenant(database, "acme")
    assert acme is not None
    assert (acme.version, acme.weight) == (1, 1)


async def test_a_tenants_events_outlive_it_and_its_trail_goes_on_when_it_is_made_again(
    database: Database,
) -> None:
    await ports.put_tenant(database, "acme", actor="ops")
    await ports.make_tenant_key(database, "acme", "deploy-bot", actor="ops")
    assert not await ports.has_tenant_events(database, "acme-eu")

    await ports.delete_tenant(database, "acme", actor="cli")

    assert trail(await ports.tenant_events(database, "acme")) == [
        ("created", 1, "ops", None),
        ("key_created", None, "ops", None),
        ("deleted", None, "cli", None),
    ]
    assert await ports.has_tenant_events(database, "acme")
    await ports.put_tenant(database, "acme", actor="ops")
    assert trail(await ports.tenant_events(database, "acme"))[2:] == [
        ("deleted", None, "cli", None),
        ("created", 1, "ops", None),
    ]
