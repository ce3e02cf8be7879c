"""How the console shows values: instants, periods, triggers and JSON, given to its
templates as Jinja filters; every value is escaped as text."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import jinja2

from app.api.schedule_schemas import ScheduleOut
from app.domain.schedule import ScheduleStatus
from app.domain.trigger import Trigger


def when(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") + "Z"


def relative(value: datetime | None, now: datetime | None = None) -> str:
    """How far `value` is from now, in the largest whole unit: "in 3 min", "5 min ago",
    "now" within a second. Written by the server, so a page without JavaScript shows it;
    it is as of the page's loading."""
    if value is None:
        return ""
    seconds = (value - (now or datetime.now(UTC))).total_seconds()
    ahead, size = seconds > 0, abs(seconds)
    if size < 1:
        return "now"
    for unit, length in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if size >= length:
            amount = f"{int(size // length)} {unit}"
            return f"in {amount}" if ahead else f"{amount} ago"
    raise AssertionError("unreachable: size >= 1")


def shortened(text: str | None, width: int = 80) -> str:
    """`text` on one line, cut to `width` characters with an ellipsis (the page shows the
    whole of it in a title)."""
    if not text:
        return ""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def failing(schedule: ScheduleOut) -> bool:
    """Whether the page marks the schedule failing: a live (pending or paused) schedule
    whose latest occurrences were dead-lettered in a row. A failed one says so already."""
    live = schedule.status in (ScheduleStatus.PENDING, ScheduleStatus.PAUSED)
    return live and schedule.consecutive_failures > 0


def period(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


def trigger_text(trigger: Trigger) -> str:
    if trigger.type == "cron":
        return f"cron {trigger.expression} ({trigger.timezone})"
    if trigger.type == "interval":
        return f"every {period(trigger.every_seconds)}"
    if trigger.type == "once":
        return f"once at {when(trigger.at)}"
    return "immediately"


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


def environment() -> jinja2.Environment:
    """The console templates' environment, with the filters above."""
    templates = jinja2.Environment(
        loader=jinja2.PackageLoader("app.ui", "templates"),
        autoescape=True,  # every value is text: a payload's <script> shows as text
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    templates.filters["when"] = when
    templates.filters["relative"] = relative
    templates.filters["shortened"] = shortened
    templates.tests["failing"] = failing
    templates.filters["trigger_text"] = trigger_text
    templates.filters["pretty"] = pretty
    return templates
