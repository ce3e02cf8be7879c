"""The console's activity charts, drawn by the server as inline SVG: attempts per minute as
stacked bars (delivered, failed, dead-lettered) and lateness per minute as p50 and p99 lines,
over an hour or a day, with a caption that holds the window's figures as plain text (read
with JavaScript and CSS off, and by the browser tests through its `data-figure`s).

Colours are the console CSS's, by class: the markup sets none (a class per series, see
`activity_chart`). Every text is escaped; the numbers and coordinates are written here.

A plot is a nested <svg> with `preserveAspectRatio="none"`: its bars and lines stretch to
any width (a phone's 360 px, a laptop's), while the labels around it are placed in pixels
and percents, so they keep their size.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from markupsafe import Markup, escape

from app.domain.activity import LATENESS_BOUNDS, Activity, Minute, Scope, Window, quantile

# Percent of a chart's width left of its plot, for the y axis's labels. A share, not pixels:
# the plot is sized in percents, as SVG attributes cannot subtract pixels from a percentage.
# At a phone's width it still holds "1 min" or "9999" at the labels' 11 px.
GUTTER = 12
CENTRE = GUTTER + (100 - GUTTER) / 2
# A plot's height in its viewBox's units: integer coordinates, exact to a thousandth.
PLOT = 1000
# Up to this many minutes a bar leaves a gap either side; a day's bars are under a pixel wide.
SPACED_UP_TO = 180
GAP = 0.1

# The lateness scale: log10 of seconds, from the first bucket's bound (5 ms) to the last
# (1 h) over the plot's lower part; lateness beyond the last bound is drawn at its top.
LOG_LOW = math.log10(LATENESS_BOUNDS[0])
LOG_HIGH = math.log10(LATENESS_BOUNDS[-1])
BOUNDED_SHARE = 0.88
LATENESS_TICKS = (0.01, 1.0, 60.0, 3600.0)


@dataclass(frozen=True, slots=True)
class _Layout:
    """A chart's rows in pixels: above the plot, the plot, then the time axis's labels."""

    top: int
    plot: int

    @property
    def base(self) -> int:
        return self.top + self.plot

    @property
    def height(self) -> int:
        return self.base + 22

    def y(self, units: float) -> float:
        """The pixel row of a plot's `units` (0 at its top, `PLOT` at its bottom)."""
        return round(self.top + units * self.plot / PLOT, 1)


BARS = _Layout(top=8, plot=120)
LATENESS = _Layout(top=20, plot=70)


def _duration(seconds: float) -> str:
    """`seconds` in its largest unit under which it stays a number above 1: "10 ms", "2.5 s",
    "1 min", "1 h"."""
    for unit, size in (("h", 3600.0), ("min", 60.0), ("s", 1.0)):
        if seconds >= size:
            return f"{round(seconds / size, 1):g} {unit}"
    return f"{round(seconds * 1000, 1):g} ms"


def format_lateness(seconds: float | None) -> str:
    """A lateness percentile as `quantile` gives it, the upper bound of its bucket: "≤ 50 ms",
    "≤ 2.5 s", "> 1 h" beyond the last bound, "-" when nothing was delivered."""
    if seconds is None:
        return "-"
    if math.isinf(seconds):
        return f"> {_duration(LATENESS_BOUNDS[-1])}"
    return f"≤ {_duration(seconds)}"


def _utc(instant: datetime) -> datetime:
    # The store's instants are aware; a naive one is taken as UTC, never as local time.
    if instant.tzinfo is None:
        return instant.replace(tzinfo=UTC)
    return instant.astimezone(UTC)


def _hhmm(instant: datetime) -> str:
    # Not strftime: a day's chart writes 1,440 of these, and this is several times faster.
    at = _utc(instant)
    return f"{at.hour:02}:{at.minute:02}"


