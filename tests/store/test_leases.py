"""Leases beyond the plain claim: claims ahead of an instant, what a lost lease costs, what
a release gives back, and what a pause or a cancel does to a leased occurrence."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from app.domain.occurrence import Delivery, OccurrenceStatus, Origin, Settlement, Unsent
from app.domain.schedule import ScheduleDraft, ScheduleStatus
from app.domain.target import RabbitMQTarget
from tests.store import ports
from tests.store.ports import Database

# Far longer than any stall of a loaded machine, so that a claim ahead finds the occurrence
# not due yet and a pause comes before its instant; nobody waits for them: the cases move
# the database clock past instants and lease ends (ports.move_clock_past, run_out_lease).
AHEAD = 60.0
# Longer than AHEAD / 2, so that a claim ahead's lease runs out after its instant.
LEASE = 45.0
ON_FAILURE = RabbitMQTarget(type="rabbitmq", exchange="alerts", routing_key="dead")


async def _claimed_ahead(
    database: Database, *, max_attempts: int = 5, lease: float = LEASE
) -> tuple[ScheduleDraft, Delivery]:
    """A one-shot due in AHEAD / 2 seconds, claimed ahead of its instant."""
    due = datetime.now(UTC) + timedelta(seconds=AHEAD / 2)
    draft = ports.draft(ports.once(due), max_attempts=max_attempts)
    await ports.insert_schedules(database, [draft])
    claimed = await ports.claim_ahead(database, limit=5, ahead=AHEAD, lease=lease)
    (delivery,) = claimed.deliveries
    assert claimed.not_before[delivery.occurrence_id] == delivery.fire_at
    return draft, delivery


async def _taken_over(database: Database) -> tuple[Delivery, Delivery]:
    """An immediate occurrence claimed by replica-a, then claimed again by replica-b once
    that lease ran out unsettled (and not before)."""
    await ports.insert_schedules(database, [ports.draft(ports.immediate())])
    (first,) = await ports.claim(database, limit=5, lease=LEASE, owner="replica-a")
    assert await ports.claim(database, limit=5, owner="replica-b") == [], "still leased"
    await ports.run_out_lease(database, first.occurrence_id)
    (second,) = await ports.claim(database, limit=5, owner="replica-b")
    assert second.occurrence_id == first.occurrence_id
    return first, second


async def test_a_claim_ahead_takes_what_falls_due_within_its_window_and_nothing_later(
    database: Database,
) -> None:
    now = datetime.now(UTC)
    due = ports.draft(ports.immediate())
    # Far enough inside and outside the window that no machine is slow enough to blur it.
    soon = ports.draft(ports.once(now + timedelta(seconds=30)))
    later = ports.draft(ports.once(now + timedelta(seconds=120)))
    await ports.insert_schedules(database, [due, soon, later])

    claimed = await ports.claim_ahead(database, limit=5, ahead=60.0)

    by_schedule = {delivery.schedule_id: delivery for delivery in claimed.deliveries}
    assert set(by_schedule) == {due.id, soon.id}
    assert by_schedule[due.id].occurrence_id not in claimed.not_before, "due now: no wait"
    ahead = by_schedule[soon.id]
    assert claimed.not_before[ahead.occurrence_id] == ahead.fire_at == soon.first_fire_at
    (outside,) = await ports.read_occurrence_rows(database, later.id)
    assert (outside.attempts, outside.lease_token) == (0, None)
    assert (await ports.claim_ahead(database, limit=5, ahead=60.0)).deliveries == []


async def test_a_lost_lease_is_charged_once_as_lease_expired_by_the_replica_that_held_it(
    database: Database,
) -> None:
    first, second = await _taken_over(database)

    assert (first.attempt, second.attempt) == (1, 2)
    (lost,) = await ports.read_attempt_log(database, first.occurrence_id)
    assert (lost.attempt, lost.outcome, lost.replica) == (1, "lease_expired", "replica-a")
    assert lost.duration_ms == LEASE * 1000, "it ran at most its lease"
    row = await ports.read_lease(database, first.occurrence_id)
    assert (row.attempts, row.lease_token) == (2, second.lease_token)


async def test_a_late_settle_of_a_lease_another_claim_took_over_writes_no_attempt(
    database: Database,
) -> None:
    first, second = await _taken_over(database)

    await ports.settle(database, [Settlement(first, OccurrenceStatus.DELIVERED)])

    log = await ports.read_attempt_log(database, first.occurrence_id)
    assert [(a.attempt, a.outcome) for a in log] == [(1, "lease_expired")]
    await ports.settle(database, [Settlement(second, OccurrenceStatus.DELIVERED)])
    log = await ports.read_attempt_log(database, first.occurrence_id)
    assert [(a.attempt, a.outcome) for a in log] == [(1, "lease_expired"), (2, "delivered")]


async def test_a_claim_ahead_lost_before_its_attempt_started_costs_no_attempt(
    database: Database,
) -> None:
    # The replica that claimed it ahead dies while it waits for its instant: nothing was
    # sent, so its only attempt is still there for the next claim.
    _, delivery = await _claimed_ahead(database, max_attempts=1)
    row = await ports.read_lease(database, delivery.occurrence_id)
    assert row.lease_ahead
    assert row.attempts == 1
    assert row.leased_at == delivery.fire_at, "an attempt claimed ahead starts at its instant"
    assert await ports.claim(database, limit=5) == [], "still leased"

    await ports.run_out_lease(database, delivery.occurrence_id)
    (again,) = await ports.claim(database, limit=5)

    assert (again.occurrence_id, again.attempt) == (delivery.occurrence_id, 1)
    row = await ports.read_lease(database, delivery.occurrence_id)
    assert (row.status, row.attempts, row.lease_ahead) == (OccurrenceStatus.PENDING, 1, False)
    assert await ports.read_attempt_log(database, delivery.occurrence_id) == []


async def test_a_claim_ahead_lost_after_its_attempt_started_is_charged(
    database: Database,
) -> None:
    _, delivery = await _claimed_ahead(database, max_attempts=1)
    assert await ports.start_ahead(database, [delivery]) == {delivery.occurrence_id}
    started = await ports.read_lease(database, delivery.occurrence_id)
    assert not started.lease_ahead

    await ports.run_out_lease(database, delivery.occurrence_id)
    assert await ports.claim(database, limit=5) == [], "claimed beyond its attempt budget"

    spent = await ports.read_lease(database, delivery.occurrence_id)
    assert (spent.status, spent.attempts) == (OccurrenceStatus.DEAD_LETTERED, 1)
    (lost,) = await ports.read_attempt_log(database, delivery.occurrence_id)
    assert (lost.attempt, lost.outcome) == (1, "lease_expired")
    assert lost.started_at == delivery.fire_at


async def test_a_pause_before_the_instant_stops_a_claim_ahead_and_keeps_the_instant(
    database: Database,
) -> None:
    draft, delivery = await _claimed_ahead(database)
    await ports.hold(database, draft.id)

    assert await ports.start_ahead(database, [delivery]) == set()
    await ports.release(database, [delivery], started=False)

    held = await ports.read_lease(database, delivery.occurrence_id)
    assert (held.available_at, held.held_until) == (None, delivery.fire_at)
    assert (held.attempts, held.lease_token) == (0, None)
    await ports.unhold(database, draft.id)
    resumed = await ports.read_lease(database, delivery.occurrence_id)
    assert resumed.available_at == delivery.fire_at
    assert await ports.claim(database, limit=5) == [], "claimed before its instant"
    await ports.move_clock_past(database, delivery.fire_at)
    (again,) = await ports.claim(database, limit=5)
    assert (again.occurrence_id, again.attempt) == (delivery.occurrence_id, 1)


async def test_a_cancel_before_the_instant_stops_a_claim_ahead(database: Database) -> None:
    draft, delivery = await _claimed_ahead(database)
    await ports.cancel(database, draft.id)

    assert await ports.start_ahead(database, [delivery]) == set()
    await ports.release(database, [delivery], started=False)

    row = await ports.read_lease(database, delivery.occurrence_id)
    assert row.status is OccurrenceStatus.CANCELLED


async def test_a_release_of_an_unstarted_attempt_gives_back_its_own_instant(
    database: Database,
) -> None:
    # A claim ahead handed back unstarted (the loop stopping) is due at its instant, not
    # at once: the tick must not go out early.
    _, delivery = await _claimed_ahead(database)

    await ports.release(database, [delivery], started=False)

    row = await ports.read_lease(database, delivery.occurrence_id)
    assert (row.available_at, row.attempts, row.lease_token) == (delivery.fire_at, 0, None)


async def test_a_release_keeps_a_retry_instant(database: Database) -> None:
    await ports.insert_schedules(database, [ports.draft(ports.immediate())])
    (first,) = await ports.claim(database, limit=5)
    await ports.settle(
        database, [Settlement(first, OccurrenceStatus.PENDING, error="503", retry_in=AHEAD / 2)]
    )
    retry_at = (await ports.read_lease(database, first.occurrence_id)).available_at
    assert retry_at is not None
    (second,) = (await ports.claim_ahead(database, limit=5, ahead=AHEAD, lease=30.0)).deliveries
    assert second.attempt == 2

    await ports.release(database, [second], started=False)

    row = await ports.read_lease(database, first.occurrence_id)
    assert (row.available_at, row.attempts) == (retry_at, 1)


async def test_a_lost_attempt_is_logged_from_its_claim_not_from_a_pause_or_resume(
    database: Database,
) -> None:
    draft = ports.draft(ports.immediate())
    await ports.insert_schedules(database, [draft])
    (delivery,) = await ports.claim(database, limit=5, lease=LEASE)
    claimed_at = (await ports.read_lease(database, delivery.occurrence_id)).leased_at
    assert claimed_at is not None
    # A pause and a resume a while into the attempt rewrite the row, not its lease's start.
    ports.move_clock(database, timedelta(seconds=1))
    await ports.hold(database, draft.id)
    await ports.unhold(database, draft.id)
    assert await ports.claim(database, limit=5) == [], "the resume ended the lease"

    await ports.run_out_lease(database, delivery.occurrence_id)
    (again,) = await ports.claim(database, limit=5)

    assert again.attempt == 2
    (lost,) = await ports.read_attempt_log(database, delivery.occurrence_id)
    assert (lost.attempt, lost.outcome, lost.started_at) == (1, "lease_expired", claimed_at)


async def test_a_cancel_keeps_the_attempt_in_flight_in_the_log(database: Database) -> None:
    draft = ports.draft(ports.immediate())
    await ports.insert_schedules(database, [draft])
    (delivery,) = await ports.claim(database, limit=5)

    await ports.cancel(database, draft.id)
    await ports.settle(database, [Settlement(delivery, OccurrenceStatus.DELIVERED)])

    row = await ports.read_lease(database, delivery.occurrence_id)
    assert row.status is OccurrenceStatus.CANCELLED, "a settle does not undo the cancel"
    (attempt,) = await ports.read_attempt_log(database, delivery.occurrence_id)
    assert (attempt.attempt, attempt.outcome) == (1, "delivered")


async def test_an_unsent_delivery_is_handed_back_uncharged_after_a_pause(
    database: Database,
) -> None:
    await ports.insert_schedules(database, [ports.draft(ports.immediate(), max_attempts=1)])
    (delivery,) = await ports.claim(database, limit=5)
    before = await ports.database_now(database)

    await ports.release(
        database,
        [delivery],
        started=False,
        unsent=Unsent("this replica ran out of a resource: Too many open files", 20.0),
    )

    row = await ports.read_lease(database, delivery.occurrence_id)
    assert (row.status, row.attempts, row.lease_token) == (OccurrenceStatus.PENDING, 0, None)
    assert row.last_error is not None
    assert "Too many open files" in row.last_error
    assert row.available_at is not None
    assert row.available_at >= before + timedelta(seconds=20)
    assert await ports.claim(database, limit=5) == []
    await ports.move_clock_past(database, row.available_at)
    (again,) = await ports.claim(database, limit=5)
    assert again.attempt == 1, "the unsent attempt was not charged"


async def test_a_claim_ahead_says_its_schedule_fired_at_the_instant_it_is_sent(
    database: Database,
) -> None:
    # Not at the claim, half a minute earlier: the schedule would seem to fire early.
    draft, delivery = await _claimed_ahead(database)

    stored = await ports.read_schedule(database, draft.id)
    assert stored.fire_count == 1
    assert stored.last_fired_at == delivery.fire_at


async def test_only_what_is_due_now_counts_against_a_claims_free_slots(
    database: Database,
) -> None:
    # What a claim takes ahead of its instant waits for it unstarted whatever the slots:
    # only what is due now is measured against them, so the one due now still starts with
    # the claim rather than waiting for a start mark of its own.
    later = datetime.now(UTC) + timedelta(seconds=AHEAD / 2)
    drafts = [ports.draft(ports.immediate())] + [ports.draft(ports.once(later)) for _ in range(3)]
    await ports.insert_schedules(database, drafts)

    claimed = await ports.claimed(database, limit=10, lease=LEASE, start=1, ahead=AHEAD)

    assert len(claimed.deliveries) == 4
    (due,) = [d for d in claimed.deliveries if d.occurrence_id not in claimed.not_before]
    assert claimed.unstarted == frozenset()
    assert not (await ports.read_lease(database, due.occurrence_id)).lease_ahead


async def test_one_start_mark_covers_several_claims_each_by_its_own_lease(
    database: Database,
) -> None:
    # The loop marks what several claims brought in one go: each delivery is marked under
    # its own lease token, and one whose token no longer holds its row is not marked.
    _, first = await _claimed_unstarted(database, 2)
    _, second = await _claimed_unstarted(database, 2)
    assert first[0].lease_token != second[0].lease_token
    stale = replace(second[1], lease_token=first[0].lease_token)

    marked = await ports.start_ahead(database, [*first, second[0], stale])

    assert marked == {d.occurrence_id for d in (*first, second[0])}
    assert (await ports.read_lease(database, second[1].occurrence_id)).lease_ahead


async def _claimed_unstarted(
    database: Database, count: int, **options: Any
) -> tuple[list[ScheduleDraft], list[Delivery]]:
    """`count` due one-shots, claimed by a replica with one free slot: more than could
    start at once, so none starts with the claim (they wait in its lanes)."""
    drafts = [ports.draft(ports.immediate(), **options) for _ in range(count)]
    await ports.insert_schedules(database, drafts)
    claimed = await ports.claimed(database, limit=10, lease=LEASE, start=1, owner="replica-a")
    assert len(claimed.deliveries) == count
    return drafts, claimed.deliveries


async def test_a_claim_beyond_its_free_slots_lost_before_the_start_mark_costs_nothing(
    database: Database,
) -> None:
    # The replica dies with the rows still waiting behind its deliveries in flight: none
    # was sent, so none is charged, logged, dead-lettered, counted toward a pause or
    # reported to `on_failure`; each has its only attempt left for the next claim.
    drafts, deliveries = await _claimed_unstarted(
        database, 3, max_attempts=1, on_failure=ON_FAILURE, pause_after_failures=1
    )
    for delivery in deliveries:
        await ports.run_out_lease(database, delivery.occurrence_id)

    again = await ports.claimed(database, limit=10, owner="replica-b")

    assert sorted((d.occurrence_id, d.attempt) for d in again.deliveries) == sorted(
        (d.occurrence_id, 1) for d in deliveries
    )
    assert not again.auto_paused
    for draft, delivery in zip(drafts, deliveries, strict=True):
        assert await ports.read_attempt_log(database, delivery.occurrence_id) == []
        row = await ports.read_lease(database, delivery.occurrence_id)
        assert (row.status, row.attempts) == (OccurrenceStatus.PENDING, 1)
        schedule = await ports.read_schedule(database, draft.id)
        assert (schedule.status, schedule.consecutive_failures) == (ScheduleStatus.PENDING, 0)
        rows = await ports.read_occurrence_rows(database, draft.id)
        assert [r.origin for r in rows] == [Origin.SCHEDULE], "a failure callback was written"


async def test_a_claim_charges_what_starts_with_it_or_at_its_start_mark(
    database: Database,
) -> None:
    # Within the free slots the attempts start with the claim; beyond them, each starts
    # at its mark. Either way a started attempt whose lease is lost is charged.
    await ports.insert_schedules(database, [ports.draft(ports.immediate(), max_attempts=1)])
    within = await ports.claimed(database, limit=10, lease=LEASE, start=1, owner="replica-a")
    assert within.unstarted == frozenset()
    _, (marked, waiting) = await _claimed_unstarted(database, 2, max_attempts=1)
    assert (await ports.read_lease(database, waiting.occurrence_id)).lease_ahead, "unstarted"
    assert await ports.start_ahead(database, [marked]) == {marked.occurrence_id}
    lost = [within.deliveries[0], marked, waiting]
    for delivery in lost:
        await ports.run_out_lease(database, delivery.occurrence_id)

    (again,) = await ports.claim(database, limit=10, owner="replica-b")

    assert (again.occurrence_id, again.attempt) == (waiting.occurrence_id, 1)
    for spent in (within.deliveries[0], marked):
        row = await ports.read_lease(database, spent.occurrence_id)
        assert (row.status, row.attempts) == (OccurrenceStatus.DEAD_LETTERED, 1)
        (attempt,) = await ports.read_attempt_log(database, spent.occurrence_id)
        assert (attempt.attempt, attempt.outcome) == (1, "lease_expired")


async def test_a_pause_or_cancel_since_the_claim_stops_an_unstarted_attempt_at_its_mark(
    database: Database,
) -> None:
    (paused, cancelled), (held, ended) = await _claimed_unstarted(database, 2)
    await ports.hold(database, paused.id)
    await ports.cancel(database, cancelled.id)

    assert await ports.start_ahead(database, [held, ended]) == set()
    await ports.release(database, [held, ended], started=False)

    row = await ports.read_lease(database, held.occurrence_id)
    assert (row.status, row.attempts, row.available_at) == (OccurrenceStatus.PENDING, 0, None)
    assert await ports.read_attempt_log(database, held.occurrence_id) == []
    assert (await ports.read_lease(database, ended.occurrence_id)).status is (
        OccurrenceStatus.CANCELLED
    )
    await ports.unhold(database, paused.id)
    (again,) = await ports.claim(database, limit=10)
    assert (again.occurrence_id, again.attempt) == (held.occurrence_id, 1)
