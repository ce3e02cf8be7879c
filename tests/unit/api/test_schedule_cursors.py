"""Cursors of lists of schedules: each sort's round-trips, and a cursor of another sort, or
one this API could not have issued, is refused naming `cursor`."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from app.api import pagination
from app.domain.errors import InvalidInputError
from app.domain.filters import ScheduleAfter, ScheduleSort

ID = uuid.UUID("01a246d4-fb60-7d7c-9e50-f74cf683e98c")
AT = datetime(2031, 6, 1, 12, 0, 0, 123456, tzinfo=UTC)
ISSUED = [
    ScheduleAfter(ScheduleSort.CREATED, ID),
    ScheduleAfter(ScheduleSort.NEXT_FIRE_AT, ID, next_fire_at=AT),
    ScheduleAfter(ScheduleSort.NEXT_FIRE_AT, ID, next_fire_at=None),
    ScheduleAfter(ScheduleSort.FAILURES, ID, failures=17),
]


def cursor(after: ScheduleAfter) -> str:
    return pagination.encode(*pagination.schedule_key(after))


@pytest.mark.parametrize("after", ISSUED)
def test_a_cursor_reads_back_under_its_own_sort_only(after: ScheduleAfter) -> None:
    issued = cursor(after)
    assert pagination.decode_schedule(issued, after.sort) == after
    for other in ScheduleSort:
        if other is not after.sort:
            with pytest.raises(InvalidInputError) as refused:
                pagination.decode_schedule(issued, other)
            assert refused.value.parameter == "cursor"


def test_a_newest_first_cursor_is_the_id_alone_as_before() -> None:
    assert cursor(ISSUED[0]) == pagination.encode(str(ID))


@pytest.mark.parametrize(
    ("key", "sort"),
    [
        (("failures", "-1", str(ID)), ScheduleSort.FAILURES),
        (("failures", "1e9", str(ID)), ScheduleSort.FAILURES),
        (("failures", "٣", str(ID)), ScheduleSort.FAILURES),  # a digit, not an ASCII one
        (("failures", "9" * 11, str(ID)), ScheduleSort.FAILURES),
        (("failures", "3", "not-a-uuid"), ScheduleSort.FAILURES),
        (("next_fire_at", "2031-06-01T12:00:00", str(ID)), ScheduleSort.NEXT_FIRE_AT),
        (("next_fire_at", "yesterday", str(ID)), ScheduleSort.NEXT_FIRE_AT),
        (("next_fire_at", "0001-01-01T00:00:00+14:00", str(ID)), ScheduleSort.NEXT_FIRE_AT),
        (("next_fire_at", str(ID)), ScheduleSort.NEXT_FIRE_AT),
        (("created", "", str(ID)), ScheduleSort.NEXT_FIRE_AT),
    ],
)
def test_a_cursor_not_issued_here_is_refused(key: tuple[str, ...], sort: ScheduleSort) -> None:
    with pytest.raises(InvalidInputError) as refused:
        pagination.decode_schedule(pagination.encode(*key), sort)
    assert refused.value.parameter == "cursor"
