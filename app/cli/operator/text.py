"""How the operator commands show the HTTP API's shapes as text: aligned tables and
field lists, one line per cell, instants in UTC.

What a receiver answered, what a client stored and what a service says in a refusal reach
the operator's terminal only through `printable`: a control character (an escape sequence
that clears the screen, sets the title or writes the clipboard; a line feed that forges a
line) is written as a `\\uXXXX` escape, as the logs write it. Tables and field lists make
each cell printable; a command's whole text (`terminal`) and its one-line errors go through
it once more as they are printed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

from app.api.occurrence_schemas import AttemptOut, DeadLetterOut, OccurrenceOut
from app.api.schedule_schemas import ScheduleEventOut, ScheduleOut
from app.api.target_schemas import AnyTargetOut, EndpointTargetOut, TopicTargetOut, WebhookTargetOut
from app.domain.schedule import EventKind, ScheduleStatus
from app.domain.trigger import CronTrigger, IntervalTrigger, OnceTrigger, Trigger
from app.telemetry.logs import escape_controls

PAYLOAD_PREVIEW = 200
CELL_WIDTH = 40  # longer table cells are cut, with an ellipsis


def printable(text: str) -> str:
    """`text` safe for a terminal, on one line: its control characters escaped."""
    return escape_controls(text)


def terminal(text: str) -> str:
    """A command's text output, its own lines kept, every other control character escaped."""
    return "\n".join(printable(line) for line in text.split("\n"))


def when(instant: datetime | None) -> str:
    return "-" if instant is None else instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def one_line(text: str | None, width: int | None = CELL_WIDTH) -> str:
    if not text:
        return "-"
    flat = printable(" ".join(text.split()))
    if width is not None and len(flat) > width:
        return flat[: width - 1] + "…"
    return flat


def trigger_text(trigger: Trigger) -> str:
    if isinstance(trigger, CronTrigger):
        return f"cron {trigger.expression} ({trigger.timezone})"
    if isinstance(trigger, IntervalTrigger):
        return f"every {trigger.every_seconds:g}s"
    if isinstance(trigger, OnceTrigger):
        return f"once at {when(trigger.at)}"
    return "immediate"


def target_text(target: AnyTargetOut) -> str:
    # The response model's target: its secrets are redacted already.
    if isinstance(target, WebhookTargetOut):
        return f"{target.method} {target.url}"
    if isinstance(target, EndpointTargetOut):
        return f"endpoint {target.endpoint_id}"
    if isinstance(target, TopicTargetOut):
        return f"topic {target.topic}"
    return f"rabbitmq {target.exchange or '(default)'} {target.routing_key or '-'}"


