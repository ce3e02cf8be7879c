"""The console's schedule pages: the filtered list (with the failing filter, the sorts and
the due view), one schedule (definition, upcoming fire times, occurrences with their
attempts and a Replay button on each dead letter, audit events), its buttons (pause,
resume, trigger, cancel) and its edit form (app/ui/schedule_edit.py).

The pages read through the very functions that answer the API's lists, so they have the
API's filters, cursors and redactions."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, Response

from app.api import occurrences as occurrence_routes
from app.api import schedules as schedule_routes
from app.api.deps import OccurrencesDep, SchedulesDep
from app.api.occurrence_schemas import AttemptOut, OccurrenceOut
from app.api.schedule_schemas import ScheduleOut
from app.domain.errors import (
    ChronoqError,
    InvalidInputError,
    NotFoundError,
    PreconditionFailedError,
)
from app.domain.filters import ScheduleSort
from app.domain.flow import check_key
from app.domain.limits import MAX_LABEL_FILTERS
from app.domain.schedule import ScheduleStatus
from app.domain.tenants import Caller
from app.domain.trigger import fire_times, is_recurring
from app.ui import schedule_edit
from app.ui.activity_pages import chart_view
from app.ui.forms import Viewer, beside
from app.ui.frame import PageFrame, back, status_of
from app.ui.query import check_label, filter_value, link

PAGE_SIZE = 50
FIRE_TIMES = 10
# One schedule's page reads each listed occurrence's attempts: fewer occurrences a page.
OCCURRENCES_PAGE = 20
ATTEMPTS_SHOWN = 20

SCHEDULE_ACTIONS = ("pause", "resume", "trigger", "cancel")
_DONE = {
    "replayed": "Replayed: the dead letter is due now.",
    "held": "Replayed: the dead letter waits until this schedule is resumed (it is paused).",
    "saved": "Saved.",
    "created": "Created.",
    "unchanged": "Nothing to save: the form changed nothing.",
    "paused": "Paused: nothing fires until it is resumed.",
    "resumed": "Resumed: it fires from its next tick.",
    "triggered": "Triggered: an extra occurrence is due now.",
    "cancelled": "Cancelled: its pending occurrences are cancelled.",
    "backfilled": (
        "Backfilled: each tick of the range that had no occurrence has one now, due at once "
        "(those that had one are left as they were)."
    ),
}


async def _attempts(
    service: OccurrencesDep, caller: Caller, occurrence: OccurrenceOut
) -> tuple[list[AttemptOut], bool]:
    """An occurrence's attempts, oldest first (at most ATTEMPTS_SHOWN), and whether there
    are more; none read for one that was never attempted."""
    tried = occurrence.attempts or occurrence.delivered_at or occurrence.dead_lettered_at
    if not tried:
        return [], False
    try:
        page = await occurrence_routes.list_attempts(
            occurrence.occurrence_id, service, caller, limit=ATTEMPTS_SHOWN, cursor=None
        )
    except NotFoundError:  # pruned since the list was read
        return [], False
    return page.items, page.next_cursor is not None


def _upcoming(schedule: ScheduleOut, now: datetime) -> list[datetime]:
    """The next fire instants of the trigger: the cadence a pending schedule keeps, bounded
    by max_occurrences. A paused one fires nothing until it is resumed (the page says so)."""
    if schedule.status is not ScheduleStatus.PENDING:
        return []
    if not is_recurring(schedule.trigger):
        return [schedule.next_fire_at] if schedule.next_fire_at is not None else []
    count = FIRE_TIMES
    if schedule.max_occurrences is not None:
        count = min(count, max(schedule.max_occurrences - schedule.fire_count, 0))
    return fire_times(schedule.trigger, now, count, now) if count else []


# The due view's windows: what is due by now (overdue), or within the next hour or day.
DUE_WINDOWS = {
    "overdue": ("overdue now", 0),
    "1h": ("within 1 hour", 3600),
    "24h": ("within 24 hours", 86400),
}


def _due_before(due: str, now: datetime) -> datetime | None:
    """The `due_before` of a due window the page names ("": none)."""
    if not due:
        return None
    if due not in DUE_WINDOWS:
        raise InvalidInputError(f"due is one of {', '.join(DUE_WINDOWS)}", parameter="due")
    return now + timedelta(seconds=DUE_WINDOWS[due][1])


def _sort(name: str, *, due: bool) -> ScheduleSort:
    """The list's order: the one named, else what fires next in a due view, else newest."""
    if not name:
        return ScheduleSort.NEXT_FIRE_AT if due else ScheduleSort.CREATED
    if name not in set(ScheduleSort):
        raise InvalidInputError(f"sort is one of {', '.join(ScheduleSort)}", parameter="sort")
    return ScheduleSort(name)


