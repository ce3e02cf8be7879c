"""The console's flow key pages (DESIGN 11): the keys in name order with their limits and
live figures, one key with its figures, its Pause/Resume button, a Clear back-off button
while a destination's back-off holds it, and the form that edits its limits.

The pages read through the very functions that answer the API's list and key, so they have
its cursors and figures. The edit form puts the whole limits under If-Match of the version
the page showed: a stale form is refused and the page shows the key as it is now; input the
limits refuse is shown beside the form, naming the field, and nothing is stored. Pause and
Resume flip `paused` of the limits as they are when pressed (under If-Match of the version
just read), so a press never undoes another change made meanwhile.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from app.api import flow_keys as flow_key_routes
from app.api import schedules as schedule_routes
from app.api.deps import FlowKeysDep, SchedulesDep
from app.api.flow_key_schemas import FlowKeyOut
from app.api.schemas import Page
from app.domain.errors import ChronoqError, InvalidInputError, PreconditionFailedError
from app.domain.flow import KEY_ALPHABET, FlowLimits, Ordering, check_key
from app.ui.activity_pages import chart_view
from app.ui.display import period
from app.ui.forms import Viewer
from app.ui.frame import PageFrame, back, status_of
from app.ui.tenancy import ViewerDep

PAGE_SIZE = 50
# A key's page lists this many of its schedules and of what waits on it (links: the rest).
LISTED = 20
LIMIT_FIELDS = ("rate", "period_seconds", "burst", "parallelism", "ordering", "paused")
_MAX_FIELD = 32  # longer than any value the limits accept
_WHOLE = re.compile(r"[0-9]{1,12}")
_SECONDS = re.compile(r"[0-9]{1,12}(\.[0-9]{1,17})?([eE][-+]?[0-9]{1,3})?")

_DONE = {
    "paused": "Paused: nothing of the key starts until it is resumed (nothing is skipped).",
    "resumed": "Resumed: what waits on the key starts as its limits allow.",
    "saved": "Limits saved.",
    "cleared": "Back-off cleared: what waits on the key starts as its limits allow.",
}
_STALE = (
    "This key changed since the page was loaded: the form now shows its current limits. "
    "Nothing was saved; make the change again."
)
_STALE_PRESS = "This key changed while the button was pressed. Nothing was saved; try again."


def _seconds_text(value: float) -> str:
    """A period as the form shows it, exactly (the shortest text that reads back as it)."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _form_of(found: FlowKeyOut) -> dict[str, Any]:
    """The edit form's values for the key's current limits (none put: no limits)."""
    return {
        "rate": "" if found.rate is None else str(found.rate),
        "period_seconds": _seconds_text(found.period_seconds or 1.0),
        "burst": "" if found.burst is None else str(found.burst),
        "parallelism": "" if found.parallelism is None else str(found.parallelism),
        "ordering": found.ordering,
        "paused": found.paused,
    }


def _one(fields: dict[str, list[str]], name: str) -> str:
    values = fields.get(name, [])
    if len(values) > 1:
        raise InvalidInputError("is given more than once", pointer=f"#/{name}")
    return values[0].strip() if values else ""


def _whole(text: str, name: str) -> int | None:
    if not text:
        return None
    if not _WHOLE.fullmatch(text):
        raise InvalidInputError(
            "must be a positive whole number, or empty for none", pointer=f"#/{name}"
        )
    return int(text)


def _limits_of(fields: dict[str, list[str]]) -> FlowLimits:
    """The limits the form names, whole; input they refuse raises naming its field."""
    texts = {name: _one(fields, name) for name in LIMIT_FIELDS}
    period_text = texts["period_seconds"]
    seconds = 1.0
    if period_text:
        if not _SECONDS.fullmatch(period_text):
            raise InvalidInputError(
                "must be a number of seconds, or empty for 1", pointer="#/period_seconds"
            )
        seconds = float(period_text)
    ordering = texts["ordering"] or Ordering.NONE.value
    if ordering not in {o.value for o in Ordering}:
        raise InvalidInputError("is none or fifo", pointer="#/ordering")
    return FlowLimits(
        rate=_whole(texts["rate"], "rate"),
        period_seconds=seconds,
        burst=_whole(texts["burst"], "burst"),
        parallelism=_whole(texts["parallelism"], "parallelism"),
        ordering=Ordering(ordering),
        paused=bool(texts["paused"]),
    )


