"""The schema: the migrations take an empty database to head, once; the DDL that
`chronoq schema` prints builds the same schema."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from app.domain.destinations import destination_of
from app.domain.endpoints import CircuitSettings
from app.domain.flow import FlowLimits
from app.domain.occurrence import OccurrenceStatus, Settlement
from app.domain.schedule import ScheduleStatus
from app.domain.target import RabbitMQTarget, WebhookTarget
from app.store.dialects.claim_rows import DUE_WINDOW
from tests.store import ports
from tests.store.catalog import differences, read_catalog


async def test_the_migrations_take_an_empty_database_to_head_and_a_second_run_changes_nothing(
    empty_store: Callable[[], str],
) -> None:
    async with ports.opened(empty_store()) as database:
        assert not await ports.is_at_head(database)

        await ports.upgrade_to_head(database)

        assert await ports.is_at_head(database)
        schedule = ports.draft(ports.immediate())
        await ports.insert_schedules(database, [schedule])
        migrated = await read_catalog(database)
        assert {("schedules",), ("occurrences",)} <= migrated["tables"]

        await ports.upgrade_to_head(database)

        assert await ports.is_at_head(database)
        assert not differences(await read_catalog(database), migrated)
        (row,) = await ports.read_occurrence_rows(database, schedule.id)
        (delivery,) = await ports.claim(database, limit=1)
        assert delivery.occurrence_id == row.occurrence_id


async def test_the_ddl_builds_what_the_migrations_build(
    empty_store: Callable[[], str],
) -> None:
    async with ports.opened(empty_store()) as from_ddl, ports.opened(empty_store()) as migrated:
        await ports.build_from_ddl(from_ddl)
        await ports.upgrade_to_head(migrated)

        built, expected = await read_catalog(from_ddl), await read_catalog(migrated)

        assert expected["indexes"], "the migrations built no index: the comparison means nothing"
        assert expected["checks"], "no check constraint reflected: the comparison means nothing"
        assert not differences(built, expected), "\n".join(differences(built, expected))
        # Stamped at head: the service counts it as migrated, and it works.
        assert await ports.is_at_head(from_ddl)
        schedule = ports.draft(ports.immediate())
        await ports.insert_schedules(from_ddl, [schedule])
        (delivery,) = await ports.claim(from_ddl, limit=1)
        assert delivery.schedule_id == schedule.id


async def test_live_schedules_from_before_destinations_are_given_theirs(
    empty_store: Callable[[], str],
) -> None:
    async with ports.opened(empty_store()) as database:
        await ports.upgrade_to_head(database)
        webhooks = [
            ports.draft(ports.immediate(), target=WebhookTarget(type="webhook", url=url))
            for url in (
                "HTTP://Receiver.Example:8080/hooks?x=1",
                "http://127.0.0.1:9",
                "https://receiver.example?q=/a@b",
                "http://[::1]:9000/x#frag",
            )
        ]
        exchange = ports.draft(
            ports.immediate(),
            target=RabbitMQTarget(type="rabbitmq", exchange="billing", routing_key="paid"),
        )
        ended = ports.draft(ports.immediate())
        await ports.insert_schedules(database, [*webhooks, exchange, ended])
        await ports.cancel(database, ended.id)
        await ports.update_schedule(database, ended.id, status=ScheduleStatus.CANCELLED)
        await ports.forget_destinations(database)

        await ports.migrate_to(database, "0018_lease_until")
        await ports.upgrade_to_head(database)

        # What the migration computed is what the service computes for a target.
        assert await ports.read_destinations(database) == {
            **{w.id: destination_of(w.target) for w in webhooks},
            exchange.id: "amqp:billing",
            ended.id: None,  # it never delivers again
        }
        assert destination_of(webhooks[0].target) == "http://receiver.example:8080"


async def test_what_was_stored_before_tenants_is_the_default_tenants_and_nothing_is_lost(
    empty_store: Callable[[], str],
) -> None:
    async with ports.opened(empty_store()) as database:
        await ports.upgrade_to_head(database)
        keyed = [ports.draft(ports.immediate(), flow_key="acme") for _ in range(3)]
        plain = ports.draft(ports.interval(60), name="nightly")
        await ports.insert_schedules(database, [*keyed, plain])
        await ports.put_flow_key(database, "acme", FlowLimits(parallelism=2))
        await ports.put_flow_key(database, "only-limits", FlowLimits(rate=5))
        counts = {t: await ports.count_rows(database, t) for t in ("schedules", "occurrences")}

        await ports.migrate_to(database, "0020_shelved_rows")
        assert await ports.stored_flow_keys(database) == {
            "schedules": [None] + ["acme"] * 3,
            "occurrences": [None] + ["acme"] * 3,
            "flow_keys": ["acme", "only-limits"],
        }
        await ports.upgrade_to_head(database)

        # Every row is there (rebuilding `schedules` on SQLite cascades nothing away), in
        # the default tenant, and every key is the default tenant's.
        assert {t: await ports.count_rows(database, t) for t in counts} == counts
        assert set((await ports.read_tenants(database)).values()) == {"default"}
        assert await ports.stored_flow_keys(database) == {
            "schedules": [None] + ["default/acme"] * 3,
            "occurrences": [None] + ["default/acme"] * 3,
            "flow_keys": ["default/acme", "default/only-limits"],
        }
        acme = await ports.read_flow_key(database, "acme")
        assert (acme.limits, acme.waiting) == (FlowLimits(parallelism=2), 3)
        assert await ports.names_taken(database, "default", ["nightly"]) == ["nightly"]


async def test_tenant_events_come_with_0025_and_go_with_its_downgrade(
    empty_store: Callable[[], str],
) -> None:
    async with ports.opened(empty_store()) as database:
        await ports.upgrade_to_head(database)
        migrated = await read_catalog(database)
        assert ("tenant_events",) in migrated["tables"]
        await ports.put_tenant(database, "acme", actor="ops")

        await ports.migrate_to(database, "0024_tenant_dispatch")

        before = await read_catalog(database)
        assert ("tenant_events",) not in before["tables"]
        assert not [index for index in before["indexes"] if index[0] == "tenant_events"]
        assert await ports.tenant_exists(database, "acme")  # the tenant stays

        await ports.upgrade_to_head(database)

        assert not differences(await read_catalog(database), migrated)
        # A tenant from before the table has no events until it changes.
        assert await ports.tenant_events(database, "acme") == []
        await ports.delete_tenant(database, "acme", actor="ops")
        (deleted,) = await ports.tenant_events(database, "acme")
        assert (deleted.kind, deleted.actor) == ("deleted", "ops")


async def test_0024_stores_a_tenants_rows_of_no_key_under_its_own_and_its_downgrade_undoes_it(
    empty_store: Callable[[], str],
) -> None:
    async with ports.opened(empty_store()) as database:
        await ports.upgrade_to_head(database)
        await ports.put_tenant(database, "acme")
        ours = ports.draft(ports.immediate())
        theirs = ports.draft(ports.immediate(), tenant="acme")
        keyed = ports.draft(ports.immediate(), tenant="acme", flow_key="k")
        await ports.insert_schedules(database, [ours, theirs, keyed])
        at_head = {
            "schedules": [None, "acme/", "acme/k"],
            "occurrences": [None, "acme/", "acme/k"],
            "flow_keys": [],
        }
        assert await ports.stored_flow_keys(database) == at_head

        await ports.migrate_to(database, "0023_tenant_quotas")
        assert await ports.stored_flow_keys(database) == {
            "schedules": [None, None, "acme/k"],
            "occurrences": [None, None, "acme/k"],
            "flow_keys": [],
        }
        await ports.upgrade_to_head(database)
        assert await ports.stored_flow_keys(database) == at_head
        # Claimed as before: each tenant's one, and the key's.
        assert {d.schedule_id for d in await ports.claim(database, limit=10)} == {
            ours.id,
            theirs.id,
            keyed.id,
        }


async def test_0026_brings_sleeping_keys_and_its_downgrade_wakes_what_slept(
    empty_store: Callable[[], str],
) -> None:
    async with ports.opened(empty_store()) as database:
        await ports.upgrade_to_head(database)
        migrated = await read_catalog(database)
        assert ("flow_key_sleeps",) in migrated["tables"]
        await ports.put_flow_key(database, "busy", FlowLimits(parallelism=1))
        now = datetime.now(UTC)
        busy = [
            ports.draft(ports.once(now - timedelta(seconds=DUE_WINDOW + 10 - k)), flow_key="busy")
            for k in range(DUE_WINDOW + 1)
        ]
        later = ports.draft(ports.once(now + timedelta(hours=2)), flow_key="later")
        await ports.insert_schedules(database, [*busy, later])
        await ports.claim(database, limit=10)
        assert list(await ports.sleeping_keys(database)) == ["later"]

        await ports.migrate_to(database, "0025_tenant_events")

        before = await read_catalog(database)
        assert ("flow_key_sleeps",) not in before["tables"]
        rows = await ports.read_occurrence_rows(database, later.id)
        assert [row.shelved for row in rows] == [False], "what slept is awake again"

        await ports.upgrade_to_head(database)

        assert not differences(await read_catalog(database), migrated)


async def test_0027_brings_endpoints_and_its_downgrade_lets_what_a_circuit_held_flow(
    empty_store: Callable[[], str],
) -> None:
    async with ports.opened(empty_store()) as database:
        await ports.upgrade_to_head(database)
        migrated = await read_catalog(database)
        for table in ("endpoints", "endpoint_secrets", "endpoint_events"):
            assert (table,) in migrated["tables"]
        endpoint_id = await ports.make_endpoint(
            database,
            circuit=CircuitSettings(
                failure_threshold=1, cooldown_seconds=3600, max_cooldown_seconds=3600
            ),
        )
        now = datetime.now(UTC)
        due = ports.draft(
            ports.once(now - timedelta(seconds=1)), target=ports.endpoint_target(endpoint_id)
        )
        await ports.insert_schedules(database, [due])
        (delivery,) = await ports.claim(database, limit=1)
        await ports.settle(
            database,
            [Settlement(delivery, OccurrenceStatus.PENDING, error="HTTP 503", retry_in=0.0)],
        )
        assert (await ports.read_endpoint(database, endpoint_id)).state.value == "open"

        await ports.migrate_to(database, "0026_key_sleeps")

        before = await read_catalog(database)
        assert ("endpoints",) not in before["tables"]
        (row,) = await ports.read_occurrence_rows(database, due.id)
        assert row.status is OccurrenceStatus.PENDING
        # The key no longer backs off: a claim of the older version would take the row.
        assert await ports.key_backoffs(database) == {}

        await ports.upgrade_to_head(database)

        assert not differences(await read_catalog(database), migrated)
