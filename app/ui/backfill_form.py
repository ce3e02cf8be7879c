"""The console's backfill form of a recurring schedule: a range of its past ticks, from and
to (RFC 3339 with an offset, as the API takes them), sent as POST /v1/schedules/{id}/backfill
under If-Match of the version the page showed. Each field refused is shown beside its input
and nothing is stored; ticks that already had an occurrence are left alone, as the API's are.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError

from app.api.deps import OccurrencesDep, SchedulesDep
from app.api.problem_details import validation_message
from app.api.schedule_schemas import BackfillRequest
from app.domain.errors import ChronoqError, InvalidInputError, PreconditionFailedError
from app.ui.forms import Viewer, beside
from app.ui.frame import back, status_of
from app.ui.schedule_edit import NO_VERSION, STALE, posted_version
from app.ui.schedule_pages import SchedulePages
from app.ui.tenancy import ViewerDep

BACKFILL_FIELDS = ("from", "to")
# Longer than any instant the API reads.
_MAX_FIELD = 64


def _posted(fields: dict[str, list[str]]) -> dict[str, str]:
    return {name: (fields.get(name) or [""])[0].strip()[:_MAX_FIELD] for name in BACKFILL_FIELDS}


def _checked(posted: dict[str, str]) -> BackfillRequest:
    """The range as the API reads it; each field it refuses, by name, as `Refused`."""
    try:
        return BackfillRequest.model_validate(posted)
    except ValidationError as exc:
        refused: dict[str, str] = {}
        for error in exc.errors():
            name = str(error["loc"][0]) if error["loc"] else ""
            refused.setdefault("from" if name == "from_" else name, validation_message(error))
        raise _Refused(refused) from None


class _Refused(Exception):  # noqa: N818 (a form's answer, not an error of the service)
    def __init__(self, refused: dict[str, str]) -> None:
        super().__init__(refused)
        self.refused = refused


async def backfill(
    pages: SchedulePages,
    request: Request,
    viewer: Viewer,
    service: SchedulesDep,
    occurrence_service: OccurrencesDep,
    schedule_id: uuid.UUID,
) -> Response:
    frame = pages.frame
    fields = await frame.posted(request, viewer)
    if isinstance(fields, HTMLResponse):
        return fields
    version = posted_version(fields)
    if version is None:
        return await frame.refuse(request, viewer, 422, NO_VERSION)
    posted = _posted(fields)

    async def again(status: int, error: str, invalid: dict[str, str] | None = None) -> Response:
        return await pages.schedule(
            request,
            viewer,
            service,
            occurrence_service,
            str(schedule_id),
            status=status,
            error=error,
            backfill=posted,
            backfill_invalid=invalid or {},
        )

    try:
        wanted = _checked(posted)
        await service.backfill(
            schedule_id, wanted.from_, wanted.to, frozenset({version}), caller=viewer.caller
        )
    except PreconditionFailedError:
        return await again(409, STALE)
    except _Refused as exc:
        return await again(422, *beside(exc.refused, BACKFILL_FIELDS))
    except InvalidInputError as exc:
        named = (exc.pointer or "").removeprefix("#/").split("/")[0]
        refused: dict[str, Any] = {named if named in BACKFILL_FIELDS else "": exc.detail}
        return await again(422, *beside(refused, BACKFILL_FIELDS))
    except ChronoqError as exc:
        return await frame.refuse(request, viewer, status_of(exc), exc.detail)
    return back(request, viewer, f"/ui/schedules/{schedule_id}?done=backfilled")


def add_backfill_route(routes: APIRouter, pages: SchedulePages) -> None:
    """The backfill form's route on the console's `routes`."""

    @routes.post("/schedules/{schedule_id}/backfill")
    async def backfill_range(
        request: Request,
        who: ViewerDep,
        service: SchedulesDep,
        occurrence_service: OccurrencesDep,
        schedule_id: uuid.UUID,
    ) -> Response:
        return await backfill(pages, request, who, service, occurrence_service, schedule_id)
