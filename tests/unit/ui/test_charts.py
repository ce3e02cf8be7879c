"""The console's activity charts, read back as a browser would see them: the caption's
figures, the bars and their titles, the lateness lines and the axes' labels."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest

from app.domain.activity import (
    BUCKETS,
    LATENESS_BOUNDS,
    Activity,
    Minute,
    Scope,
    Window,
    quantile,
)
from app.ui.charts import activity_chart, format_lateness

SINCE = datetime(2031, 6, 1, 12, 0, tzinfo=UTC)
CURRENT_TO = datetime(2031, 6, 1, 12, 59, 57, tzinfo=UTC)
FAST = LATENESS_BOUNDS.index(0.05)
SLOW = LATENESS_BOUNDS.index(2.5)
BEYOND = len(LATENESS_BOUNDS)


def lateness(**counts: int) -> tuple[int, ...]:
    """A histogram from bucket indices given as keyword names: lateness(b3=100, b8=2)."""
    histogram = [0] * BUCKETS
    for name, count in counts.items():
        histogram[int(name[1:])] = count
    return tuple(histogram)


def busy(
    at: datetime, delivered: int, failed: int = 0, dead: int = 0, bucket: int = FAST
) -> Minute:
    return Minute(
        at=at,
        delivered=delivered,
        failed=failed,
        dead_lettered=dead,
        lateness=lateness(**{f"b{bucket}": delivered}),
    )


def window(
    found: dict[int, Minute] | None = None,
    *,
    span: Window = Window.HOUR,
    subject: str | None = "sch_1",
    current_to: datetime | None = CURRENT_TO,
) -> Activity:
    """A window from SINCE, every minute present: those `found` (by index), zeros elsewhere."""
    count = 60 if span is Window.HOUR else 1440
    found = found or {}
    minutes = tuple(
        found.get(index) or Minute(at=SINCE + timedelta(minutes=index)) for index in range(count)
    )
    return Activity(
        scope=Scope.SCHEDULE,
        subject=subject,
        window=span,
        since=SINCE,
        until=SINCE + timedelta(minutes=count),
        minutes=minutes,
        current_to=current_to,
    )


def at(index: int) -> datetime:
    return SINCE + timedelta(minutes=index)


def parsed(activity: Activity) -> ET.Element:
    return ET.fromstring(str(activity_chart(activity)))


def chart(figure: ET.Element, css_class: str) -> ET.Element:
    found = figure.find(f"svg[@class='{css_class}']")
    assert found is not None
    return found


def plot(figure: ET.Element, css_class: str) -> ET.Element:
    """A chart's plot: its nested <svg>."""
    found = chart(figure, css_class).find("svg")
    assert found is not None
    return found


def figures(figure: ET.Element) -> dict[str, str]:
    return {
        element.attrib["data-figure"]: element.text or ""
        for element in figure.iter()
        if "data-figure" in element.attrib
    }


def bars(figure: ET.Element) -> dict[str, list[ET.Element]]:
    """The bars by their title: each bar's segments, bottom first."""
    found: dict[str, list[ET.Element]] = {}
    for group in plot(figure, "chart-attempts").iter("g"):
        title = group.find("title")
        if title is not None:
            found[title.text or ""] = list(group.iter("rect"))
    return found


def extent(segments: list[ET.Element]) -> tuple[int, int]:
    """A bar's lowest and highest point, in plot units from its baseline."""
    lows = [int(segment.get("y", "0")) for segment in segments]
    highs = [
        low + int(segment.attrib["height"]) for low, segment in zip(lows, segments, strict=True)
    ]
    return min(lows), max(highs)


def plot_height(figure: ET.Element, css_class: str) -> int:
    return int(plot(figure, css_class).attrib["viewBox"].split()[3])


def texts(element: ET.Element) -> list[str]:
    return ["".join(text.itertext()) for text in element.iter("text")]


def test_the_caption_holds_the_sums_of_the_minutes() -> None:
    activity = window(
        {
            3: busy(at(3), delivered=120, failed=3, dead=1),
            4: busy(at(4), delivered=1500, failed=20, dead=0),
            59: busy(at(59), delivered=7, failed=0, dead=0),
        }
    )

    shown = figures(parsed(activity))

    assert shown["delivered"] == "1627"
    assert shown["failed"] == "23"
    assert shown["dead_lettered"] == "1"