def _field_of(exc: InvalidInputError) -> str | None:
    pointer = exc.pointer or ""
    name = pointer.removeprefix("#/")
    return name if name in LIMIT_FIELDS else None


class FlowKeyPages:
    def __init__(self, frame: PageFrame) -> None:
        self._frame = frame

    async def flow_keys(
        self, request: Request, viewer: Viewer, service: FlowKeysDep
    ) -> HTMLResponse:
        async def read(cursor: str | None) -> Page[FlowKeyOut]:
            return await flow_key_routes.list_flow_keys(
                service, viewer.caller, limit=PAGE_SIZE, cursor=cursor
            )

        return await self._frame.listed(
            request, viewer, "flow_keys.html", "Flow keys", read, period=period
        )

    async def flow_key(
        self,
        request: Request,
        viewer: Viewer,
        service: FlowKeysDep,
        schedules: SchedulesDep,
        key: str,
        *,
        status: int = 200,
        form: dict[str, Any] | None = None,
        error: str | None = None,
        invalid: str | None = None,
    ) -> HTMLResponse:
        """The key's page; `form` (the values posted), `error` and `invalid` (the field it
        names) when it answers a refused edit."""
        frame = self._frame
        try:
            check_key(key)
        except InvalidInputError:
            return await frame.refuse(
                request, viewer, 404, f"{key!r} is not a flow key: a flow key is {KEY_ALPHABET}"
            )
        try:
            found = FlowKeyOut.of(await service.get(key, tenant=viewer.tenant))
            # What the key holds: its schedules, and what of them waits on it.
            of_key = await schedule_routes.list_schedules(
                schedules, viewer.caller, flow_key=key, limit=LISTED
            )
            waiting = await flow_key_routes.list_waiting_occurrences(
                key, service, viewer.caller, limit=LISTED
            )
            chart = await chart_view(request, viewer, flow_key=key)
        except ChronoqError as exc:
            return await frame.refuse(request, viewer, status_of(exc), exc.detail)
        return await frame.render(
            request,
            viewer,
            "flow_key.html",
            status,
            title=found.key,
            key=found,
            # A key with no limits is at version 0 for If-Match.
            version=found.version or 0,
            form=form or _form_of(found),
            error=error,
            invalid=invalid,
            notice=None if error else _DONE.get(request.query_params.get("done", "")),
            period=period,
            schedules=of_key,
            waiting=waiting,
            activity=chart,
        )

    async def press(
        self,
        request: Request,
        viewer: Viewer,
        service: FlowKeysDep,
        schedules: SchedulesDep,
        key: str,
        paused: bool,
    ) -> Response:
        """Pause or Resume: `paused` of the limits as they are now, the rest kept."""
        frame = self._frame
        fields = await frame.posted(request, viewer)
        if isinstance(fields, HTMLResponse):
            return fields
        try:
            check_key(key)
            found = await service.get(key, tenant=viewer.tenant)
            limits = found.limits if found.version is not None else None
            limits = limits or FlowLimits()
            if limits.paused != paused:
                await service.put(
                    key,
                    replace(limits, paused=paused),
                    frozenset({found.version or 0}),
                    tenant=viewer.tenant,
                )
        except PreconditionFailedError:
            return await self.flow_key(
                request, viewer, service, schedules, key, status=409, error=_STALE_PRESS
            )
        except ChronoqError as exc:
            return await frame.refuse(request, viewer, status_of(exc), exc.detail)
        return back(
            request, viewer, f"/ui/flow-keys/{key}?done={'paused' if paused else 'resumed'}"
        )

    async def clear_backoff(
        self, request: Request, viewer: Viewer, service: FlowKeysDep, key: str
    ) -> Response:
        """Clear back-off: the destination's back-off ends; the limits stay as they are."""
        frame = self._frame
        fields = await frame.posted(request, viewer)
        if isinstance(fields, HTMLResponse):
            return fields
        try:
            check_key(key)
            await service.clear_backoff(key, tenant=viewer.tenant)
        except ChronoqError as exc:
            return await frame.refuse(request, viewer, status_of(exc), exc.detail)
        return back(request, viewer, f"/ui/flow-keys/{key}?done=cleared")

    async def edit(
        self,
        request: Request,
        viewer: Viewer,
        service: FlowKeysDep,
        schedules: SchedulesDep,
        key: str,
    ) -> Response:
        """The edit form: the whole limits, put under If-Match of the version it showed."""
        frame = self._frame
        fields = await frame.posted(request, viewer)
        if isinstance(fields, HTMLResponse):
            return fields
        versions = fields.get("version", [])
        if len(versions) != 1 or not _WHOLE.fullmatch(versions[0]):
            return await frame.refuse(
                request, viewer, 422, "The form names no version of the key: reload the page."
            )
        try:
            check_key(key)
        except InvalidInputError as exc:
            return await frame.refuse(request, viewer, 404, exc.detail)
        # What was typed, shown again beside the refusal.
        posted: dict[str, Any] = {name: (fields.get(name) or [""])[0] for name in LIMIT_FIELDS}
        posted["paused"] = bool(posted["paused"])
        try:
            limits = _limits_of(fields)
        except InvalidInputError as exc:
            field = _field_of(exc)
            message = f"{field}: {exc.detail}" if field else exc.detail
            return await self.flow_key(
                request,
                viewer,
                service,
                schedules,
                key,
                status=422,
                form=posted,
                error=message,
                invalid=field,
            )
        try:
            await service.put(key, limits, frozenset({int(versions[0])}), tenant=viewer.tenant)
        except PreconditionFailedError:
            return await self.flow_key(
                request, viewer, service, schedules, key, status=409, error=_STALE
            )
        except ChronoqError as exc:
            return await frame.refuse(request, viewer, status_of(exc), exc.detail)
        return back(request, viewer, f"/ui/flow-keys/{key}?done=saved")