def _count(n: int) -> str:
    """An axis's count, at most four characters so that it fits the gutter on a phone (the
    titles and the caption hold the exact figures)."""
    if n < 10_000:
        return str(n)
    if n < 1_000_000:
        return f"{n // 1000}k"
    return f"{n // 1_000_000}M"


def _decimal(value: float) -> str:
    """A coordinate to one decimal, without a trailing ".0"."""
    return f"{round(value, 1):g}"


def _attempts(minute: Minute) -> int:
    # A dead-lettered attempt is one of the failed ones (it is counted in both): a minute's
    # attempts are its deliveries and its failures.
    return minute.delivered + max(minute.failed, minute.dead_lettered)


def _subject(activity: Activity) -> str:
    if activity.scope is Scope.FLEET or activity.subject is None:
        return "the fleet" if activity.scope is Scope.FLEET else activity.scope.value
    return f"{activity.scope.value.replace('_', ' ')} {activity.subject}"


def _span(activity: Activity) -> str:
    length = "hour" if activity.window is Window.HOUR else "24 hours"
    return f"the {length} to {_hhmm(activity.until)} UTC"


def _open(css_class: str, layout: _Layout, label: str) -> str:
    # Sized in the page's pixels (no viewBox): the labels keep their size at any width.
    # font-size is a fallback for a page without the console's CSS, which sets it.
    return (
        f'<svg class="{css_class}" role="img" aria-label="{escape(label)}" width="100%" '
        f'height="{layout.height}" font-size="11">'
    )


def _plot(layout: _Layout, columns: int, flipped: bool = False) -> str:
    """A plot's nested <svg>: a column per minute, `PLOT` units high (from -`PLOT` to 0 when
    `flipped`, for content drawn upside down from the baseline)."""
    top = -PLOT if flipped else 0
    return (
        f'<svg x="{GUTTER}%" y="{layout.top}" width="{100 - GUTTER}%" height="{layout.plot}" '
        f'viewBox="0 {top} {columns} {PLOT}" preserveAspectRatio="none">'
    )


def _gridline(css_class: str, y: float) -> str:
    return f'<line class="{css_class}" x1="{GUTTER}%" x2="100%" y1="{y:g}" y2="{y:g}"/>'


def _y_label(y: float, text: str) -> str:
    return (
        f'<text x="{GUTTER}%" dx="-4" y="{y:g}" dy="0.35em" text-anchor="end">{escape(text)}</text>'
    )


def _time_axis(activity: Activity, layout: _Layout) -> str:
    """The baseline, a tick at the window's middle, and its start, middle and end times."""
    middle = activity.since + (activity.until - activity.since) / 2
    row = layout.base + 15
    return (
        _gridline("axis", layout.base)
        + f'<line class="axis" x1="{CENTRE:g}%" x2="{CENTRE:g}%" y1="{layout.base}" '
        f'y2="{layout.base + 4}"/>'
        f'<text x="{GUTTER}%" y="{row}">{escape(_hhmm(activity.since))}</text>'
        f'<text x="{CENTRE:g}%" y="{row}" text-anchor="middle">{escape(_hhmm(middle))}</text>'
        f'<text x="100%" y="{row}" text-anchor="end">{escape(_hhmm(activity.until))} UTC</text>'
    )


def _bar(index: int, minute: Minute, tallest: int, spaced: bool) -> str:
    """A minute's stacked bar, in a group whose title gives its figures. The bars' plot is
    upside down (y rises from the baseline): the bottom segment needs no y."""
    x, width = (_decimal(index + GAP), _decimal(1 - 2 * GAP)) if spaced else (str(index), "1")
    title = (
        f"{_hhmm(minute.at)} UTC · {minute.delivered} delivered, {minute.failed} failed, "
        f"{minute.dead_lettered} dead-lettered"
    )
    parts = [f"<g><title>{escape(title)}</title>"]
    stacked, lower = 0, 0
    segments = (
        ("bar-delivered", minute.delivered),
        # The failed segment is the failures that were not dead-lettered: the stack's
        # height is the minute's attempts, each counted once.
        ("bar-failed", max(minute.failed - minute.dead_lettered, 0)),
        ("bar-dead", minute.dead_lettered),
    )
    for css_class, count in segments:
        if count <= 0:
            continue
        stacked += count
        # Each segment's top is rounded from the running sum, so the stack adds up exactly.
        upper = round(stacked * PLOT / tallest)
        y = f' y="{lower}"' if lower else ""
        parts.append(
            f'<rect class="{css_class}" x="{x}"{y} width="{width}" height="{upper - lower}"/>'
        )
        lower = upper
    parts.append("</g>")
    return "".join(parts)


