"""How the console writes instants, periods and triggers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from app.domain.trigger import CronTrigger, ImmediateTrigger, IntervalTrigger, OnceTrigger, Trigger
from app.ui.display import period, relative, shortened, trigger_text, when


def test_an_instant_is_written_in_utc_to_the_second() -> None:
    paris_summer = timezone(timedelta(hours=2))

    assert when(datetime(2031, 6, 1, 14, 0, 30, 999_999, tzinfo=paris_summer)) == (
        "2031-06-01 12:00:30Z"
    )


def test_no_instant_is_written_as_a_dash() -> None:
    assert when(None) == "-"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (172800, "2 d"),
        (86400, "1 d"),
        (7200, "2 h"),
        (5400, "90 min"),
        (60, "1 min"),
        (90, "90 s"),
        (1.5, "1.5 s"),
    ],
)
def test_a_period_is_written_in_its_largest_whole_unit(seconds: float, text: str) -> None:
    assert period(seconds) == text


@pytest.mark.parametrize(
    ("trigger", "text"),
    [
        (
            CronTrigger(type="cron", expression="*/5 * * * *", timezone="Europe/Paris"),
            "cron */5 * * * * (Europe/Paris)",
        ),
        (IntervalTrigger(type="interval", every_seconds=3600), "every 1 h"),
        (
            OnceTrigger(type="once", at=datetime(2031, 6, 1, 12, 0, tzinfo=UTC)),
            "once at 2031-06-01 12:00:00Z",
        ),
        (ImmediateTrigger(type="immediate"), "immediately"),
    ],
)
def test_a_trigger_is_written_as_one_line(trigger: Trigger, text: str) -> None:
    assert trigger_text(trigger) == text


NOW = datetime(2031, 6, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("offset", "text"),
    [
        (timedelta(minutes=3, seconds=59), "in 3 min"),
        (timedelta(minutes=-5), "5 min ago"),
        (timedelta(seconds=42), "in 42 s"),
        (timedelta(seconds=-1), "1 s ago"),
        (timedelta(milliseconds=400), "now"),
        (timedelta(hours=5, minutes=59), "in 5 h"),
        (timedelta(days=-3, hours=-4), "3 d ago"),
    ],
)
def test_a_relative_time_is_in_its_largest_whole_unit(offset: timedelta, text: str) -> None:
    assert relative(NOW + offset, NOW) == text
    assert relative(None, NOW) == ""


def test_a_shortened_text_is_one_line_cut_with_an_ellipsis() -> None:
    assert shortened("HTTP 503:\n  upstream  down") == "HTTP 503: upstream down"
    assert shortened("x" * 81) == "x" * 79 + "…"
    assert shortened("x" * 80) == "x" * 80
    assert shortened(None) == ""
