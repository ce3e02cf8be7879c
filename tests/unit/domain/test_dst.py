"""Cron in a time zone across DST changes, zone by zone, under every gap/repeat policy."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.trigger import CronTrigger, next_fire_after


def z(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def fires(trigger: CronTrigger, after: str, count: int) -> list[str]:
    out: list[str] = []
    moment = z(after)
    for _ in range(count):
        nxt = next_fire_after(trigger, moment)
        assert nxt is not None
        out.append(nxt.strftime("%Y-%m-%dT%H:%MZ"))
        moment = nxt
    return out


def cron(expression: str, zone: str, **policy: str) -> CronTrigger:
    return CronTrigger(type="cron", expression=expression, timezone=zone, **policy)  # type: ignore[arg-type]


# (expression, zone, after, gap, repeat, expected fire instants)
CASES = [
    # New York: 2027-03-14 02:00 EST -> 03:00 EDT; 2027-11-07 02:00 EDT -> 01:00 EST.
    (
        "30 2 * * *",
        "America/New_York",
        "2027-03-13T12:00Z",
        "shift",
        "first",
        ["2027-03-14T07:00Z", "2027-03-15T06:30Z"],
    ),
    (
        "30 2 * * *",
        "America/New_York",
        "2027-03-13T12:00Z",
        "skip",
        "first",
        ["2027-03-15T06:30Z", "2027-03-16T06:30Z"],
    ),
    (
        "*/15 2 * * *",
        "America/New_York",
        "2027-03-14T05:00Z",
        "shift",
        "first",
        ["2027-03-14T07:00Z", "2027-03-15T06:00Z"],
    ),
    (
        "30 1 * * *",
        "America/New_York",
        "2027-11-06T12:00Z",
        "shift",
        "first",
        ["2027-11-07T05:30Z", "2027-11-08T06:30Z"],
    ),
    (
        "30 1 * * *",
        "America/New_York",
        "2027-11-06T12:00Z",
        "shift",
        "both",
        ["2027-11-07T05:30Z", "2027-11-07T06:30Z", "2027-11-08T06:30Z"],
    ),
    (
        "0 * * * *",
        "America/New_York",
        "2027-11-07T04:30Z",
        "shift",
        "first",
        ["2027-11-07T05:00Z", "2027-11-07T06:00Z", "2027-11-07T07:00Z"],
    ),
    # London: 2027-03-28 01:00 GMT -> 02:00 BST; 2027-10-31 02:00 BST -> 01:00 GMT.
    (
        "30 1 * * *",
        "Europe/London",
        "2027-03-27T12:00Z",
        "shift",
        "first",
        ["2027-03-28T01:00Z", "2027-03-29T00:30Z"],
    ),
    (
        "30 1 * * *",
        "Europe/London",
        "2027-03-27T12:00Z",
        "skip",
        "both",
        ["2027-03-29T00:30Z", "2027-03-30T00:30Z"],
    ),
    (
        "30 1 * * *",
        "Europe/London",
        "2027-10-30T12:00Z",
        "shift",
        "first",
        ["2027-10-31T00:30Z", "2027-11-01T01:30Z"],
    ),
    (
        "30 1 * * *",
        "Europe/London",
        "2027-10-30T12:00Z",
        "skip",
        "both",
        ["2027-10-31T00:30Z", "2027-10-31T01:30Z", "2027-11-01T01:30Z"],
    ),
    # Lord Howe, a 30-minute shift: 2027-10-03 02:00 -> 02:30 (+10:30 -> +11);
    # 2027-04-04 02:00 -> 01:30 (+11 -> +10:30).
    (
        "15 2 * * *",
        "Australia/Lord_Howe",
        "2027-10-02T12:00Z",
        "shift",
        "first",
        ["2027-10-02T15:30Z", "2027-10-03T15:15Z"],
    ),
    (
        "15 2 * * *",
        "Australia/Lord_Howe",
        "2027-10-02T12:00Z",
        "skip",
        "first",
        ["2027-10-03T15:15Z", "2027-10-04T15:15Z"],
    ),
    (
        "45 1 * * *",
        "Australia/Lord_Howe",
        "2027-04-03T12:00Z",
        "shift",
        "first",
        ["2027-04-03T14:45Z", "2027-04-04T15:15Z"],
    ),
    (
        "45 1 * * *",
        "Australia/Lord_Howe",
        "2027-04-03T12:00Z",
        "shift",
        "both",
        ["2027-04-03T14:45Z", "2027-04-03T15:15Z", "2027-04-04T15:15Z"],
    ),
    # Tokyo has no DST: every policy gives the same instants.
    (
        "0 9 * * *",
        "Asia/Tokyo",
        "2027-03-13T12:00Z",
        "skip",
        "both",
        ["2027-03-14T00:00Z", "2027-03-15T00:00Z"],
    ),
    (
        "0 9 * * *",
        "Asia/Tokyo",
        "2027-03-13T12:00Z",
        "shift",
        "first",
        ["2027-03-14T00:00Z", "2027-03-15T00:00Z"],
    ),
]


@pytest.mark.parametrize(("expression", "zone", "after", "gap", "repeat", "expected"), CASES)
def test_fire_instants_across_dst_changes(
    expression: str, zone: str, after: str, gap: str, repeat: str, expected: list[str]
) -> None:
    trigger = cron(expression, zone, dst_gap=gap, dst_repeat=repeat)

    assert fires(trigger, after, len(expected)) == expected


def test_the_documented_example_fires_at_the_end_of_the_gap() -> None:
    trigger = cron("30 2 * * *", "America/New_York")

    assert next_fire_after(trigger, z("2027-03-14T00:00Z")) == z("2027-03-14T07:00Z")


ZONES = ["UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Tokyo"]


@settings(max_examples=60, deadline=None)
@given(
    zone=st.sampled_from(ZONES),
    minute=st.sampled_from(["0", "15", "30", "*/20", "5,45"]),
    hour=st.sampled_from(["*", "1", "2", "1-3", "*/6"]),
    gap=st.sampled_from(["shift", "skip"]),
    repeat=st.sampled_from(["first", "both"]),
    start=st.datetimes(
        # hypothesis takes naive bounds and attaches the zone itself
        min_value=datetime(2026, 1, 1),  # noqa: DTZ001
        max_value=datetime(2028, 12, 31),  # noqa: DTZ001
        timezones=st.just(UTC),
    ),
)
def test_fire_instants_strictly_increase_and_match_the_expression_locally(
    zone: str, minute: str, hour: str, gap: str, repeat: str, start: datetime
) -> None:
    from zoneinfo import ZoneInfo

    from croniter import croniter

    trigger = cron(f"{minute} {hour} * * *", zone, dst_gap=gap, dst_repeat=repeat)
    moment = start
    for _ in range(12):
        nxt = next_fire_after(trigger, moment)
        assert nxt is not None
        assert nxt > moment
        local = nxt.astimezone(ZoneInfo(zone)).replace(tzinfo=None)
        shifted_out_of_a_gap = gap == "shift" and local.minute in (0, 30) and local.second == 0
        assert croniter.match(trigger.expression, local) or shifted_out_of_a_gap
        moment = nxt