def test_the_caption_says_how_current_the_figures_are() -> None:
    caption = parsed(window()).find("figcaption")
    assert caption is not None

    assert "figures up to 12:59:57 UTC" in "".join(caption.itertext())


def test_the_caption_says_when_nothing_was_rolled_up_yet() -> None:
    caption = parsed(window(current_to=None)).find("figcaption")
    assert caption is not None

    assert "figures not rolled up yet" in "".join(caption.itertext())


def test_a_busy_minute_has_a_bar_titled_with_its_numbers_and_an_empty_one_none() -> None:
    activity = window({34: busy(at(34), delivered=120, failed=3, dead=1)})

    shown = bars(parsed(activity))

    assert list(shown) == ["12:34 UTC · 120 delivered, 3 failed, 1 dead-lettered"]


def test_a_bar_stacks_delivered_then_failed_then_dead_lettered() -> None:
    # Of the 3 failed attempts, 1 was dead-lettered: the bar's 9 attempts, each once.
    activity = window({0: busy(at(0), delivered=6, failed=3, dead=1)})

    (segments,) = bars(parsed(activity)).values()

    assert [segment.attrib["class"] for segment in segments] == [
        "bar-delivered",
        "bar-failed",
        "bar-dead",
    ]
    assert [extent([segment]) for segment in segments] == [(0, 667), (667, 889), (889, 1000)]


def test_the_tallest_bar_spans_the_plot_and_the_others_are_to_scale() -> None:
    activity = window(
        {
            10: busy(at(10), delivered=400, failed=0),
            11: busy(at(11), delivered=150, failed=50),
        }
    )
    figure = parsed(activity)

    shown = bars(figure)

    height = plot_height(figure, "chart-attempts")
    assert extent(shown["12:10 UTC · 400 delivered, 0 failed, 0 dead-lettered"]) == (0, height)
    assert extent(shown["12:11 UTC · 150 delivered, 50 failed, 0 dead-lettered"]) == (
        0,
        height // 2,
    )


def test_the_y_axis_is_labelled_with_the_largest_minute_and_zero() -> None:
    figure = parsed(window({5: busy(at(5), delivered=97, failed=3)}))

    labels = texts(chart(figure, "chart-attempts"))

    assert "100" in labels
    assert "0" in labels


def test_the_time_axis_is_labelled_with_the_window_start_middle_and_end() -> None:
    figure = parsed(window(span=Window.DAY))

    for css_class in ("chart-attempts", "chart-lateness"):
        labels = texts(chart(figure, css_class))
        assert "12:00" in labels
        assert "00:00" in labels  # the middle of the day from noon
        assert "12:00 UTC" in labels


def test_the_lateness_axis_is_labelled_on_a_log_scale() -> None:
    labels = texts(chart(parsed(window()), "chart-lateness"))

    assert {"10 ms", "1 s", "1 min", "1 h"} <= set(labels)


def test_p99_is_the_quantile_of_the_summed_histogram() -> None:
    # Fast minutes, one slow one, and one delivery beyond an hour: no single minute's p99,
    # nor their largest, is the window's.
    found = {index: busy(at(index), delivered=100) for index in range(60)}
    found[20] = busy(at(20), delivered=200, bucket=SLOW)
    found[30] = Minute(at=at(30), delivered=1, lateness=lateness(**{f"b{BEYOND}": 1}))
    summed = [
        sum(counts) for counts in zip(*(minute.lateness for minute in found.values()), strict=True)
    ]

    shown = figures(parsed(window(found)))

    assert shown["p99"] == format_lateness(quantile(summed, 0.99)) == "≤ 2.5 s"
    assert shown["p50"] == "≤ 50 ms"


