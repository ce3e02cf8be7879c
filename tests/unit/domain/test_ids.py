"""Identifiers: stable occurrence ids (UUIDv5) and time-ordered schedule ids (UUIDv7)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from app.domain.ids import format_instant, occurrence_id, uuid7

SCHEDULE = uuid.UUID("01900000-0000-7000-8000-000000000001")
OTHER_SCHEDULE = uuid.UUID("01900000-0000-7000-8000-000000000002")
FIRE_AT = datetime(2024, 3, 5, 10, 30, tzinfo=UTC)

# hypothesis takes naive bounds and attaches the zone itself
EARLIEST, LATEST = datetime(1971, 1, 1), datetime(2999, 1, 1)  # noqa: DTZ001
instants = st.datetimes(min_value=EARLIEST, max_value=LATEST, timezones=st.just(UTC))
random_bits = st.integers(min_value=0, max_value=2**74 - 1)


def test_occurrence_id_is_the_same_for_the_same_schedule_and_instant() -> None:
    assert occurrence_id(SCHEDULE, FIRE_AT) == occurrence_id(SCHEDULE, FIRE_AT)


def test_occurrence_id_is_a_uuid5() -> None:
    assert occurrence_id(SCHEDULE, FIRE_AT).version == 5


def test_occurrence_id_differs_for_another_instant() -> None:
    later = FIRE_AT + timedelta(microseconds=1)

    assert occurrence_id(SCHEDULE, FIRE_AT) != occurrence_id(SCHEDULE, later)


def test_occurrence_id_differs_for_another_schedule() -> None:
    assert occurrence_id(SCHEDULE, FIRE_AT) != occurrence_id(OTHER_SCHEDULE, FIRE_AT)


def test_occurrence_id_is_the_same_for_one_instant_written_in_different_offsets() -> None:
    in_paris = FIRE_AT.astimezone(timezone(timedelta(hours=1)))
    in_new_york = FIRE_AT.astimezone(timezone(timedelta(hours=-5)))

    assert occurrence_id(SCHEDULE, in_paris) == occurrence_id(SCHEDULE, FIRE_AT)
    assert occurrence_id(SCHEDULE, in_new_york) == occurrence_id(SCHEDULE, FIRE_AT)


def test_occurrence_id_is_pinned_forever() -> None:
    """Consumers dedupe on this id: the namespace and the text format must never change."""
    assert format_instant(FIRE_AT) == "2024-03-05T10:30:00.000000Z"
    assert occurrence_id(SCHEDULE, FIRE_AT) == uuid.uuid5(
        uuid.UUID("5b0c2f6e-8d1a-4f3e-9c41-2d8f0a7b6e13"),
        "01900000-0000-7000-8000-000000000001/2024-03-05T10:30:00.000000Z",
    )


offsets = st.integers(min_value=-14 * 60, max_value=14 * 60).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)


@given(st.uuids(), instants, offsets)
def test_occurrence_id_is_the_standard_uuid5_of_schedule_and_instant(
    schedule: uuid.UUID, at: datetime, offset: timezone
) -> None:
    """Whatever zone the instant is written in, the id is the one `uuid.uuid5` gives."""
    expected = uuid.uuid5(
        uuid.UUID("5b0c2f6e-8d1a-4f3e-9c41-2d8f0a7b6e13"),
        f"{schedule}/{at.strftime('%Y-%m-%dT%H:%M:%S.%fZ')}",
    )

    assert occurrence_id(schedule, at.astimezone(offset)) == expected
    assert occurrence_id(schedule, at) == expected


@given(instants, instants)
def test_occurrence_ids_of_distinct_instants_are_distinct(a: datetime, b: datetime) -> None:
    assert (occurrence_id(SCHEDULE, a) == occurrence_id(SCHEDULE, b)) == (a == b)


@given(instants, random_bits)
def test_uuid7_has_version_7_and_the_rfc_4122_variant(now: datetime, bits: int) -> None:
    value = uuid7(now, bits)

    assert value.version == 7
    assert value.variant == uuid.RFC_4122


def test_uuid7_carries_the_unix_milliseconds_in_its_first_48_bits() -> None:
    value = uuid7(datetime(2024, 1, 1, tzinfo=UTC), 0)

    assert value.int >> 80 == 1_704_067_200_000
    assert str(value).startswith("018cc251-f400-7")


def test_uuid7_keeps_all_its_random_bits() -> None:
    ones = uuid7(FIRE_AT, 2**74 - 1)
    zeros = uuid7(FIRE_AT, 0)

    assert ones.int ^ zeros.int == (0xFFF << 64) | (2**62 - 1)


@given(
    earlier=instants,
    gap=st.timedeltas(min_value=timedelta(milliseconds=1), max_value=timedelta(days=3650)),
    bits_a=random_bits,
    bits_b=random_bits,
)
def test_uuid7_sorts_by_time(earlier: datetime, gap: timedelta, bits_a: int, bits_b: int) -> None:
    first = uuid7(earlier, bits_a)
    second = uuid7(earlier + gap, bits_b)

    assert first < second
    assert str(first) < str(second)
    assert first.bytes < second.bytes
