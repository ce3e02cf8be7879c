"""Lists of schedules: the failing filter, name prefixes taken literally, what is due, and
each sort paged across pages without a schedule lost or shown twice."""

from __future__ import annotations

import dataclasses
import unicodedata
from datetime import UTC, datetime, timedelta

from app.domain.filters import FAILING_WINDOW, ScheduleFilter, ScheduleSort
from app.domain.occurrence import OccurrenceStatus, Settlement
from app.domain.schedule import Schedule
from tests.store import ports
from tests.store.ports import Database

FAILING = ScheduleFilter(failing=True)


def ids(found: list[Schedule]) -> list[str]:
    return [str(s.id) for s in found]


async def test_failing_means_failures_in_a_row_or_a_recent_dead_letter_still_waiting(
    database: Database,
) -> None:
    now = datetime.now(UTC)
    # Recurring, so that a dead letter leaves it pending: the case an operator misses.
    broken = ports.draft(ports.interval(3600), fire_at=now - timedelta(seconds=1), max_attempts=1)
    streak = ports.draft(ports.interval(3600))
    healthy = ports.draft(ports.interval(3600))
    await ports.insert_schedules(database, [broken, streak, healthy])
    assert await ports.search_schedules(database, FAILING) == []

    (delivery,) = await ports.claim(database, limit=1)
    await ports.settle(database, [Settlement(delivery, OccurrenceStatus.DEAD_LETTERED, "503")])
    await ports.set_failures(database, streak.id, 3)
    found = await ports.search_schedules(database, FAILING)
    assert [s.id for s in found] == sorted([streak.id, broken.id], reverse=True), "newest first"
    assert {s.id: s.consecutive_failures for s in found} == {streak.id: 3, broken.id: 1}
    assert {s.id: s.last_error for s in found} == {streak.id: None, broken.id: "503"}

    # A delivery since ends the streak; the dead letter keeps it failing until it is old.
    await ports.set_failures(database, broken.id, 0)
    assert {s.id for s in await ports.search_schedules(database, FAILING)} == {
        streak.id,
        broken.id,
    }
    ports.move_clock(database, FAILING_WINDOW + timedelta(minutes=1))
    assert [s.id for s in await ports.search_schedules(database, FAILING)] == [streak.id]

    # A streak counts however old its dead letters; a replayed dead letter no longer waits.
    await ports.set_failures(database, broken.id, 1)
    assert {s.id for s in await ports.search_schedules(database, FAILING)} == {
        streak.id,
        broken.id,
    }
    await ports.set_failures(database, broken.id, 0)
    assert await ports.replay(database, [delivery.occurrence_id]) == [delivery.occurrence_id]
    assert [s.id for s in await ports.search_schedules(database, FAILING)] == [streak.id]


async def test_a_name_prefix_is_taken_literally_and_case_sensitively(database: Database) -> None:
    names = ["50%_off", "50%-off", "50x_off", "50_%", "5", "A%b", "a%b", "a%bc", "ab"]
    drafts = [ports.draft(ports.interval(60), name=name) for name in names]
    await ports.insert_schedules(database, drafts)

    async def named(prefix: str) -> set[str]:
        found = await ports.search_schedules(database, ScheduleFilter(name_prefix=prefix))
        return {str(s.name) for s in found}

    assert await named("50%") == {"50%_off", "50%-off"}
    assert await named("50%_") == {"50%_off"}
    assert await named("50_") == {"50_%"}
    assert await named("a%") == {"a%b", "a%bc"}
    assert await named("A") == {"A%b"}
    assert await named("5") == {"50%_off", "50%-off", "50x_off", "50_%", "5"}
    assert await named("a%bc") == {"a%bc"}
    assert await named("\\") == set()
    assert await named("%") == set()
    exact = await ports.search_schedules(database, ScheduleFilter(name="a%b"))
    assert [s.name for s in exact] == ["a%b"]


async def _fleet(database: Database) -> list[Schedule]:
    """Nine schedules: next fire instants with ties, one with nothing pending, failures
    with ties."""
    base = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    offsets = [30, 10, 20, 10, 40, 10, 20, 50, 60]
    failures = [0, 2, 5, 2, 0, 7, 2, 0, 5]
    drafts = [ports.draft(ports.once(base + timedelta(minutes=m))) for m in offsets]
    await ports.insert_schedules(database, drafts)
    for d, count in zip(drafts, failures, strict=True):
        await ports.set_failures(database, d.id, count)
    await ports.cancel(database, drafts[7].id)  # nothing pending
    return [await ports.read_schedule(database, d.id) for d in drafts]


