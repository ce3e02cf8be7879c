"""The claim plan: what each leased row becomes (a delivery, a skipped tick, a dead letter
or a failed attempt), what its cadence writes, and the counters the claim changes."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import TypeAdapter

from app.domain.claim_plan import (
    ClaimedRow,
    ClaimPlan,
    PendingOccurrence,
    SkipEntry,
    Tally,
    Unreadable,
    cadence_schedules,
    describe,
    pending_occurrence,
    plan_claim,
    skip_entry,
)
from app.domain.ids import gap_entry_id, occurrence_id
from app.domain.misfire import MisfirePolicy, Rules, Skip
from app.domain.occurrence import Origin
from app.domain.target import WebhookTarget
from app.domain.trigger import Trigger

TRIGGER: TypeAdapter[Trigger] = TypeAdapter(Trigger)
T0 = datetime(2027, 1, 4, 12, 0, tzinfo=UTC)
SID = uuid.UUID("01900000-0000-7000-8000-000000000001")
OTHER = uuid.UUID("01900000-0000-7000-8000-000000000002")
TOKEN = uuid.UUID("01900000-0000-7000-8000-00000000000a")
TARGET = WebhookTarget(type="webhook", url="http://127.0.0.1:9/hook")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def z(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def trigger(**spec: Any) -> Trigger:
    return TRIGGER.validate_python(spec)


MINUTELY = trigger(type="interval", every_seconds=60, start_at=T0)
ONCE = trigger(type="once", at=T0)


def row(
    fire_at: datetime = T0,
    *,
    schedule_id: uuid.UUID = SID,
    trigger: Trigger | Unreadable = MINUTELY,
    rules: Rules | None = None,
    **overrides: Any,
) -> ClaimedRow:
    """A cadence tick claimed for the first time, on its first attempt of five."""
    values: dict[str, Any] = {
        "occurrence_id": occurrence_id(schedule_id, fire_at),
        "schedule_id": schedule_id,
        "fire_at": fire_at,
        "attempts": 1,
        "max_attempts": 5,
        "origin": Origin.SCHEDULE,
        "first_claim": True,
        "event_type": "report.due",
        "body": '{"n":1}',
        "target": TARGET,
        "trigger": trigger,
        "jitter_seconds": 0.0,
        "rules": rules,
    }
    values.update(overrides)
    return ClaimedRow(**values)


def cadence(fire_at: datetime = T0, **overrides: Any) -> ClaimedRow:
    """A minutely cadence tick whose rules the claim read."""
    return row(fire_at, rules=overrides.pop("rules", Rules()), **overrides)


def plan(*rows: ClaimedRow, now: datetime = T0, seed: int = 1) -> ClaimPlan:
    return plan_claim(rows, now, TOKEN, random.Random(seed))


def fired(p: ClaimPlan) -> list[datetime]:
    return [d.fire_at for d in p.deliveries]


def misfires(sid: uuid.UUID, *seconds: float) -> list[SkipEntry]:
    return [skip_entry(sid, Skip(at(s), "misfire")) for s in seconds]


# deliveries


def test_a_one_shot_becomes_a_delivery_that_closes_its_schedule_when_settled() -> None:
    p = plan(row(trigger=ONCE))

    (delivery,) = p.deliveries
    assert delivery.occurrence_id == occurrence_id(SID, T0)
    assert (delivery.attempt, delivery.max_attempts) == (1, 5)
    assert delivery.lease_token == TOKEN
    assert delivery.body == b'{"n":1}'
    assert delivery.target == TARGET
    assert delivery.one_shot is True
    assert delivery.last is False
    assert (p.pending, p.skips, p.tallies) == ([], [], {})


def test_a_missing_body_is_sent_as_json_null() -> None:
    (delivery,) = plan(row(trigger=ONCE, body=None)).deliveries

    assert delivery.body == b"null"


def test_rows_are_planned_in_fire_order_whatever_order_they_come_in() -> None:
    p = plan(row(at(120), trigger=ONCE), row(at(0), trigger=ONCE), row(at(60), trigger=ONCE))

    assert fired(p) == [at(0), at(60), at(120)]


# the cadence


def test_a_recurring_tick_on_time_fires_and_writes_the_next_tick() -> None:
    p = plan(cadence(at(60)), now=at(61))

    (delivery,) = p.deliveries
    assert delivery.one_shot is False
    assert delivery.last is False  # its successor exists
    assert p.pending == [
        PendingOccurrence(occurrence_id(SID, at(120)), SID, at(120), at(120), Origin.SCHEDULE)
    ]
    assert p.tallies == {SID: Tally(ticks=1)}


def test_the_next_tick_is_jittered_with_the_given_random_draw() -> None:
    p = plan(cadence(jitter_seconds=30.0), seed=7)

    expected = random.Random(7).uniform(0, 30.0)
    assert p.pending[0].fire_at == at(60)
    assert p.pending[0].available_at == at(60) + timedelta(seconds=expected)


def test_each_next_tick_takes_its_own_draw_in_fire_order() -> None:
    p = plan(cadence(schedule_id=OTHER, jitter_seconds=10.0), cadence(jitter_seconds=10.0), seed=3)

    rng = random.Random(3)
    first, second = rng.uniform(0, 10.0), rng.uniform(0, 10.0)
    by_schedule = {o.schedule_id: o.available_at - o.fire_at for o in p.pending}
    ordered = sorted([SID, OTHER], key=lambda sid: occurrence_id(sid, T0))
    assert by_schedule[ordered[0]] == timedelta(seconds=first)
    assert by_schedule[ordered[1]] == timedelta(seconds=second)


def test_a_re_claimed_cadence_tick_plans_nothing_and_counts_no_firing() -> None:
    p = plan(cadence(attempts=2, first_claim=False))

    (delivery,) = p.deliveries
    assert delivery.last is True  # nothing was planned after it: its settle checks
    assert (p.pending, p.tallies) == ([], {})


def test_a_first_claim_without_rules_fires_without_planning() -> None:
    p = plan(row(rules=None))

    assert fired(p) == [T0]
    assert p.deliveries[0].last is True
    assert (p.pending, p.tallies) == ([], {})


@pytest.mark.parametrize("origin", [Origin.CATCHUP, Origin.BACKFILL, Origin.TRIGGER])
def test_an_occurrence_outside_the_cadence_fires_and_counts_but_plans_nothing(
    origin: Origin,
) -> None:
    p = plan(cadence(origin=origin))

    assert fired(p) == [T0]
    assert p.deliveries[0].last is True
    assert (p.pending, p.tallies) == ([], {})


# misfire policies


def test_fire_once_fires_the_late_tick_once_and_records_the_missed_ones() -> None:
    p = plan(cadence(rules=Rules(policy="fire_once")), now=at(150))

    assert fired(p) == [T0]
    assert p.skips == misfires(SID, 60, 120)
    assert [o.fire_at for o in p.pending] == [at(180)]
    assert p.tallies == {SID: Tally(ticks=1)}  # skips count once recorded


def test_skip_drops_a_tick_later_than_the_grace_and_records_it_on_the_claimed_row() -> None:
    p = plan(cadence(rules=Rules(policy="skip", grace_seconds=10)), now=at(30))

    assert p.deliveries == []
    assert p.unfired == [occurrence_id(SID, T0)]
    assert p.skips == []  # the claimed row itself becomes the skipped entry
    assert [o.fire_at for o in p.pending] == [at(60)]
    assert p.tallies == {SID: Tally(ticks=0, unfired=1, skipped=1, reason="misfire")}
    assert p.done_recurring == set()  # its next tick is pending


def test_skip_fires_a_tick_within_the_grace() -> None:
    p = plan(cadence(rules=Rules(policy="skip", grace_seconds=60)), now=at(30))

    assert fired(p) == [T0]
    assert p.unfired == []


def test_skip_fires_the_missed_ticks_within_the_grace_as_catch_ups() -> None:
    p = plan(cadence(rules=Rules(policy="skip", grace_seconds=60)), now=at(150))

    assert p.unfired == [occurrence_id(SID, T0)]
    assert p.skips == misfires(SID, 60)
    assert [(o.fire_at, o.origin) for o in p.pending] == [
        (at(120), Origin.CATCHUP),
        (at(180), Origin.SCHEDULE),
    ]
    assert p.tallies[SID].ticks == 1


def test_fire_all_fires_each_missed_tick_as_a_catch_up_in_order() -> None:
    p = plan(cadence(rules=Rules(policy="fire_all"), jitter_seconds=5.0), now=at(150))

    assert fired(p) == [T0]
    assert p.pending[:2] == [
        pending_occurrence(SID, at(60), Origin.CATCHUP),
        pending_occurrence(SID, at(120), Origin.CATCHUP),
    ]
    assert p.pending[0].available_at == at(60)  # catch-ups are not jittered
    assert (p.pending[2].fire_at, p.pending[2].origin) == (at(180), Origin.SCHEDULE)
    assert p.tallies == {SID: Tally(ticks=3)}


def test_fire_all_stops_at_max_catchup_and_records_the_rest() -> None:
    p = plan(cadence(rules=Rules(policy="fire_all", max_catchup=2)), now=at(330))

    catch_ups = [o.fire_at for o in p.pending if o.origin == Origin.CATCHUP]
    assert catch_ups == [at(60), at(120)]
    assert p.skips == [
        *misfires(SID, 180, 240),
        SkipEntry(occurrence_id(SID, at(300)), SID, at(300), "misfire", 1),
    ]
    assert p.tallies[SID].ticks == 3


@pytest.mark.parametrize("policy", ["fire_once", "skip", "fire_all"])
def test_every_policy_realigns_on_the_first_tick_after_now(policy: MisfirePolicy) -> None:
    p = plan(cadence(rules=Rules(policy=policy, grace_seconds=0)), now=at(1000))

    scheduled = [o.fire_at for o in p.pending if o.origin == Origin.SCHEDULE]
    assert scheduled == [at(1020)]


# max_occurrences


def test_the_last_tick_of_a_bound_fires_with_nothing_after_it() -> None:
    p = plan(cadence(rules=Rules(max_occurrences=3, fired=2)))

    (delivery,) = p.deliveries
    assert delivery.last is True
    assert p.pending == []
    assert p.tallies == {SID: Tally(ticks=1)}
    assert p.done_recurring == set()  # its settle closes the schedule


def test_a_dropped_tick_with_nothing_after_it_closes_its_schedule_at_the_claim() -> None:
    ending = trigger(type="interval", every_seconds=60, start_at=T0, end_at=at(30))

    p = plan(cadence(trigger=ending, rules=Rules(policy="skip", grace_seconds=0)), now=at(30))

    assert p.unfired == [occurrence_id(SID, T0)]
    assert p.pending == []
    assert p.done_recurring == {SID}


def test_catch_ups_stop_at_the_bound() -> None:
    rules = Rules(policy="fire_all", max_occurrences=5, fired=3)

    p = plan(cadence(rules=rules), now=at(330))

    assert [o.fire_at for o in p.pending] == [at(60)]  # the claimed tick and one more
    assert p.tallies[SID].ticks == 2
    assert p.deliveries[0].last is True


# lease exhaustion


def test_a_row_past_its_last_attempt_is_dead_lettered_and_closes_a_one_shot() -> None:
    p = plan(row(trigger=ONCE, attempts=6, max_attempts=5, first_claim=False))

    assert p.exhausted == [occurrence_id(SID, T0)]
    assert p.deliveries == []
    assert p.finished_one_shots == {SID}
    assert p.done_recurring == set()


def test_an_exhausted_cadence_tick_plans_nothing_and_may_close_its_schedule() -> None:
    p = plan(cadence(attempts=6, max_attempts=5))

    assert p.exhausted == [occurrence_id(SID, T0)]
    assert (p.pending, p.tallies) == ([], {})
    assert p.done_recurring == {SID}


def test_the_last_allowed_attempt_is_still_delivered() -> None:
    p = plan(row(trigger=ONCE, attempts=5, max_attempts=5, first_claim=False))

    assert fired(p) == [T0]
    assert p.exhausted == []


# unreadable definitions


def test_an_unreadable_trigger_fails_its_row_alone() -> None:
    broken = Unreadable(ValueError("trigger\n  is   not valid"))
    bad = row(at(0), schedule_id=OTHER, trigger=broken, rules=Rules())

    p = plan(bad, cadence(at(60)), now=at(61))

    (failed,) = p.failed
    assert failed.occurrence_id == bad.occurrence_id
    assert failed.error == "cannot plan this occurrence: ValueError: trigger is not valid"
    assert (failed.attempt, failed.max_attempts, failed.first_claim) == (1, 5, True)
    assert not failed.spent
    assert fired(p) == [at(60)]
    assert [o.schedule_id for o in p.pending] == [SID]
    # its firing was counted at the claim and is taken back
    assert p.tallies[OTHER] == Tally(unfired=1)


def test_an_unreadable_trigger_is_no_cadence_to_read_rules_for() -> None:
    rows = [row(trigger=Unreadable(ValueError("x"))), row(schedule_id=OTHER)]

    assert cadence_schedules(rows) == {OTHER}


def test_an_unreadable_row_on_its_last_attempt_may_close_its_schedule() -> None:
    p = plan(row(trigger=Unreadable(ValueError("x")), attempts=5, first_claim=False))

    (failed,) = p.failed
    assert failed.spent
    assert p.finished_one_shots == {SID}
    assert p.tallies == {}


def test_an_unreadable_trigger_fails_even_past_the_last_attempt() -> None:
    p = plan(row(trigger=Unreadable(ValueError("x")), attempts=6, first_claim=False))

    assert p.exhausted == []
    assert len(p.failed) == 1


def test_an_unreadable_target_fails_its_row_and_drops_what_its_cadence_planned() -> None:
    p = plan(cadence(target=Unreadable(KeyError("url"))), now=at(30))

    (failed,) = p.failed
    assert failed.error == "cannot plan this occurrence: KeyError: 'url'"
    assert (p.pending, p.deliveries) == ([], [])


def test_an_unreadable_target_is_never_read_for_a_dropped_tick() -> None:
    rules = Rules(policy="skip", grace_seconds=0)

    p = plan(cadence(rules=rules, target=Unreadable(KeyError("url"))), now=at(30))

    assert p.failed == []
    assert p.unfired == [occurrence_id(SID, T0)]


def test_an_exception_without_a_message_is_described_by_its_type() -> None:
    assert describe(RuntimeError()) == "RuntimeError"
    assert describe(ValueError("x" * 400)) == "ValueError: " + "x" * 300


# which schedules need their rules read


def test_only_recurring_cadence_ticks_claimed_for_the_first_time_need_rules() -> None:
    rows = [
        row(schedule_id=uuid.UUID(int=1)),
        row(schedule_id=uuid.UUID(int=2), first_claim=False),
        row(schedule_id=uuid.UUID(int=3), origin=Origin.CATCHUP),
        row(schedule_id=uuid.UUID(int=4), trigger=ONCE),
    ]

    assert cadence_schedules(rows) == {uuid.UUID(int=1)}


# skip entries and their counting


def test_a_dst_gap_entry_keeps_an_id_of_its_own_beside_a_misfire_at_the_same_instant() -> None:
    quarterly = trigger(
        type="cron", expression="*/15 * * * *", timezone="America/New_York", dst_gap="skip"
    )
    claimed = z("2027-03-14T06:45Z")  # 01:45 EST; 02:00 to 02:45 do not exist

    p = plan(cadence(claimed, trigger=quarterly), now=z("2027-03-14T07:20Z"))

    jump = z("2027-03-14T07:00Z")
    assert p.skips == [
        SkipEntry(occurrence_id(SID, jump), SID, jump, "misfire", 1),
        SkipEntry(
            occurrence_id(SID, z("2027-03-14T07:15Z")), SID, z("2027-03-14T07:15Z"), "misfire", 1
        ),
        SkipEntry(gap_entry_id(SID, jump), SID, jump, "dst_gap", 4),
    ]
    assert gap_entry_id(SID, jump) != occurrence_id(SID, jump)


def test_a_missed_tick_keeps_its_usual_id_and_a_gap_entry_gets_its_own() -> None:
    assert skip_entry(SID, Skip(T0, "misfire")).occurrence_id == occurrence_id(SID, T0)
    assert skip_entry(SID, Skip(T0, "paused")).occurrence_id == occurrence_id(SID, T0)
    assert skip_entry(SID, Skip(T0, "dst_gap", 2)) == SkipEntry(
        gap_entry_id(SID, T0), SID, T0, "dst_gap", 2
    )


def test_skipped_ticks_count_only_where_recorded_and_the_last_recorded_names_the_reason() -> None:
    p = plan(cadence(rules=Rules(policy="fire_once")), now=at(150))
    _, second = p.skips

    assert p.tallies_recorded({second.occurrence_id}) == {
        SID: Tally(ticks=1, skipped=1, reason="misfire")
    }
    assert p.tallies_recorded(set()) == {SID: Tally(ticks=1)}
    assert p.tallies == {SID: Tally(ticks=1)}  # the plan itself is left as it was


def test_a_recorded_gap_entry_counts_every_tick_it_stands_for() -> None:
    quarterly = trigger(
        type="cron", expression="*/15 * * * *", timezone="America/New_York", dst_gap="skip"
    )
    claimed = z("2027-03-14T06:45Z")

    p = plan(cadence(claimed, trigger=quarterly), now=claimed)

    (gap,) = p.skips
    assert p.tallies_recorded({gap.occurrence_id})[SID] == Tally(
        ticks=1, skipped=4, reason="dst_gap"
    )


def test_a_dropped_tick_keeps_its_misfire_reason_unless_a_later_entry_is_recorded() -> None:
    p = plan(cadence(rules=Rules(policy="skip", grace_seconds=0)), now=at(150))

    assert p.tallies[SID] == Tally(unfired=1, skipped=1, reason="misfire")
    recorded = {entry.occurrence_id for entry in p.skips}
    assert p.tallies_recorded(recorded)[SID] == Tally(unfired=1, skipped=3, reason="misfire")


def test_a_pending_occurrence_is_claimable_after_its_delay() -> None:
    assert pending_occurrence(SID, T0, Origin.SCHEDULE).available_at == T0
    delayed = pending_occurrence(SID, T0, Origin.SCHEDULE, delay=1.5)
    assert delayed.available_at == T0 + timedelta(seconds=1.5)
    assert delayed.occurrence_id == occurrence_id(SID, T0)


# failure callbacks


def test_a_failure_callback_is_a_delivery_that_settles_nothing_of_its_schedule() -> None:
    callback = row(trigger=MINUTELY, rules=Rules(), origin=Origin.CALLBACK, body='{"type":"x"}')

    p = plan(callback)

    (delivery,) = p.deliveries
    assert (delivery.one_shot, delivery.last, delivery.first) == (False, False, True)
    assert delivery.body == b'{"type":"x"}'
    # It plans no cadence (no next tick, no tally) though its schedule is recurring.
    assert (p.pending, p.skips, p.tallies) == ([], [], {})
    assert cadence_schedules([callback]) == set()


def test_a_failure_callback_that_cannot_be_planned_takes_back_no_firing() -> None:
    broken = row(origin=Origin.CALLBACK, target=Unreadable(ValueError("no on_failure")))

    p = plan(broken)

    (failed,) = p.failed
    assert failed.first_claim
    assert p.tallies == {}, "a callback's claim counted no firing to take back"