def _bar_chart(activity: Activity, total: Minute) -> str:
    minutes = activity.minutes
    tallest = max((_attempts(minute) for minute in minutes), default=0) or 1
    spaced = len(minutes) <= SPACED_UP_TO
    label = (
        f"Attempts per minute, {_subject(activity)}, in {_span(activity)}: "
        f"{total.delivered} delivered, {total.failed} failed, "
        f"{total.dead_lettered} dead-lettered"
    )
    bars = "".join(
        _bar(index, minute, tallest, spaced)
        for index, minute in enumerate(minutes)
        if _attempts(minute)  # nothing that minute: no bar (a day has 1,440 of them)
    )
    return (
        _open("chart-attempts", BARS, label)
        + _gridline("grid", BARS.top)
        + _y_label(BARS.top, _count(tallest))
        + _y_label(BARS.base, "0")
        + _time_axis(activity, BARS)
        + _plot(BARS, max(len(minutes), 1), flipped=True)
        + '<g transform="scale(1,-1)">'
        + bars
        + "</g></svg></svg>"
    )


def _lateness_y(seconds: float) -> int:
    """A lateness's row in plot units: a log scale from 5 ms at the bottom to 1 h, beyond
    which lateness sits at the top."""
    if math.isinf(seconds):
        return 0
    share = (math.log10(max(seconds, LATENESS_BOUNDS[0])) - LOG_LOW) / (LOG_HIGH - LOG_LOW)
    return round(PLOT * (1 - BOUNDED_SHARE * min(share, 1.0)))


# `quantile` answers with a bound or infinity: their rows, computed once, not per minute.
_ROWS = {bound: _lateness_y(bound) for bound in (*LATENESS_BOUNDS, math.inf)}


def _row(seconds: float | None) -> int | None:
    if seconds is None:
        return None
    return _ROWS[seconds] if seconds in _ROWS else _lateness_y(seconds)


def _runs(rows: Sequence[int | None]) -> Iterator[list[tuple[int, int]]]:
    """The runs of consecutive minutes that have a row, as (minute's index, row): a minute
    without deliveries breaks a line."""
    run: list[tuple[int, int]] = []
    for index, row in enumerate(rows):
        if row is None:
            if run:
                yield run
            run = []
        else:
            run.append((index, row))
    if run:
        yield run


def _polylines(css_class: str, rows: Sequence[int | None]) -> str:
    lines = []
    for run in _runs(rows):
        if len(run) == 1:
            # A lone minute is a dash across it: a polyline of one point draws nothing.
            index, row = run[0]
            points = f"{_decimal(index - 0.5)},{row} {_decimal(index + 0.5)},{row}"
        else:
            points = " ".join(f"{index},{row}" for index, row in run)
        # The plot stretches: a non-scaling stroke keeps the line's width the CSS's.
        lines.append(
            f'<polyline class="{css_class}" vector-effect="non-scaling-stroke" points="{points}"/>'
        )
    return "".join(lines)


def _hover(index: int, minute: Minute, p50: float | None, p99: float | None) -> str:
    title = f"{_hhmm(minute.at)} UTC · p50 {format_lateness(p50)}, p99 {format_lateness(p99)}"
    return f'<rect x="{index}" width="1" height="{PLOT}"><title>{escape(title)}</title></rect>'