async def test_each_sort_pages_through_every_schedule_once_in_its_order(
    database: Database,
) -> None:
    fleet = await _fleet(database)
    newest = sorted(fleet, key=lambda s: s.id, reverse=True)
    far = datetime.max.replace(tzinfo=UTC)
    by_next_fire = sorted(fleet, key=lambda s: (s.next_fire_at or far, s.id))
    assert by_next_fire[-1].next_fire_at is None
    by_failures = sorted(fleet, key=lambda s: (s.consecutive_failures, s.id), reverse=True)

    for limit in (1, 2, 4, 9, 20):
        for sort, expected in (
            (ScheduleSort.CREATED, newest),
            (ScheduleSort.NEXT_FIRE_AT, by_next_fire),
            (ScheduleSort.FAILURES, by_failures),
        ):
            found = await ports.every_page(database, ScheduleFilter(sort=sort), limit=limit)
            assert ids(found) == ids(expected), (sort, limit)

    failing = await ports.every_page(
        database, ScheduleFilter(failing=True, sort=ScheduleSort.FAILURES), limit=2
    )
    assert ids(failing) == ids([s for s in by_failures if s.consecutive_failures > 0])


async def test_due_before_lists_what_fires_by_then_earliest_first(database: Database) -> None:
    fleet = await _fleet(database)
    by = min(s.next_fire_at for s in fleet if s.next_fire_at) + timedelta(minutes=10)
    due = ScheduleFilter(due_before=by, sort=ScheduleSort.NEXT_FIRE_AT)

    found = await ports.every_page(database, due, limit=2)

    expected = sorted(
        (s for s in fleet if s.next_fire_at is not None and s.next_fire_at <= by),
        key=lambda s: (s.next_fire_at, s.id),
    )
    assert [s.next_fire_at for s in found] == [s.next_fire_at for s in expected]
    assert ids(found) == ids(expected)
    assert len(found) == 5  # three at +10 min, two at +20 (the bound included)


NFC = unicodedata.normalize("NFC", "Café crème")
NFD = unicodedata.normalize("NFD", "Café crème")


async def test_a_name_or_label_matches_in_either_canonical_spelling(database: Database) -> None:
    # One stored as the API stores names now (NFC), one as it was stored before (NFD).
    composed = dataclasses.replace(ports.draft(ports.interval(60), name=NFC), labels={NFC: NFC})
    decomposed = dataclasses.replace(ports.draft(ports.interval(60), name=NFD), labels={NFD: NFD})
    other = ports.draft(ports.interval(60), name="Cafe creme")
    await ports.insert_schedules(database, [composed, decomposed, other])
    both = {str(composed.id), str(decomposed.id)}

    async def found(where: ScheduleFilter) -> set[str]:
        return set(ids(await ports.search_schedules(database, where)))

    for form in ("NFC", "NFD"):
        spelt, prefix = (unicodedata.normalize(form, text) for text in (NFC, "Café"))
        assert await found(ScheduleFilter(name=spelt)) == both, form
        assert await found(ScheduleFilter(name_prefix=prefix)) == both, form
        assert await found(ScheduleFilter(labels={spelt: spelt})) == both, form
    assert await found(ScheduleFilter(name="Cafe creme")) == {str(other.id)}
    assert await found(ScheduleFilter(name_prefix="Cafe ")) == {str(other.id)}


async def test_a_flow_key_lists_its_own_schedules_and_no_other_tenants(
    database: Database,
) -> None:
    acme = [ports.draft(ports.interval(60), flow_key="customer-42") for _ in range(3)]
    other_key = ports.draft(ports.interval(60), flow_key="customer-43")
    no_key = ports.draft(ports.interval(60))
    # Another tenant's key of the same name is another key.
    elsewhere = ports.draft(ports.interval(60), flow_key="customer-42", tenant="globex")
    await ports.insert_schedules(database, [*acme, other_key, no_key, elsewhere])

    found = await ports.search_schedules(database, ScheduleFilter(flow_key="customer-42"))
    assert [s.id for s in found] == sorted((d.id for d in acme), reverse=True)
    assert {s.flow_key for s in found} == {"customer-42"}
    theirs = ScheduleFilter(tenant="globex", flow_key="customer-42")
    assert [s.id for s in await ports.search_schedules(database, theirs)] == [elsewhere.id]
    nothing = ScheduleFilter(flow_key="customer-4")
    assert await ports.search_schedules(database, nothing) == []
