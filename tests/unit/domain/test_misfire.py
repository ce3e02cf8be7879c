"""The misfire plan: what a recurring schedule fires, catches up, records as skipped and
plans next when a cadence occurrence is claimed late, bounded or across a DST gap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import TypeAdapter

from app.domain.misfire import (
    MisfirePolicy,
    Plan,
    Rules,
    Skip,
    dst_gap_skips,
    plan,
    skipped_range,
)
from app.domain.trigger import Trigger

TRIGGER: TypeAdapter[Trigger] = TypeAdapter(Trigger)

POLICIES: list[MisfirePolicy] = ["fire_once", "skip", "fire_all"]

T0 = datetime(2027, 1, 4, 12, 0, tzinfo=UTC)  # a Monday


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def z(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def at(seconds: float) -> datetime:
    """The instant `seconds` after T0."""
    return T0 + timedelta(seconds=seconds)


def trigger(**spec: Any) -> Trigger:
    return TRIGGER.validate_python(spec)


def minutely(**bounds: Any) -> Trigger:
    """An interval trigger ticking every 60 s from T0: T0, T0+60 s, T0+120 s, ..."""
    return trigger(type="interval", every_seconds=60, start_at=T0, **bounds)


def cron(expression: str, zone: str = "UTC", **options: Any) -> Trigger:
    return trigger(type="cron", expression=expression, timezone=zone, **options)


def misfires(*seconds: float) -> list[Skip]:
    """Single `misfire` entries for the ticks `seconds` after T0."""
    return [Skip(at(s), "misfire") for s in seconds]


def total_skipped(skips: list[Skip], reason: str = "misfire") -> int:
    return sum(entry.count for entry in skips if entry.reason == reason)


# on time


@pytest.mark.parametrize("policy", POLICIES)
def test_an_interval_claimed_on_time_fires_alone_and_plans_the_next_tick(
    policy: MisfirePolicy,
) -> None:
    result = plan(minutely(), Rules(policy=policy), at(60), at(65))

    assert result == Plan(fire=True, catch_up=[], skips=[], upcoming=at(120))


@pytest.mark.parametrize("policy", POLICIES)
def test_a_cron_claimed_on_time_fires_alone_and_plans_the_next_tick(
    policy: MisfirePolicy,
) -> None:
    hourly = cron("0 * * * *")

    result = plan(hourly, Rules(policy=policy), utc(2027, 1, 4, 12), utc(2027, 1, 4, 12, 0, 30))

    assert result == Plan(fire=True, catch_up=[], skips=[], upcoming=utc(2027, 1, 4, 13))


@pytest.mark.parametrize("policy", POLICIES)
def test_a_claim_at_exactly_its_fire_instant_is_on_time(policy: MisfirePolicy) -> None:
    assert plan(minutely(), Rules(policy=policy), at(120), at(120)) == Plan(
        fire=True, upcoming=at(180)
    )


@pytest.mark.parametrize("policy", POLICIES)
def test_a_claim_just_before_the_next_tick_has_missed_nothing(policy: MisfirePolicy) -> None:
    # 59.999999 s late: the next tick (T0+120 s) is still ahead
    now = at(120) - timedelta(microseconds=1)
    rules = Rules(policy=policy, grace_seconds=60)

    assert plan(minutely(), rules, at(60), now) == Plan(fire=True, upcoming=at(120))


# fire_once


def test_fire_once_fires_the_claimed_tick_and_records_each_missed_tick_as_a_misfire() -> None:
    # ticks T0+60, +120, +180, +240 s were missed; T0+300 s is still ahead
    result = plan(minutely(), Rules(policy="fire_once"), T0, at(250))

    assert result == Plan(
        fire=True, catch_up=[], skips=misfires(60, 120, 180, 240), upcoming=at(300)
    )


def test_fire_once_counts_a_tick_exactly_at_now_as_missed() -> None:
    result = plan(minutely(), Rules(), T0, at(240))

    assert result.skips == misfires(60, 120, 180, 240)
    assert result.upcoming == at(300)


def test_fire_once_is_the_default_policy() -> None:
    assert plan(minutely(), Rules(), T0, at(130)) == Plan(
        fire=True, skips=misfires(60, 120), upcoming=at(180)
    )


def test_fire_once_on_a_cron_realigns_onto_the_first_tick_strictly_after_now() -> None:
    every_ten = cron("*/10 * * * *")

    result = plan(every_ten, Rules(), utc(2027, 1, 4, 12), utc(2027, 1, 4, 12, 35))

    assert result == Plan(
        fire=True,
        catch_up=[],
        skips=[
            Skip(utc(2027, 1, 4, 12, 10), "misfire"),
            Skip(utc(2027, 1, 4, 12, 20), "misfire"),
            Skip(utc(2027, 1, 4, 12, 30), "misfire"),
        ],
        upcoming=utc(2027, 1, 4, 12, 40),
    )


def test_fire_once_lists_max_catchup_ticks_then_one_entry_counting_the_rest() -> None:
    # 100 missed ticks: T0+60 s ... T0+6000 s
    result = plan(minutely(), Rules(max_catchup=2), T0, at(6000))

    assert result == Plan(
        fire=True,
        catch_up=[],
        skips=[
            Skip(at(60), "misfire"),
            Skip(at(120), "misfire"),
            Skip(at(180), "misfire", 98),
        ],
        upcoming=at(6060),
    )
    assert total_skipped(result.skips) == 100


def test_fire_once_with_exactly_max_catchup_missed_ticks_needs_no_summary_entry() -> None:
    result = plan(minutely(), Rules(max_catchup=3), T0, at(180))

    assert result.skips == misfires(60, 120, 180)


def test_fire_once_with_max_catchup_zero_records_the_whole_gap_as_one_entry() -> None:
    result = plan(minutely(), Rules(max_catchup=0), T0, at(600))

    assert result.skips == [Skip(at(60), "misfire", 10)]
    assert result.upcoming == at(660)


# fire_all


def test_fire_all_fires_every_missed_tick_in_order_and_skips_none() -> None:
    result = plan(minutely(), Rules(policy="fire_all"), T0, at(300))

    assert result == Plan(
        fire=True,
        catch_up=[at(60), at(120), at(180), at(240), at(300)],
        skips=[],
        upcoming=at(360),
    )
    assert result.fired == 6


def test_fire_all_beyond_max_catchup_lists_at_most_k_skips_then_a_summary() -> None:
    # 10 missed ticks, 3 catch-ups: the other 7 are 3 single entries and a summary of 4
    result = plan(minutely(), Rules(policy="fire_all", max_catchup=3), T0, at(600))

    assert result == Plan(
        fire=True,
        catch_up=[at(60), at(120), at(180)],
        skips=[
            Skip(at(240), "misfire"),
            Skip(at(300), "misfire"),
            Skip(at(360), "misfire"),
            Skip(at(420), "misfire", 4),
        ],
        upcoming=at(660),
    )


@pytest.mark.parametrize(
    ("max_catchup", "missed"), [(1, 2), (1, 50), (2, 5), (5, 6), (5, 11), (5, 1000), (50, 51)]
)
def test_fire_all_catches_up_exactly_max_catchup_and_skips_the_rest(
    max_catchup: int, missed: int
) -> None:
    result = plan(
        minutely(), Rules(policy="fire_all", max_catchup=max_catchup), T0, at(60 * missed)
    )

    assert result.fire is True
    assert result.catch_up == [at(60 * i) for i in range(1, max_catchup + 1)]
    # at most max_catchup single entries, then one entry for the rest (which may be a
    # single tick, so count 1)
    assert len(result.skips) <= max_catchup + 1
    assert all(entry.count == 1 for entry in result.skips[:-1])
    assert all(entry.reason == "misfire" for entry in result.skips)
    assert total_skipped(result.skips) == missed - max_catchup
    # the first skipped tick is the one after the last catch-up
    assert result.skips[0].fire_at == at(60 * (max_catchup + 1))
    assert result.upcoming == at(60 * (missed + 1))


# skip


def test_skip_drops_a_late_claimed_tick_and_old_missed_ticks_and_fires_those_within_grace() -> None:
    # now = T0+600 s, grace 120 s: ticks before T0+480 s are late; T0+480 s itself is not
    result = plan(minutely(), Rules(policy="skip", grace_seconds=120), T0, at(600))

    assert result == Plan(
        fire=False,
        catch_up=[at(480), at(540), at(600)],
        skips=misfires(0, 60, 120, 180, 240, 300, 360, 420),
        upcoming=at(660),
    )
    assert result.fired == 3


def test_skip_fires_a_claimed_tick_within_the_grace_with_its_missed_ticks() -> None:
    result = plan(minutely(), Rules(policy="skip", grace_seconds=120), T0, at(100))

    assert result == Plan(fire=True, catch_up=[at(60)], skips=[], upcoming=at(120))


def test_skip_fires_a_claimed_tick_exactly_at_the_grace_limit() -> None:
    hourly = trigger(type="interval", every_seconds=3600, start_at=T0)

    result = plan(hourly, Rules(policy="skip", grace_seconds=60), T0, at(60))

    assert result == Plan(fire=True, upcoming=at(3600))


def test_skip_drops_a_claimed_tick_just_past_the_grace() -> None:
    hourly = trigger(type="interval", every_seconds=3600, start_at=T0)
    now = at(60) + timedelta(microseconds=1)

    result = plan(hourly, Rules(policy="skip", grace_seconds=60), T0, now)

    assert result == Plan(fire=False, catch_up=[], skips=[Skip(T0, "misfire")], upcoming=at(3600))


def test_skip_lists_late_ticks_up_to_max_catchup_then_a_summary() -> None:
    # 20 missed ticks, grace 90 s: T0+60 .. T0+1080 s are late (18), T0+1140, T0+1200 s fire
    result = plan(minutely(), Rules(policy="skip", grace_seconds=90, max_catchup=2), T0, at(1200))

    assert result == Plan(
        fire=False,
        catch_up=[at(1140), at(1200)],
        skips=[
            Skip(T0, "misfire"),
            Skip(at(60), "misfire"),
            Skip(at(120), "misfire"),
            Skip(at(180), "misfire", 16),
        ],
        upcoming=at(1260),
    )
    assert total_skipped(result.skips) + result.fired == 21


# max_occurrences


def test_the_last_occurrence_fires_and_nothing_follows() -> None:
    result = plan(minutely(), Rules(max_occurrences=3, fired=2), at(120), at(121))

    assert result.fire is True
    assert result.catch_up == []
    assert result.upcoming is None


def test_an_occurrence_before_the_last_is_followed_by_the_next_tick() -> None:
    result = plan(minutely(), Rules(max_occurrences=3, fired=1), at(60), at(61))

    assert result == Plan(fire=True, upcoming=at(120))


def test_fire_all_catch_ups_stop_at_the_occurrence_budget() -> None:
    # budget 3: the claimed tick and two catch-ups, of ten missed ticks
    rules = Rules(policy="fire_all", max_occurrences=3, fired=0)

    result = plan(minutely(), rules, T0, at(600))

    assert result.fire is True
    assert result.catch_up == [at(60), at(120)]
    assert result.upcoming is None


def test_fire_all_with_one_occurrence_left_fires_only_the_claimed_tick() -> None:
    rules = Rules(policy="fire_all", max_occurrences=3, fired=2)

    result = plan(minutely(), rules, T0, at(600))

    assert result.fire is True
    assert result.catch_up == []
    assert result.upcoming is None


def test_a_skipped_claim_does_not_spend_the_occurrence_budget() -> None:
    hourly = trigger(type="interval", every_seconds=3600, start_at=T0)
    rules = Rules(policy="skip", grace_seconds=60, max_occurrences=3, fired=2)

    result = plan(hourly, rules, T0, at(600))

    assert result == Plan(fire=False, skips=[Skip(T0, "misfire")], upcoming=at(3600))


# end_at


def test_the_tick_at_end_at_is_still_planned() -> None:
    assert plan(minutely(end_at=at(120)), Rules(), at(60), at(60)).upcoming == at(120)


def test_nothing_is_planned_after_end_at() -> None:
    result = plan(minutely(end_at=at(120)), Rules(), at(120), at(120))

    assert result == Plan(fire=True, catch_up=[], skips=[], upcoming=None)


def test_nothing_is_planned_when_the_next_tick_falls_after_an_unaligned_end_at() -> None:
    assert plan(minutely(end_at=at(150)), Rules(), at(120), at(121)).upcoming is None


def test_a_late_claim_records_only_the_missed_ticks_up_to_end_at() -> None:
    result = plan(minutely(end_at=at(120)), Rules(), T0, at(600))

    assert result == Plan(fire=True, skips=misfires(60, 120), upcoming=None)


def test_fire_all_catches_up_only_to_end_at() -> None:
    result = plan(minutely(end_at=at(120)), Rules(policy="fire_all"), T0, at(600))

    assert result == Plan(fire=True, catch_up=[at(60), at(120)], skips=[], upcoming=None)


def test_a_cron_past_its_end_at_plans_nothing() -> None:
    hourly = cron("0 * * * *", end_at=utc(2027, 1, 4, 14, 30))

    assert plan(hourly, Rules(), utc(2027, 1, 4, 13), utc(2027, 1, 4, 13)).upcoming == utc(
        2027, 1, 4, 14
    )
    assert plan(hourly, Rules(), utc(2027, 1, 4, 14), utc(2027, 1, 4, 14)).upcoming is None


# DST gaps (dst_gap="skip" records the wall times that do not exist)

# New York: 2027-03-14 02:00 EST (07:00Z) -> 03:00 EDT.


def test_a_skipped_dst_wall_time_is_recorded_once_and_the_next_real_one_planned() -> None:
    nightly = cron("30 2 * * *", "America/New_York", dst_gap="skip")
    claimed = z("2027-03-13T07:30Z")  # 02:30 EST

    result = plan(nightly, Rules(), claimed, claimed)

    assert result == Plan(
        fire=True,
        catch_up=[],
        skips=[Skip(z("2027-03-14T07:00Z"), "dst_gap", 1)],
        upcoming=z("2027-03-15T06:30Z"),
    )


def test_a_shifted_dst_wall_time_is_planned_at_the_jump_and_not_skipped() -> None:
    nightly = cron("30 2 * * *", "America/New_York")  # dst_gap="shift" by default
    claimed = z("2027-03-13T07:30Z")

    result = plan(nightly, Rules(), claimed, claimed)

    assert result == Plan(fire=True, catch_up=[], skips=[], upcoming=z("2027-03-14T07:00Z"))


def test_every_missing_wall_time_of_a_gap_is_counted_in_one_entry() -> None:
    quarterly = cron("*/15 * * * *", "America/New_York", dst_gap="skip")
    claimed = z("2027-03-14T06:45Z")  # 01:45 EST; 02:00, 02:15, 02:30, 02:45 do not exist

    result = plan(quarterly, Rules(), claimed, claimed)

    assert result == Plan(
        fire=True,
        skips=[Skip(z("2027-03-14T07:00Z"), "dst_gap", 4)],
        upcoming=z("2027-03-14T07:00Z"),  # 03:00 EDT
    )


def test_a_late_claim_across_a_gap_records_misfires_and_the_gap_separately() -> None:
    quarterly = cron("*/15 * * * *", "America/New_York", dst_gap="skip")

    result = plan(quarterly, Rules(), z("2027-03-14T06:45Z"), z("2027-03-14T07:20Z"))

    assert result == Plan(
        fire=True,
        skips=[
            Skip(z("2027-03-14T07:00Z"), "misfire"),
            Skip(z("2027-03-14T07:15Z"), "misfire"),
            Skip(z("2027-03-14T07:00Z"), "dst_gap", 4),
        ],
        upcoming=z("2027-03-14T07:30Z"),
    )


@pytest.mark.parametrize(
    ("expression", "zone", "claimed", "jump", "missing", "upcoming"),
    [
        # London: 2027-03-28 01:00 GMT (01:00Z) -> 02:00 BST
        (
            "30 1 * * *",
            "Europe/London",
            "2027-03-27T01:30Z",
            "2027-03-28T01:00Z",
            1,
            "2027-03-29T00:30Z",
        ),
        # Lord Howe: 2027-10-03 02:00 (+10:30, 15:30Z) -> 02:30 (+11:00), a 30-minute gap
        (
            "15 2 * * *",
            "Australia/Lord_Howe",
            "2027-10-01T15:45Z",
            "2027-10-02T15:30Z",
            1,
            "2027-10-03T15:15Z",
        ),
        (
            "*/15 * * * *",
            "Australia/Lord_Howe",
            "2027-10-02T15:15Z",  # 01:45 local; 02:00 and 02:15 do not exist
            "2027-10-02T15:30Z",
            2,
            "2027-10-02T15:30Z",  # 02:30 local
        ),
    ],
)
def test_dst_gaps_are_recorded_in_other_zones(
    expression: str, zone: str, claimed: str, jump: str, missing: int, upcoming: str
) -> None:
    nightly = cron(expression, zone, dst_gap="skip")

    result = plan(nightly, Rules(), z(claimed), z(claimed))

    assert result == Plan(
        fire=True, skips=[Skip(z(jump), "dst_gap", missing)], upcoming=z(upcoming)
    )


@pytest.mark.parametrize("zone", ["UTC", "Asia/Tokyo"])
def test_a_zone_without_dst_records_no_dst_gap(zone: str) -> None:
    nightly = cron("30 2 * * *", zone, dst_gap="skip")

    # a month late, across the spring changes of other zones
    result = plan(nightly, Rules(), z("2027-03-01T12:00Z"), z("2027-04-01T12:00Z"))

    assert [entry for entry in result.skips if entry.reason == "dst_gap"] == []
    assert total_skipped(result.skips) == 31
    assert dst_gap_skips(nightly, z("2027-01-01T00:00Z"), z("2028-01-01T00:00Z")) == []


def test_falling_back_records_no_dst_gap() -> None:
    # New York: 2027-11-07 02:00 EDT -> 01:00 EST repeats an hour, skips none
    nightly = cron("30 1 * * *", "America/New_York", dst_gap="skip")

    assert dst_gap_skips(nightly, z("2027-11-01T00:00Z"), z("2027-11-30T00:00Z")) == []


def test_dst_gap_skips_are_only_recorded_for_the_skip_policy() -> None:
    shifted = cron("30 2 * * *", "America/New_York", dst_gap="shift")
    skipped = cron("30 2 * * *", "America/New_York", dst_gap="skip")
    after, until = z("2027-01-01T00:00Z"), z("2028-01-01T00:00Z")

    assert dst_gap_skips(shifted, after, until) == []
    assert dst_gap_skips(skipped, after, until) == [Skip(z("2027-03-14T07:00Z"), "dst_gap", 1)]


def test_dst_gap_skips_respect_the_trigger_bounds() -> None:
    after, until = z("2027-01-01T00:00Z"), z("2028-01-01T00:00Z")
    starts_later = cron(
        "30 2 * * *", "America/New_York", dst_gap="skip", start_at=z("2027-03-14T12:00Z")
    )
    ends_earlier = cron(
        "30 2 * * *", "America/New_York", dst_gap="skip", end_at=z("2027-03-14T06:00Z")
    )

    assert dst_gap_skips(starts_later, after, until) == []
    assert dst_gap_skips(ends_earlier, after, until) == []


def test_a_dst_gap_before_end_at_is_recorded_when_the_schedule_completes() -> None:
    # 2027-03-14 02:30 EST does not exist (skipped at 07:00Z, before end_at); the next
    # real tick (2027-03-15 06:30Z) is after end_at, so the schedule completes.
    nightly = cron("30 2 * * *", "America/New_York", dst_gap="skip", end_at=z("2027-03-14T12:00Z"))
    claimed = z("2027-03-13T07:30Z")

    result = plan(nightly, Rules(), claimed, claimed)

    assert result.upcoming is None
    assert result.skips == [Skip(z("2027-03-14T07:00Z"), "dst_gap", 1)]


# skipped_range (a paused schedule)


def test_paused_ticks_are_listed_one_by_one_up_to_the_limit_then_summarized() -> None:
    # ten ticks in (T0, T0+600 s]
    assert skipped_range(minutely(), T0, at(600), "paused", 3) == [
        Skip(at(60), "paused"),
        Skip(at(120), "paused"),
        Skip(at(180), "paused"),
        Skip(at(240), "paused", 7),
    ]


@pytest.mark.parametrize("limit", [10, 11, 100])
def test_paused_ticks_within_the_limit_are_all_listed_singly(limit: int) -> None:
    assert skipped_range(minutely(), T0, at(600), "paused", limit) == [
        Skip(at(60 * i), "paused") for i in range(1, 11)
    ]


def test_a_zero_limit_records_the_paused_range_as_one_entry() -> None:
    assert skipped_range(minutely(), T0, at(600), "paused", 0) == [Skip(at(60), "paused", 10)]


def test_a_paused_range_without_ticks_records_nothing() -> None:
    assert skipped_range(minutely(), at(60), at(119), "paused", 5) == []


def test_a_paused_range_stops_at_end_at() -> None:
    assert skipped_range(minutely(end_at=at(300)), T0, at(6000), "paused", 2) == [
        Skip(at(60), "paused"),
        Skip(at(120), "paused"),
        Skip(at(180), "paused", 3),
    ]


def test_a_paused_range_across_a_gap_also_records_the_gap() -> None:
    nightly = cron("30 2 * * *", "America/New_York", dst_gap="skip")

    assert skipped_range(nightly, z("2027-03-12T00:00Z"), z("2027-03-16T00:00Z"), "paused", 10) == [
        Skip(z("2027-03-12T07:30Z"), "paused"),
        Skip(z("2027-03-13T07:30Z"), "paused"),
        Skip(z("2027-03-15T06:30Z"), "paused"),
        Skip(z("2027-03-14T07:00Z"), "dst_gap", 1),
    ]