def labels_text(labels: dict[str, str]) -> str:
    return ",".join(f"{key}:{value}" for key, value in sorted(labels.items())) or "-"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns aligned on the widest cell, two spaces apart, a header row first."""
    rows = [[printable(cell) for cell in cells] for cells in rows]
    widths = [max(len(cells[i]) for cells in [headers, *rows]) for i in range(len(headers))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()
        for cells in [headers, *rows]
    ]
    return "\n".join(lines)


def fields(pairs: Sequence[tuple[str, str]]) -> str:
    width = max(len(key) for key, _ in pairs)
    return "\n".join(f"{key.ljust(width)}  {printable(value)}" for key, value in pairs)


def more(shown: int, noun: str) -> str:
    return f"\n\n(the first {shown} {noun}; more match: raise --limit or narrow the filters)"


SCHEDULE_COLUMNS = (
    "ID",
    "STATUS",
    "NAME",
    "EVENT TYPE",
    "TRIGGER",
    "TARGET",
    "NEXT FIRE AT",
    "FIRED",
    "FAILURES",
    "LAST ERROR",
    "LABELS",
)


def schedule_row(s: ScheduleOut) -> list[str]:
    return [
        str(s.id),
        s.status,
        one_line(s.name),
        one_line(s.event_type),
        one_line(trigger_text(s.trigger)),
        one_line(target_text(s.target)),
        when(s.next_fire_at),
        str(s.fire_count),
        str(s.consecutive_failures),
        one_line(s.last_error),
        one_line(labels_text(s.labels), width=None),
    ]


PAUSES = frozenset({EventKind.PAUSED, EventKind.AUTO_PAUSED})


def pause_text(s: ScheduleOut, event: ScheduleEventOut | None) -> str:
    """Why a paused schedule is paused: by itself after failures in a row, or by whom and
    when, from its latest pause event (without it, from its `pause_reason`)."""
    at = "" if event is None else f" at {when(event.at)}"
    if s.pause_reason == "failures" or (event is not None and event.kind == EventKind.AUTO_PAUSED):
        after = (
            "failures in a row"
            if s.pause_after_failures is None
            else f"{s.pause_after_failures} occurrence(s) dead-lettered in a row"
        )
        return f"by itself{at}, after {after} (pause_after_failures); resume to fire again"
    if event is None:
        return "by an operator (API or CLI)"
    return f"by {event.actor or 'a caller without an API key'}{at}"


def snapshot(s: ScheduleOut, paused_by: ScheduleEventOut | None = None) -> str:
    """The schedule's fields; a paused one's with why (`paused_by`: its latest pause
    event)."""
    payload = json.dumps(s.payload, separators=(",", ":"), ensure_ascii=False)
    paused = [("paused", pause_text(s, paused_by))] if s.status == ScheduleStatus.PAUSED else []
    return fields(
        [
            ("id", str(s.id)),
            ("name", s.name or "-"),
            ("status", s.status),
            *paused,
            ("event type", s.event_type),
            ("trigger", trigger_text(s.trigger)),
            ("target", target_text(s.target)),
            ("on failure", target_text(s.on_failure) if s.on_failure else "-"),
            ("labels", labels_text(s.labels)),
            ("max attempts", str(s.max_attempts)),
            ("next fire at", when(s.next_fire_at)),
            ("next occurrence", str(s.next_occurrence_id or "-")),
            ("fired", f"{s.fire_count} (last at {when(s.last_fired_at)})"),
            ("attempts", str(s.attempts)),
            ("last error", one_line(s.last_error, width=None)),
            ("failures", f"{s.consecutive_failures} in a row"),
            ("skipped", f"{s.skipped_count} (last reason: {s.last_skip_reason or '-'})"),
            ("created at", when(s.created_at)),
            ("updated at", when(s.updated_at)),
            ("payload", one_line(payload, width=PAYLOAD_PREVIEW)),
        ]
    )


def occurrence_table(occurrences: Sequence[OccurrenceOut]) -> str:
    headers = (
        "OCCURRENCE ID",
        "FIRE AT",
        "STATUS",
        "ORIGIN",
        "ATTEMPTS",
        "AVAILABLE AT",
        "DELIVERED AT",
        "LAST ERROR",
    )
    rows = [
        [
            str(o.occurrence_id),
            when(o.fire_at),
            o.status if o.skip_reason is None else f"{o.status} ({o.skip_reason})",
            o.origin,
            str(o.attempts),
            when(o.available_at),
            when(o.delivered_at),
            one_line(o.last_error, width=60),
        ]
        for o in occurrences
    ]
    return table(headers, rows)


def dead_letter_table(dead_letters: Sequence[DeadLetterOut]) -> str:
    headers = (
        "OCCURRENCE ID",
        "SCHEDULE ID",
        "SCHEDULE NAME",
        "EVENT TYPE",
        "FIRE AT",
        "DEAD-LETTERED AT",
        "ATTEMPTS",
        "LAST ERROR",
    )
    rows = [
        [
            str(d.occurrence_id),
            str(d.schedule_id),
            one_line(d.schedule_name),
            one_line(d.event_type),
            when(d.fire_at),
            when(d.dead_lettered_at),
            str(d.attempts),
            one_line(d.last_error, width=60),
        ]
        for d in dead_letters
    ]
    return table(headers, rows)


def event_table(events: Sequence[ScheduleEventOut]) -> str:
    headers = ("AT", "KIND", "VERSION", "ACTOR", "FIELDS")
    rows = [
        [
            when(e.at),
            e.kind,
            str(e.version),
            e.actor or "-",
            ", ".join(e.fields) if e.fields else "-",
        ]
        for e in events
    ]
    return table(headers, rows)


def attempt_table(attempts: Sequence[AttemptOut]) -> str:
    headers = ("ATTEMPT", "STARTED AT", "DURATION", "OUTCOME", "STATUS", "ERROR", "REPLICA")
    rows = [
        [
            str(a.attempt),
            when(a.started_at),
            f"{a.duration_ms} ms",
            a.outcome,
            "-" if a.status_code is None else str(a.status_code),
            one_line(a.error, width=60),
            a.replica or "-",
        ]
        for a in attempts
    ]
    return table(headers, rows)
