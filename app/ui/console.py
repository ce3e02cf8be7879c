"""Routes under /ui: the operator console's pages, and the forms they post (DESIGN 10).

Every page reads through the services and the very functions that answer the API's lists,
so a page has the API's filters, cursors and redactions, and its cost. Every change is a
POST form answered by a redirect back (post, redirect, get), guarded by a token bound to the
key that loaded the form and by an Origin/Referer check (`app.ui.forms`). Nothing here is in
the OpenAPI document: the console is not part of the API.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from importlib.resources import files
from typing import Annotated, Any
from urllib.parse import parse_qs, urlencode

import jinja2
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from app.api import dead_letters as dead_letter_routes
from app.api import occurrences as occurrence_routes
from app.api import schedules as schedule_routes
from app.api.deps import DeadLettersDep, OccurrencesDep, SchedulesDep, StateDep
from app.api.schemas import AttemptOut, OccurrenceOut, ScheduleOut
from app.domain.errors import ChronoqError, ConflictError, InvalidInputError, NotFoundError
from app.domain.filters import DeadLetterFilter
from app.domain.limits import MAX_LABEL_FILTERS, MAX_LABEL_KEY, MAX_LABEL_VALUE, check_text
from app.domain.schedule import ScheduleStatus
from app.domain.trigger import Trigger, fire_times, is_recurring
from app.ui.forms import FormGuard, Viewer, same_origin
from app.ui.live import LiveNumbers

PAGE_SIZE = 50
FIRE_TIMES = 10
# One schedule's page reads each listed occurrence's attempts: fewer occurrences a page.
OCCURRENCES_PAGE = 20
ATTEMPTS_SHOWN = 20
MAX_FILTER_LENGTH = 200
FORM_TYPE = "application/x-www-form-urlencoded"
_NO_FILTER = DeadLetterFilter()  # replays by the ids selected, never by a filter

# Pages are this service's own: no other site frames them (clickjacking) or receives their
# addresses, and they load nothing from elsewhere.
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}

SCHEDULE_ACTIONS = ("pause", "resume", "trigger", "cancel")
_DONE = {
    "paused": "Paused: nothing fires until it is resumed.",
    "resumed": "Resumed: it fires from its next tick.",
    "triggered": "Triggered: an extra occurrence is due now.",
    "cancelled": "Cancelled: its pending occurrences are cancelled.",
}


def _when(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") + "Z"


def _period(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


def _trigger_text(trigger: Trigger) -> str:
    if trigger.type == "cron":
        return f"cron {trigger.expression} ({trigger.timezone})"
    if trigger.type == "interval":
        return f"every {_period(trigger.every_seconds)}"
    if trigger.type == "once":
        return f"once at {_when(trigger.at)}"
    return "immediately"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("app.ui", "templates"),
        autoescape=True,  # every value is text: a payload's <script> shows as text
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["when"] = _when
    environment.filters["trigger_text"] = _trigger_text
    environment.filters["pretty"] = _pretty
    return environment


def static_files() -> StaticFiles:
    """The console's stylesheet and script, served by the service itself."""
    return StaticFiles(directory=str(files("app.ui") / "static"))


def _one(query: Mapping[str, str], name: str) -> str | None:
    """A filter's value: None when the form left it empty."""
    value = query.get(name, "").strip()
    if not value:
        return None
    if len(value) > MAX_FILTER_LENGTH:
        raise InvalidInputError(f"{name} is longer than {MAX_FILTER_LENGTH} characters")
    try:
        check_text(value, name)
    except ValueError as exc:
        raise InvalidInputError(str(exc), parameter=name) from None
    return value


def _uuid(value: str | None, what: str) -> uuid.UUID | None:
    if value is None:
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidInputError(f"{what} is not a UUID", parameter=what) from None


def _status_of(exc: ChronoqError) -> int:
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, ConflictError):
        return 409
    if isinstance(exc, InvalidInputError):
        return 422
    return 400


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