def test_the_lateness_lines_break_where_nothing_was_delivered() -> None:
    found = {index: busy(at(index), delivered=10) for index in (0, 1, 2, 4, 5)}
    found[5] = busy(at(5), delivered=10, bucket=SLOW)

    lines = plot(parsed(window(found)), "chart-lateness")

    p99 = [line.attrib["points"].split() for line in lines.iter("polyline")]
    classes = [line.attrib["class"] for line in lines.iter("polyline")]
    assert classes == ["line-p99", "line-p99", "line-p50", "line-p50"]
    assert [len(points) for points in p99[:2]] == [3, 2]
    # Slower is higher: y grows downwards.
    fast_y = int(p99[1][0].split(",")[1])
    slow_y = int(p99[1][1].split(",")[1])
    assert slow_y < fast_y


def test_lateness_beyond_an_hour_is_drawn_at_the_top_and_a_lone_minute_as_a_dash() -> None:
    found = {7: Minute(at=at(7), delivered=1, lateness=lateness(**{f"b{BEYOND}": 1}))}

    lines = list(plot(parsed(window(found)), "chart-lateness").iter("polyline"))

    assert lines[0].attrib["class"] == "line-p99"
    points = [point.split(",") for point in lines[0].attrib["points"].split()]
    assert len(points) == 2  # one point alone would draw nothing
    assert {y for _, y in points} == {"0"}


def test_over_an_hour_each_minute_shows_its_lateness_in_a_title() -> None:
    found = {index: busy(at(index), delivered=10) for index in (0, 1)}
    found[1] = busy(at(1), delivered=10, bucket=SLOW)

    titles = [title.text for title in plot(parsed(window(found)), "chart-lateness").iter("title")]

    assert titles == [
        "12:00 UTC · p50 ≤ 50 ms, p99 ≤ 50 ms",
        "12:01 UTC · p50 ≤ 2.5 s, p99 ≤ 2.5 s",
    ]


def test_an_empty_window_shows_zeros_no_lateness_and_no_bars() -> None:
    figure = parsed(window())

    assert figures(figure) == {
        "delivered": "0",
        "failed": "0",
        "dead_lettered": "0",
        "p50": "-",
        "p99": "-",
    }
    assert bars(figure) == {}
    assert list(figure.iter("polyline")) == []
    assert "1" in texts(chart(figure, "chart-attempts"))  # the scale is at least 1


def test_text_is_escaped() -> None:
    subject = '<script>alert("x")</script>'
    activity = window({0: busy(at(0), delivered=1)}, subject=subject)

    markup = str(activity_chart(activity))

    assert "<script>" not in markup
    assert subject in chart(ET.fromstring(markup), "chart-attempts").attrib["aria-label"]


def test_the_charts_stretch_to_the_page_width() -> None:
    figure = parsed(window({0: busy(at(0), delivered=1)}))

    assert figure.tag == "figure"
    assert figure.attrib["class"] == "activity"
    for css_class in ("chart-attempts", "chart-lateness"):
        svg = chart(figure, css_class)
        assert svg.attrib["width"] == "100%"
        assert svg.attrib["role"] == "img"
        assert plot(figure, css_class).attrib["preserveAspectRatio"] == "none"


def test_a_busy_day_stays_under_400_kb() -> None:
    # Every minute with thousands delivered and some failed, one in ten with a dead letter:
    # a bar and two lateness points a minute, each its own.
    found = {
        index: Minute(
            at=at(index),
            delivered=1000 + index * 3,
            failed=10 + index % 90,
            dead_lettered=1 if index % 10 == 0 else 0,
            lateness=lateness(**{f"b{index % BUCKETS}": 900, f"b{(index + 5) % BUCKETS}": 100}),
        )
        for index in range(1440)
    }
    activity = window(found, span=Window.DAY)

    markup = str(activity_chart(activity))

    assert len(markup.encode()) < 400_000
    figure = ET.fromstring(markup)
    assert len(bars(figure)) == 1440
    assert figures(figure)["delivered"] == str(sum(minute.delivered for minute in found.values()))


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (0.005, "≤ 5 ms"),
        (0.05, "≤ 50 ms"),
        (0.25, "≤ 250 ms"),
        (1, "≤ 1 s"),
        (2.5, "≤ 2.5 s"),
        (60, "≤ 1 min"),
        (300, "≤ 5 min"),
        (3600, "≤ 1 h"),
        (math.inf, "> 1 h"),
    ],
)
def test_a_lateness_is_written_as_its_bucket_bound(seconds: float | None, text: str) -> None:
    assert format_lateness(seconds) == text
