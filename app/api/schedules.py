"""Routes under /v1/schedules."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Header, Query, Response, status

from app.api import examples, pages
from app.api.deps import (
    CallerDep,
    CursorQuery,
    LimitQuery,
    ScheduleIdPath,
    SchedulesDep,
    TraceparentDep,
)
from app.api.filters import (
    DueBeforeQuery,
    EventTypeQuery,
    FailingQuery,
    FlowKeyQuery,
    LabelQuery,
    NamePrefixQuery,
    NameQuery,
    ScheduleSortQuery,
)
from app.api.occurrence_schemas import OccurrenceOut
from app.api.problems import responses
from app.api.schedule_schemas import (
    BackfillRequest,
    BackfillResult,
    BatchCreate,
    BatchCreated,
    ScheduleEventOut,
    ScheduleOut,
    batch_created_json,
)
from app.api.schemas import Page
from app.api.versions import if_match_header, versions
from app.domain.errors import InvalidInputError
from app.domain.filters import ScheduleFilter, ScheduleSort
from app.domain.limits import one_line
from app.domain.occurrence import OccurrenceStatus
from app.domain.schedule import Schedule, SchedulePatch, ScheduleSpec, ScheduleStatus

router = APIRouter(prefix="/v1/schedules", tags=["schedules"])

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=255,
        description="Repeat a create safely: the same key and body return the original. "
        "Keys are per API key: another key's use of the same one is another schedule",
    ),
    # No HTTP server passes a control character in a header; one that did could not be
    # told from the separator of a key scoped to an API key.
    one_line(),
]


IfMatch = Annotated[str | None, if_match_header("the schedule")]


def _one(response: Response, schedule: Schedule) -> ScheduleOut:
    """A response carrying one schedule: its version is its ETag."""
    response.headers["ETag"] = f'"{schedule.version}"'
    return ScheduleOut.of(schedule)


def _labels(values: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for value in values:
        key, sep, text = value.partition(":")
        if not sep or not key:
            raise InvalidInputError("label filters look like key:value", parameter="label")
        labels[key] = text
    return labels


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {"model": ScheduleOut, "description": "Replay of an earlier create"},
        **responses(409, 413, 422),
    },
)
async def create_schedule(
    spec: Annotated[ScheduleSpec, Body(openapi_examples=examples.CREATE)],
    service: SchedulesDep,
    response: Response,
    caller: CallerDep,
    traceparent: TraceparentDep,
    idempotency_key: IdempotencyKey = None,
) -> ScheduleOut:
    created = await service.create(spec, idempotency_key, caller=caller, traceparent=traceparent)
    response.headers["Location"] = f"/v1/schedules/{created.schedule.id}"
    if not created.created:
        response.status_code = status.HTTP_200_OK
    return _one(response, created.schedule)


@router.post(
    "/batch",
    status_code=status.HTTP_201_CREATED,
    response_model=BatchCreated,
    responses=responses(409, 413, 422),
)
async def create_schedules(
    body: Annotated[BatchCreate, Body(openapi_examples=examples.BATCH)],
    service: SchedulesDep,
    caller: CallerDep,
    traceparent: TraceparentDep,
) -> Response:
    created = await service.create_many(body.items, caller=caller, traceparent=traceparent)
    # Written at once: the answer FastAPI would write for BatchCreated, unvalidated.
    return Response(
        batch_created_json(created),
        status_code=status.HTTP_201_CREATED,
        media_type="application/json",
    )


@router.get("", responses=responses(422))
async def list_schedules(
    service: SchedulesDep,
    caller: CallerDep,
    status_: Annotated[
        ScheduleStatus | None, Query(alias="status", description="Only schedules in this status")
    ] = None,
    event_type: EventTypeQuery = None,
    target_type: Annotated[
        str | None,
        Query(
            pattern="^(webhook|rabbitmq)$", description="Only schedules with this kind of target"
        ),
    ] = None,
    label: LabelQuery = [],  # noqa: B006
    name: NameQuery = None,
    name_prefix: NamePrefixQuery = None,
    failing: FailingQuery = False,
    due_before: DueBeforeQuery = None,
    flow_key: FlowKeyQuery = None,
    sort: ScheduleSortQuery = ScheduleSort.CREATED,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> Page[ScheduleOut]:
    """Schedules, newest first unless `sort` says otherwise. What fires next, or is overdue:
    `sort=next_fire_at&due_before=<instant>` (with `status=pending` to leave out paused
    schedules, whose occurrences are held)."""
    where = ScheduleFilter(
        tenant=caller.tenant,
        status=status_,
        event_type=event_type,
        target_type=target_type,
        name=name,
        name_prefix=name_prefix,
        labels=_labels(label),
        failing=failing,
        due_before=due_before,
        flow_key=flow_key,
        sort=sort,
    )
    return await pages.schedules(service, where, limit, cursor)


@router.get("/{schedule_id}", responses=responses(404, 422))
async def get_schedule(
    schedule_id: ScheduleIdPath, service: SchedulesDep, caller: CallerDep, response: Response
) -> ScheduleOut:
    return _one(response, await service.get(schedule_id, caller=caller))


@router.patch("/{schedule_id}", responses=responses(404, 409, 412, 413, 422))
async def patch_schedule(
    schedule_id: ScheduleIdPath,
    patch: Annotated[SchedulePatch, Body(openapi_examples=examples.PATCH)],
    service: SchedulesDep,
    response: Response,
    caller: CallerDep,
    if_match: IfMatch = None,
) -> ScheduleOut:
    changed = await service.patch(schedule_id, patch, versions(if_match), caller=caller)
    return _one(response, changed)


@router.delete("/{schedule_id}", responses=responses(404, 412, 422))
async def cancel_schedule(
    schedule_id: ScheduleIdPath,
    service: SchedulesDep,
    response: Response,
    caller: CallerDep,
    if_match: IfMatch = None,
) -> ScheduleOut:
    return _one(response, await service.cancel(schedule_id, versions(if_match), caller=caller))


@router.post("/{schedule_id}/pause", responses=responses(404, 409, 412, 422))
async def pause_schedule(
    schedule_id: ScheduleIdPath,
    service: SchedulesDep,
    response: Response,
    caller: CallerDep,
    if_match: IfMatch = None,
) -> ScheduleOut:
    return _one(response, await service.pause(schedule_id, versions(if_match), caller=caller))


@router.post("/{schedule_id}/resume", responses=responses(404, 409, 412, 422))
async def resume_schedule(
    schedule_id: ScheduleIdPath,
    service: SchedulesDep,
    response: Response,
    caller: CallerDep,
    if_match: IfMatch = None,
) -> ScheduleOut:
    return _one(response, await service.resume(schedule_id, versions(if_match), caller=caller))


@router.post(
    "/{schedule_id}/trigger",
    status_code=status.HTTP_202_ACCEPTED,
    responses=responses(404, 409, 412, 422),
)
async def trigger_schedule(
    schedule_id: ScheduleIdPath,
    service: SchedulesDep,
    caller: CallerDep,
    if_match: IfMatch = None,
) -> OccurrenceOut:
    fired = await service.trigger(schedule_id, versions(if_match), caller=caller)
    return OccurrenceOut.of(fired)


@router.post("/{schedule_id}/backfill", responses=responses(404, 409, 412, 422))
async def backfill_schedule(
    schedule_id: ScheduleIdPath,
    body: Annotated[BackfillRequest, Body(openapi_examples=examples.BACKFILL)],
    service: SchedulesDep,
    caller: CallerDep,
    if_match: IfMatch = None,
) -> BackfillResult:
    """One occurrence per tick of the trigger in [from, to] (at most 1000 ticks, none in
    the future), each with its usual occurrence id: ticks that already have one are left
    alone (a skipped one becomes due), so calling it twice creates nothing new."""
    done = await service.backfill(
        schedule_id, body.from_, body.to, versions(if_match), caller=caller
    )
    return BackfillResult.of(done.ticks, done.created)


@router.get("/{schedule_id}/occurrences", responses=responses(404, 422))
async def list_occurrences(
    schedule_id: ScheduleIdPath,
    service: SchedulesDep,
    caller: CallerDep,
    status_: Annotated[
        OccurrenceStatus | None,
        Query(alias="status", description="Only occurrences in this status"),
    ] = None,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> Page[OccurrenceOut]:
    return await pages.occurrences(service, caller, schedule_id, limit, cursor, status_)


@router.get("/{schedule_id}/events", responses=responses(404, 422))
async def list_events(
    schedule_id: ScheduleIdPath,
    service: SchedulesDep,
    caller: CallerDep,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> Page[ScheduleEventOut]:
    """The schedule's audit events, oldest first: who changed it, to which version."""
    return await pages.events(service, caller, schedule_id, limit, cursor)