def _lateness_chart(activity: Activity, total: Minute) -> str:
    minutes = activity.minutes
    p50s = [quantile(minute.lateness, 0.5) for minute in minutes]
    p99s = [quantile(minute.lateness, 0.99) for minute in minutes]
    p50, p99 = quantile(total.lateness, 0.5), quantile(total.lateness, 0.99)
    label = f"Lateness per minute, p50 and p99, {_subject(activity)}, in {_span(activity)}: " + (
        "nothing delivered"
        if p50 is None
        else f"p50 {format_lateness(p50)}, p99 {format_lateness(p99)}"
    )
    ticks = "".join(
        _gridline("grid", LATENESS.y(_ROWS[bound]))
        + _y_label(LATENESS.y(_ROWS[bound]), _duration(bound))
        for bound in LATENESS_TICKS
    )
    legend = (
        '<text x="100%" y="10" text-anchor="end">'
        '<tspan class="key-p50">— p50</tspan> <tspan class="key-p99">— p99</tspan></text>'
    )
    # Per-minute titles over the hour only: a day's would weigh more than its lines. The
    # hover areas paint nothing (fill none; pointer-events all still catches the pointer).
    hovers = ""
    if activity.window is Window.HOUR:
        hovers = (
            '<g class="hover" fill="none" pointer-events="all">'
            + "".join(
                _hover(index, minute, p50, p99)
                for index, (minute, p50, p99) in enumerate(zip(minutes, p50s, p99s, strict=True))
                if p50 is not None
            )
            + "</g>"
        )
    return (
        _open("chart-lateness", LATENESS, label)
        + legend
        + ticks
        + _time_axis(activity, LATENESS)
        + _plot(LATENESS, max(len(minutes), 1))
        # Shifted half a column: a minute's point is at its middle, at an integer x.
        + '<g fill="none" transform="translate(0.5)">'
        + _polylines("line-p99", [_row(p) for p in p99s])
        + _polylines("line-p50", [_row(p) for p in p50s])
        + "</g>"
        + hovers
        + "</svg></svg>"
    )


def _figure(name: str, text: str) -> str:
    return f'<span data-figure="{name}">{escape(text)}</span>'


def _current_to(instant: datetime | None) -> str:
    if instant is None:
        return "figures not rolled up yet"  # a new installation's, before its first round
    at = _utc(instant)
    return (
        f'figures up to <time datetime="{at.strftime("%Y-%m-%dT%H:%M:%SZ")}">'
        f"{at.strftime('%H:%M:%S')} UTC</time>"
    )


def _caption(activity: Activity, total: Minute) -> str:
    return (
        "<figcaption>"
        f"In {escape(_span(activity))}: "
        f"{_figure('delivered', str(total.delivered))} delivered, "
        f"{_figure('failed', str(total.failed))} failed, "
        f"{_figure('dead_lettered', str(total.dead_lettered))} dead-lettered; "
        f"lateness p50 {_figure('p50', format_lateness(quantile(total.lateness, 0.5)))}, "
        f"p99 {_figure('p99', format_lateness(quantile(total.lateness, 0.99)))}; "
        f"{_current_to(activity.current_to)}."
        "</figcaption>"
    )


def activity_chart(activity: Activity) -> Markup:
    """The window's charts and caption as one `<figure class="activity">`.

    CSS classes: the charts' <svg>s are `chart-attempts` and `chart-lateness`; the bars'
    segments `bar-delivered`, `bar-failed` (failures not dead-lettered) and `bar-dead`; the
    lines `line-p50` and `line-p99`, their legend's keys `key-p50` and `key-p99`; gridlines
    `grid`, the baseline and the middle tick `axis`; the lateness hover areas' group `hover`
    (painted nothing, it must stay so)."""
    total = activity.total
    return Markup(
        '<figure class="activity">'
        + _bar_chart(activity, total)
        + _lateness_chart(activity, total)
        + _caption(activity, total)
        + "</figure>"
    )