class Console:
    """The console's pages for one app: its templates, form guard and live numbers."""

    def __init__(self, guard: FormGuard | None = None, live: LiveNumbers | None = None) -> None:
        self.templates = Jinja2Templates(env=_environment())
        self.guard = guard or FormGuard()
        self.live = live or LiveNumbers()

    # -- rendering -------------------------------------------------------------------

    async def render(
        self,
        request: Request,
        viewer: Viewer,
        template: str,
        status: int = 200,
        **context: Any,
    ) -> HTMLResponse:
        context.setdefault("notice", None)
        context.update(
            viewer=viewer,
            token=self.guard.issue(viewer) if viewer.can_write else None,
            live=await self.live.read(),
            base=request.scope.get("root_path", ""),
        )
        response = self.templates.TemplateResponse(request, template, context, status_code=status)
        response.headers.update(_HEADERS)
        return response

    async def refuse(
        self, request: Request, viewer: Viewer, status: int, detail: str
    ) -> HTMLResponse:
        return await self.render(
            request, viewer, "refused.html", status, title="Refused", detail=detail
        )

    async def posted(self, request: Request, viewer: Viewer) -> dict[str, list[str]] | HTMLResponse:
        """The form's fields, or the page refusing it: a read key, another site's page, a
        missing or stale token."""
        if not viewer.can_write:
            return await self.refuse(request, viewer, 403, "This API key is read-only.")
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        fields: dict[str, list[str]] = {}
        # Only the console's own encoding is read: a body of any other type carries no token.
        if content_type == FORM_TYPE:
            fields = parse_qs((await request.body()).decode("utf-8", "replace"))
        tokens = fields.get("token", [])
        token = tokens[0] if len(tokens) == 1 else None
        if not same_origin(request.headers) or not self.guard.accepts(viewer, token):
            return await self.refuse(
                request,
                viewer,
                403,
                "This form did not come from this console, or it has expired: reload the page "
                "and try again.",
            )
        return fields

    # -- pages -----------------------------------------------------------------------

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
            status = _one(query, "status")
            if status is not None and status not in set(ScheduleStatus):
                raise InvalidInputError(f"no schedule status {status!r}", parameter="status")
            target_type = _one(query, "target_type")
            if target_type not in (None, "webhook", "rabbitmq"):
                raise InvalidInputError("target type is webhook or rabbitmq")
            labels = shown["label"]
            if len(labels) > MAX_LABEL_FILTERS:
                raise InvalidInputError(f"at most {MAX_LABEL_FILTERS} label filters")
            for label in labels:
                _check_label(label)
            page = await schedule_routes.list_schedules(
                service,
                status_=ScheduleStatus(status) if status else None,
                event_type=_one(query, "event_type"),
                target_type=target_type,
                label=labels,
                name=_one(query, "name"),
                limit=PAGE_SIZE,
                cursor=_one(query, "cursor"),
            )
            items = page.items
            if page.next_cursor is not None:
                next_url = _query(shown, cursor=page.next_cursor)
        except InvalidInputError as exc:
            error = exc.detail
        return await self.render(
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
            first_url=_query(shown),
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
        query = request.query_params
        try:
            id_ = uuid.UUID(schedule_id)
        except ValueError:
            return await self.refuse(request, viewer, 404, f"no schedule {schedule_id!r}")
        try:
            schedule = ScheduleOut.of(await service.get(id_))
            occurrences = await schedule_routes.list_occurrences(
                id_, service, status_=None, limit=OCCURRENCES_PAGE, cursor=_one(query, "cursor")
            )
            events = await schedule_routes.list_events(
                id_, service, limit=PAGE_SIZE, cursor=_one(query, "events_cursor")
            )
        except NotFoundError as exc:
            return await self.refuse(request, viewer, 404, exc.detail)
        except InvalidInputError as exc:
            return await self.refuse(request, viewer, 422, exc.detail)
        attempts = {
            o.occurrence_id: await _attempts(occurrence_service, o) for o in occurrences.items
        }
        links = {"cursor": query.get("cursor", ""), "events_cursor": query.get("events_cursor", "")}
        next_url = events_url = None
        if occurrences.next_cursor is not None:
            next_url = _query(links, cursor=occurrences.next_cursor)
        if events.next_cursor is not None:
            events_url = _query(links, events_cursor=events.next_cursor)
        return await self.render(
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
        fields = await self.posted(request, viewer)
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
            return await self.refuse(request, viewer, _status_of(exc), exc.detail)
        return _back(request, f"/ui/schedules/{schedule_id}?done={done}")

    async def dead_letters(
        self, request: Request, viewer: Viewer, service: DeadLettersDep
    ) -> HTMLResponse:
        query = request.query_params
        shown = {
            "schedule_id": query.get("schedule_id", ""),
            "event_type": query.get("event_type", ""),
        }
        error: str | None = None
        items: list[Any] = []
        next_url: str | None = None
        try:
            page = await dead_letter_routes.list_dead_letters(
                service,
                schedule_id=_uuid(_one(query, "schedule_id"), "schedule_id"),
                event_type=_one(query, "event_type"),
                limit=PAGE_SIZE,
                cursor=_one(query, "cursor"),
            )
            items = page.items
            if page.next_cursor is not None:
                next_url = _query(shown, cursor=page.next_cursor)
        except InvalidInputError as exc:
            error = exc.detail
        notice = None
        done, count = query.get("done", ""), query.get("n", "")
        if done in ("replayed", "discarded") and count.isdigit() and len(count) < 6:
            noun = "dead letter" if count == "1" else "dead letters"
            notice = f"{count} {noun} {done}" + (": due now." if done == "replayed" else ".")
        return await self.render(
            request,
            viewer,
            "dead_letters.html",
            422 if error else 200,
            title="Dead letters",
            filters=shown,
            items=items,
            next_url=next_url,
            paged=bool(query.get("cursor")),
            first_url=_query(shown),
            error=error,
            notice=notice,
        )

    async def settle_dead_letters(
        self,
        request: Request,
        viewer: Viewer,
        service: DeadLettersDep,
        action: str,
        one: uuid.UUID | None = None,
    ) -> Response:
        fields = await self.posted(request, viewer)
        if isinstance(fields, HTMLResponse):
            return fields
        if one is not None:
            ids = [one]
        else:
            try:
                ids = [uuid.UUID(value) for value in fields.get("occurrence_id", [])]
            except ValueError:
                return await self.refuse(request, viewer, 422, "An occurrence id is not a UUID.")
        if not ids:
            return await self.refuse(request, viewer, 422, "Select at least one dead letter.")
        try:
            if action == "replay":
                done = len(await service.replay_many(ids, _NO_FILTER, actor=viewer.name))
            else:
                for id_ in ids:
                    await service.discard(id_, actor=viewer.name)
                done = len(ids)
        except ChronoqError as exc:
            return await self.refuse(request, viewer, _status_of(exc), exc.detail)
        back = {
            key: value
            for key in ("schedule_id", "event_type")
            if (value := (fields.get(key) or [""])[0])
        }
        verb = "replayed" if action == "replay" else "discarded"
        return _back(request, "/ui/dead-letters?" + urlencode({**back, "done": verb, "n": done}))


def _check_label(label: str) -> None:
    """A label filter's text; the API's own parser reads its key:value."""
    if len(label) > MAX_LABEL_KEY + 1 + MAX_LABEL_VALUE:
        raise InvalidInputError("a label filter is a key (63) : value (255) at most")
    try:
        check_text(label, "label")
    except ValueError as exc:
        raise InvalidInputError(str(exc), parameter="label") from None


def _query(filters: Mapping[str, Any], **extra: str) -> str:
    pairs: list[tuple[str, str]] = []
    for key, value in {**filters, **extra}.items():
        values: Sequence[str] = value if isinstance(value, list) else [value]
        pairs.extend((key, v) for v in values if v)
    return "?" + urlencode(pairs)


def _actions(status: ScheduleStatus) -> list[str]:
    """The buttons that would succeed for a schedule in `status`."""
    if status is ScheduleStatus.PENDING:
        return ["pause", "trigger", "cancel"]
    if status is ScheduleStatus.PAUSED:
        return ["resume", "cancel"]
    if status is ScheduleStatus.FAILED:
        return ["trigger"]
    return []


def _back(request: Request, path: str) -> RedirectResponse:
    return RedirectResponse(request.scope.get("root_path", "") + path, status_code=303)


def _viewer(request: Request, state: StateDep) -> Viewer:
    return Viewer.of(request, state["keys"])


ViewerDep = Annotated[Viewer, Depends(_viewer)]


def router(console: Console | None = None) -> APIRouter:
    """The console's routes, none of them in the OpenAPI document."""
    pages = console or Console()
    routes = APIRouter(prefix="/ui", include_in_schema=False)

    @routes.get("", response_class=HTMLResponse)
    @routes.get("/schedules", response_class=HTMLResponse)
    async def schedules(request: Request, who: ViewerDep, service: SchedulesDep) -> HTMLResponse:
        return await pages.schedules(request, who, service)

    @routes.get("/schedules/{schedule_id}", response_class=HTMLResponse)
    async def schedule(
        request: Request,
        who: ViewerDep,
        service: SchedulesDep,
        occurrence_service: OccurrencesDep,
        schedule_id: str,
    ) -> HTMLResponse:
        return await pages.schedule(request, who, service, occurrence_service, schedule_id)

    for action in SCHEDULE_ACTIONS:

        def act(action: str = action) -> Callable[..., Awaitable[Response]]:
            async def handle(
                request: Request, who: ViewerDep, service: SchedulesDep, schedule_id: uuid.UUID
            ) -> Response:
                return await pages.act(request, who, service, schedule_id, action)

            return handle

        routes.add_api_route(
            f"/schedules/{{schedule_id}}/{action}",
            act(),
            methods=["POST"],
            name=f"console_{action}",
        )

    @routes.get("/live", response_class=HTMLResponse)
    async def live(request: Request, who: ViewerDep) -> HTMLResponse:
        """The header's numbers alone, for the pages' script to refresh them in place."""
        return await pages.render(request, who, "_live.html")

    @routes.get("/dead-letters", response_class=HTMLResponse)
    async def dead_letters(
        request: Request, who: ViewerDep, service: DeadLettersDep
    ) -> HTMLResponse:
        return await pages.dead_letters(request, who, service)

    @routes.post("/dead-letters/replay")
    async def replay_selected(
        request: Request, who: ViewerDep, service: DeadLettersDep
    ) -> Response:
        return await pages.settle_dead_letters(request, who, service, "replay")

    @routes.post("/dead-letters/discard")
    async def discard_selected(
        request: Request, who: ViewerDep, service: DeadLettersDep
    ) -> Response:
        return await pages.settle_dead_letters(request, who, service, "discard")

    @routes.post("/dead-letters/{occurrence_id}/replay")
    async def replay_one(
        request: Request, who: ViewerDep, service: DeadLettersDep, occurrence_id: uuid.UUID
    ) -> Response:
        return await pages.settle_dead_letters(request, who, service, "replay", occurrence_id)

    @routes.post("/dead-letters/{occurrence_id}/discard")
    async def discard_one(
        request: Request, who: ViewerDep, service: DeadLettersDep, occurrence_id: uuid.UUID
    ) -> Response:
        return await pages.settle_dead_letters(request, who, service, "discard", occurrence_id)

    return routes