def _actions(status: ScheduleStatus) -> list[str]:
    """The buttons that would succeed for a schedule in `status`."""
    if status is ScheduleStatus.PENDING:
        return ["pause", "trigger", "cancel"]
    if status is ScheduleStatus.PAUSED:
        return ["resume", "cancel"]
    if status is ScheduleStatus.FAILED:
        return ["trigger"]
    return []


class SchedulePages:
    def __init__(self, frame: PageFrame) -> None:
        self._frame = frame

    @property
    def frame(self) -> PageFrame:
        return self._frame

    async def schedules(
        self, request: Request, viewer: Viewer, service: SchedulesDep
    ) -> HTMLResponse:
        query = request.query_params
        error: str | None = None
        items: list[ScheduleOut] = []
        next_url: str | None = None
        shown: dict[str, Any] = {
            "status": query.get("status", ""),
            "event_type": query.get("event_type", ""),
            "target_type": query.get("target_type", ""),
            "name": query.get("name", ""),
            "name_prefix": query.get("name_prefix", ""),
            "flow_key": query.get("flow_key", ""),
            "label": [v for v in query.getlist("label") if v.strip()],
            "failing": "true" if query.get("failing", "") == "true" else "",
            "due": query.get("due", ""),
            "sort": query.get("sort", ""),
        }
        try:
            status = filter_value(query, "status")
            if status is not None and status not in set(ScheduleStatus):
                raise InvalidInputError(f"no schedule status {status!r}", parameter="status")
            target_type = filter_value(query, "target_type")
            if target_type not in (None, "webhook", "rabbitmq"):
                raise InvalidInputError("target type is webhook or rabbitmq")
            labels = shown["label"]
            if len(labels) > MAX_LABEL_FILTERS:
                raise InvalidInputError(f"at most {MAX_LABEL_FILTERS} label filters")
            for label in labels:
                check_label(label)
            flow_key = filter_value(query, "flow_key")
            if flow_key is not None:
                check_key(flow_key, parameter="flow_key")
            due_before = _due_before(shown["due"], datetime.now(UTC))
            sort = _sort(shown["sort"], due=due_before is not None)
            page = await schedule_routes.list_schedules(
                service,
                viewer.caller,
                status_=ScheduleStatus(status) if status else None,
                event_type=filter_value(query, "event_type"),
                target_type=target_type,
                label=labels,
                name=filter_value(query, "name"),
                name_prefix=filter_value(query, "name_prefix"),
                failing=bool(shown["failing"]),
                due_before=due_before,
                flow_key=flow_key,
                sort=sort,
                limit=PAGE_SIZE,
                cursor=filter_value(query, "cursor"),
            )
            items = page.items
            if page.next_cursor is not None:
                next_url = link(shown, cursor=page.next_cursor)
        except InvalidInputError as exc:
            error = exc.detail
            sort = ScheduleSort.CREATED
        return await self._frame.render(
            request,
            viewer,
            "schedules.html",
            422 if error else 200,
            title="Schedules",
            filters=shown,
            statuses=[s.value for s in ScheduleStatus],
            due_windows=DUE_WINDOWS,
            items=items,
            next_url=next_url,
            paged=bool(query.get("cursor")),
            first_url=link(shown),
            sorted_by=sort.value,
            sort_urls={s.value: link(shown, sort=s.value) for s in ScheduleSort},
            error=error,
        )

    async def schedule(
        self,
        request: Request,
        viewer: Viewer,
        service: SchedulesDep,
        occurrence_service: OccurrencesDep,
        schedule_id: str,
        *,
        status: int = 200,
        form: dict[str, str] | None = None,
        error: str | None = None,
        invalid: dict[str, str] | None = None,
        backfill: dict[str, str] | None = None,
        backfill_invalid: dict[str, str] | None = None,
    ) -> HTMLResponse:
        """The schedule's page; `form` (the values posted), `error` and `invalid` (each
        field refused, with its message) when it answers a refused edit; `backfill` and
        `backfill_invalid` the same of a refused backfill."""
        frame = self._frame
        query = request.query_params
        try:
            id_ = uuid.UUID(schedule_id)
        except ValueError:
            return await frame.refuse(request, viewer, 404, f"no schedule {schedule_id!r}")
        try:
            schedule = ScheduleOut.of(await service.get(id_, caller=viewer.caller))
            occurrences = await schedule_routes.list_occurrences(
                id_,
                service,
                viewer.caller,
                status_=None,
                limit=OCCURRENCES_PAGE,
                cursor=filter_value(query, "cursor"),
            )
            events = await schedule_routes.list_events(
                id_,
                service,
                viewer.caller,
                limit=PAGE_SIZE,
                cursor=filter_value(query, "events_cursor"),
            )
            chart = await chart_view(request, viewer, schedule_id=id_)
        except NotFoundError as exc:
            return await frame.refuse(request, viewer, 404, exc.detail)
        except InvalidInputError as exc:
            return await frame.refuse(request, viewer, 422, exc.detail)
        attempts = {
            o.occurrence_id: await _attempts(occurrence_service, viewer.caller, o)
            for o in occurrences.items
        }
        links = {
            "cursor": query.get("cursor", ""),
            "events_cursor": query.get("events_cursor", ""),
            "window": query.get("window", ""),
        }
        next_url = events_url = None
        if occurrences.next_cursor is not None:
            next_url = link(links, cursor=occurrences.next_cursor)
        if events.next_cursor is not None:
            events_url = link(links, events_cursor=events.next_cursor)
        return await frame.render(
            request,
            viewer,
            "schedule.html",
            status,
            title=schedule.name or str(schedule.id),
            schedule=schedule,
            definition=schedule.model_dump(mode="json"),
            upcoming=_upcoming(schedule, datetime.now(UTC)),
            occurrences=occurrences.items,
            attempts=attempts,
            next_url=next_url,
            paged=bool(query.get("cursor")),
            events=events.items,
            events_url=events_url,
            events_paged=bool(query.get("events_cursor")),
            notice=None if error else _DONE.get(query.get("done", "")),
            actions=_actions(schedule.status),
            editable=schedule.status is not ScheduleStatus.CANCELLED,
            form=form or schedule_edit.form_of(schedule),
            error=error,
            invalid=invalid or {},
            first_invalid=next(
                (name for name in schedule_edit.EDIT_FIELDS if name in (invalid or {})), None
            ),
            recurring=is_recurring(schedule.trigger),
            backfill=backfill or {"from": "", "to": ""},
            backfill_invalid=backfill_invalid or {},
            activity=chart,
        )

    async def edit(
        self,
        request: Request,
        viewer: Viewer,
        service: SchedulesDep,
        occurrence_service: OccurrencesDep,
        schedule_id: uuid.UUID,
    ) -> Response:
        """The edit form: what it changes, as a PATCH under If-Match of the version the
        page showed."""
        frame = self._frame
        fields = await frame.posted(request, viewer)
        if isinstance(fields, HTMLResponse):
            return fields
        version = schedule_edit.posted_version(fields)
        if version is None:
            return await frame.refuse(request, viewer, 422, schedule_edit.NO_VERSION)
        form: dict[str, str] | None = None  # what was typed, once the schedule is read

        async def again(
            status: int,
            error: str,
            form: dict[str, str] | None = None,
            invalid: dict[str, str] | None = None,
        ) -> HTMLResponse:
            return await self.schedule(
                request,
                viewer,
                service,
                occurrence_service,
                str(schedule_id),
                status=status,
                form=form,
                error=error,
                invalid=invalid,
            )

        try:
            current = ScheduleOut.of(await service.get(schedule_id, caller=viewer.caller))
            if current.version != version:
                raise PreconditionFailedError("stale form")
            form = schedule_edit.posted_form(fields, current)
            changes = schedule_edit.changes_of(form, current)
            if not changes:
                return back(request, viewer, f"/ui/schedules/{schedule_id}?done=unchanged")
            patch = schedule_edit.checked(changes)
            await service.patch(schedule_id, patch, frozenset({version}), caller=viewer.caller)
        except PreconditionFailedError:
            return await again(409, schedule_edit.STALE)
        except schedule_edit.RefusedError as exc:
            error, marked = beside(exc.errors, schedule_edit.EDIT_FIELDS)
            return await again(422, error, form, marked)
        except InvalidInputError as exc:
            error, marked = beside(
                {schedule_edit.field_of(exc): exc.detail}, schedule_edit.EDIT_FIELDS
            )
            return await again(422, error, form, marked)
        except ChronoqError as exc:
            return await frame.refuse(request, viewer, status_of(exc), exc.detail)
        return back(request, viewer, f"/ui/schedules/{schedule_id}?done=saved")

    async def act(
        self,
        request: Request,
        viewer: Viewer,
        service: SchedulesDep,
        schedule_id: uuid.UUID,
        action: str,
    ) -> Response:
        fields = await self._frame.posted(request, viewer)
        if isinstance(fields, HTMLResponse):
            return fields
        calls: dict[str, tuple[Callable[..., Awaitable[object]], str]] = {
            "pause": (service.pause, "paused"),
            "resume": (service.resume, "resumed"),
            "trigger": (service.trigger, "triggered"),
            "cancel": (service.cancel, "cancelled"),
        }
        call, done = calls[action]
        try:
            # The audit event names the key that pressed the button.
            await call(schedule_id, caller=viewer.caller)
        except ChronoqError as exc:
            return await self._frame.refuse(request, viewer, status_of(exc), exc.detail)
        return back(request, viewer, f"/ui/schedules/{schedule_id}?done={done}")
