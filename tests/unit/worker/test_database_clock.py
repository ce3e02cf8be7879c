"""The database's clock as the loop tells it: the best reading of the window stands, and
no instant is put before the loop time at which a reading says the database reaches it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.worker.database_clock import DatabaseClock

EPOCH = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def test_without_a_reading_no_loop_time_is_known() -> None:
    assert DatabaseClock().local_time_of(EPOCH, now=100.0) is None


def test_an_instant_is_reached_as_long_after_the_reading_as_it_is_after_the_read_instant() -> None:
    clock = DatabaseClock()
    clock.observe(EPOCH, read_by=100.0)  # read EPOCH no later than loop time 100

    assert clock.local_time_of(EPOCH + timedelta(seconds=2.5), now=101.0) == 102.5


def test_the_quickest_reading_of_the_window_stands_and_a_slow_one_never_delays() -> None:
    clock = DatabaseClock(window=10.0)
    # A slow claim: it read EPOCH, and came back 0.3 s later.
    clock.observe(EPOCH, read_by=100.3)
    # A quick one a second later: it read EPOCH + 1 s, and came back 1 ms later.
    clock.observe(EPOCH + timedelta(seconds=1), read_by=101.001)
    # A slow one after it changes nothing.
    clock.observe(EPOCH + timedelta(seconds=2), read_by=102.2)

    assert clock.local_time_of(EPOCH + timedelta(seconds=3), now=102.5) == pytest.approx(103.001)


def test_a_reading_older_than_the_window_no_longer_stands() -> None:
    clock = DatabaseClock(window=10.0)
    clock.observe(EPOCH, read_by=100.0)  # the best, until it is old
    clock.observe(EPOCH + timedelta(seconds=5), read_by=105.5)

    assert clock.local_time_of(EPOCH + timedelta(seconds=20), now=109.0) == 120.0
    assert clock.local_time_of(EPOCH + timedelta(seconds=20), now=111.0) == 120.5
    assert clock.local_time_of(EPOCH, now=116.0) is None


def test_a_database_clock_stepped_back_counts_once_its_older_readings_leave_the_window() -> None:
    clock = DatabaseClock(window=10.0)
    clock.observe(EPOCH, read_by=100.0)
    # The database's clock steps back 2 s: its instants come 2 s later by the loop's.
    clock.observe(EPOCH - timedelta(seconds=1), read_by=101.0)

    assert clock.local_time_of(EPOCH + timedelta(seconds=10), now=105.0) == 110.0
    assert clock.local_time_of(EPOCH + timedelta(seconds=10), now=110.5) == 112.0