def add_flow_key_routes(routes: APIRouter, pages: FlowKeyPages) -> None:
    """The flow key pages' routes on the console's `routes`."""

    @routes.get("/flow-keys", response_class=HTMLResponse)
    async def flow_keys(request: Request, who: ViewerDep, service: FlowKeysDep) -> HTMLResponse:
        return await pages.flow_keys(request, who, service)

    @routes.get("/flow-keys/{key}", response_class=HTMLResponse)
    async def flow_key(
        request: Request, who: ViewerDep, service: FlowKeysDep, schedules: SchedulesDep, key: str
    ) -> HTMLResponse:
        return await pages.flow_key(request, who, service, schedules, key)

    @routes.post("/flow-keys/{key}/pause")
    async def pause(
        request: Request, who: ViewerDep, service: FlowKeysDep, schedules: SchedulesDep, key: str
    ) -> Response:
        return await pages.press(request, who, service, schedules, key, paused=True)

    @routes.post("/flow-keys/{key}/resume")
    async def resume(
        request: Request, who: ViewerDep, service: FlowKeysDep, schedules: SchedulesDep, key: str
    ) -> Response:
        return await pages.press(request, who, service, schedules, key, paused=False)

    @routes.post("/flow-keys/{key}/clear-backoff")
    async def clear_backoff(
        request: Request, who: ViewerDep, service: FlowKeysDep, key: str
    ) -> Response:
        return await pages.clear_backoff(request, who, service, key)

    @routes.post("/flow-keys/{key}/limits")
    async def edit(
        request: Request, who: ViewerDep, service: FlowKeysDep, schedules: SchedulesDep, key: str
    ) -> Response:
        return await pages.edit(request, who, service, schedules, key)
