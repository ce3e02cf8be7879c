"""The console's schedule pages: the filtered list, one schedule (definition, upcoming
fire times, occurrences with their attempts, audit events), and its buttons (pause,
resume, trigger, cancel).

The pages read through the very functions that answer the API's lists, so they have the
API's filters, cursors and redactions."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, Response

from app.api import occurrences as occurrence_routes
from app.api import schedules as schedule_routes
from app.api.deps import OccurrencesDep, SchedulesDep
from app.api.schemas import AttemptOut, OccurrenceOut, ScheduleOut
from app.domain.errors import ChronoqError, InvalidInputError, NotFoundError
from app.domain.limits import MAX_LABEL_FILTERS
from app.domain.schedule import ScheduleStatus
from app.domain.trigger import fire_times, is_recurring
from app.ui.forms import Viewer
from app.ui.frame import PageFrame, back, status_of
from app.ui.query import check_label, filter_value, link

PAGE_SIZE = 50
FIRE_TIMES = 10
# One schedule's page reads each listed occurrence's attempts: fewer occurrences a page.
OCCURRENCES_PAGE = 20
ATTEMPTS_SHOWN = 20

SCHEDULE_ACTIONS = ("pause", "resume", "trigger", "cancel")
_DONE = {
    "paused": "Paused: nothing fires until it is resumed.",
    "resumed": "Resumed: it fires from its next tick.",
    "triggered": "Triggered: an extra occurrence is due now.",
    "cancelled": "Cancelled: its pending occurrences are cancelled.",
}


async def _attempts(
    service: OccurrencesDep, occurrence: OccurrenceOut
) -> tuple[list[AttemptOut], bool]:
    """An occurrence's attempts, oldest first (at most ATTEMPTS_SHOWN), and whether there
    are more; none read for one that was never attempted."""
    tried = occurrence.attempts or occurrence.delivered_at or occurrence.dead_lettered_at
    if not tried:
        return [], False
    try:
        page = await occurrence_routes.list_attempts(
            occurrence.occurrence_id, service, limit=ATTEMPTS_SHOWN, cursor=None
        )
    except NotFoundError:  # pruned since the list was read
        return [], False
    return page.items, page.next_cursor is not None


def _upcoming(schedule: ScheduleOut, now: datetime) -> list[datetime]:
    """The next fire instants of the trigger: the cadence a pending or paused schedule
    keeps (a paused one's resume realigns to these), bounded by max_occurrences."""
    if schedule.status not in (ScheduleStatus.PENDING, ScheduleStatus.PAUSED):
        return []
    if not is_recurring(schedule.trigger):
        return [schedule.next_fire_at] if schedule.next_fire_at is not None else []
    count = FIRE_TIMES
    if schedule.max_occurrences is not None:
        count = min(count, max(schedule.max_occurrences - schedule.fire_count, 0))
    return fire_times(schedule.trigger, now, count, now) if count else []


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
            "label": [v for v in query.getlist("label") if v.strip()],
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
            page = await schedule_routes.list_schedules(
                service,
                status_=ScheduleStatus(status) if status else None,
                event_type=filter_value(query, "event_type"),
                target_type=target_type,
                label=labels,
                name=filter_value(query, "name"),
                limit=PAGE_SIZE,
                cursor=filter_value(query, "cursor"),
            )
            items = page.items
            if page.next_cursor is not None:
                next_url = link(shown, cursor=page.next_cursor)
        except InvalidInputError as exc:
            error = exc.detail
        return await self._frame.render(
            request,
            viewer,
            "schedules.html",
            422 if error else 200,
            title="Schedules",
            filters=shown,
            statuses=[s.value for s in ScheduleStatus],
            items=items,
            next_url=next_url,
            paged=bool(query.get("cursor")),
            first_url=link(shown),
            error=error,
        )

    async def schedule(
        self,
        request: Request,
        viewer: Viewer,
        service: SchedulesDep,
        occurrence_service: OccurrencesDep,
        schedule_id: str,
    ) -> HTMLResponse:
        frame = self._frame
        query = request.query_params
        try:
            id_ = uuid.UUID(schedule_id)
        except ValueError:
            return await frame.refuse(request, viewer, 404, f"no schedule {schedule_id!r}")
        try:
            schedule = ScheduleOut.of(await service.get(id_))
            occurrences = await schedule_routes.list_occurrences(
                id_,
                service,
                status_=None,
                limit=OCCURRENCES_PAGE,
                cursor=filter_value(query, "cursor"),
            )
            events = await schedule_routes.list_events(
                id_, service, limit=PAGE_SIZE, cursor=filter_value(query, "events_cursor")
            )
        except NotFoundError as exc:
            return await frame.refuse(request, viewer, 404, exc.detail)
        except InvalidInputError as exc:
            return await frame.refuse(request, viewer, 422, exc.detail)
        attempts = {
            o.occurrence_id: await _attempts(occurrence_service, o) for o in occurrences.items
        }
        links = {"cursor": query.get("cursor", ""), "events_cursor": query.get("events_cursor", "")}
        next_url = events_url = None
        if occurrences.next_cursor is not None:
            next_url = link(links, cursor=occurrences.next_cursor)
        if events.next_cursor is not None:
            events_url = link(links, events_cursor=events.next_cursor)
        return await frame.render(
            request,
            viewer,
            "schedule.html",
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
            notice=_DONE.get(query.get("done", "")),
            actions=_actions(schedule.status),
        )

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
            await call(schedule_id, actor=viewer.name)
        except ChronoqError as exc:
            return await self._frame.refuse(request, viewer, status_of(exc), exc.detail)
        return back(request, f"/ui/schedules/{schedule_id}?done={done}")
