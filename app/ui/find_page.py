"""The console's search by id: the header's box takes a schedule's or an occurrence's id and
goes to its page. An occurrence's is its schedule's page, its occurrence list starting at it;
a fan-out delivery's is its topic occurrence's (the schedule's list shows that, with its
deliveries in the API's answer). An id of another tenant's is not found, as the API's is not.
"""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.api.deps import OccurrencesDep, SchedulesDep
from app.api.pagination import encode
from app.domain.errors import NotFoundError
from app.domain.ids import format_instant
from app.ui.forms import Viewer
from app.ui.frame import PageFrame, back
from app.ui.tenancy import ViewerDep

# At most what a UUID is written in (with its hyphens, or braces and a urn: prefix).
MAX_ID = 45
_LAST = (1 << 128) - 1


def _from(fire_at: str, occurrence_id: uuid.UUID) -> str:
    """The cursor of a schedule's occurrence list (latest first) whose page starts at the
    occurrence: the key right after it in that order, which no other occurrence holds."""
    if occurrence_id.int == _LAST:
        return ""
    return "?cursor=" + encode(fire_at, str(uuid.UUID(int=occurrence_id.int + 1)))


async def find(
    request: Request,
    viewer: Viewer,
    frame: PageFrame,
    schedules: SchedulesDep,
    occurrences: OccurrencesDep,
) -> Response:
    text = request.query_params.get("id", "").strip()
    if not text:
        return back(request, viewer, "/ui/schedules")
    try:
        if len(text) > MAX_ID:
            raise ValueError(text)
        id_ = uuid.UUID(text)
    except ValueError:
        shown = f"{len(text)} characters" if len(text) > MAX_ID else repr(text)
        return await frame.refuse(
            request,
            viewer,
            422,
            f"id: {shown} is not an id (a schedule's or an occurrence's "
            "id is a UUID, like 0193a5b0-7e1c-7c3e-9f2a-5b6c7d8e9f01)",
        )
    try:
        await schedules.get(id_, caller=viewer.caller)
        return back(request, viewer, f"/ui/schedules/{id_}")
    except NotFoundError:
        pass
    try:
        found = await occurrences.get(id_, tenant=viewer.tenant)
        if found.parent_id is not None:  # a fan-out delivery: its topic occurrence
            found = await occurrences.get(found.parent_id, tenant=viewer.tenant)
    except NotFoundError:
        return await frame.refuse(
            request,
            viewer,
            404,
            f"no schedule or occurrence {id_} in tenant {viewer.tenant}",
        )
    start = _from(format_instant(found.fire_at), found.occurrence_id)
    return back(
        request, viewer, f"/ui/schedules/{found.schedule_id}{start}#o-{found.occurrence_id}"
    )


def add_find_route(routes: APIRouter, frame: PageFrame) -> None:
    """The search's route on the console's `routes`."""

    @routes.get("/find")
    async def find_by_id(
        request: Request, who: ViewerDep, schedules: SchedulesDep, occurrences: OccurrencesDep
    ) -> Response:
        return await find(request, who, frame, schedules, occurrences)
