"""Routes under /v1/dead-letters."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Body, Query, Response, status
from pydantic import AwareDatetime

from app.api import examples, pages
from app.api.deps import CallerDep, CursorQuery, DeadLettersDep, LimitQuery, OccurrenceIdPath
from app.api.filters import EventTypeQuery
from app.api.occurrence_schemas import DeadLetterOut, ReplayAccepted, Replayed, ReplayRequest
from app.api.problems import responses
from app.api.schemas import Page
from app.domain.filters import DeadLetterFilter
from app.domain.occurrence import OccurrenceStatus

router = APIRouter(prefix="/v1/dead-letters", tags=["dead-letters"])


@router.get("", responses=responses(422))
async def list_dead_letters(
    service: DeadLettersDep,
    caller: CallerDep,
    schedule_id: Annotated[
        uuid.UUID | None, Query(description="Only the dead letters of this schedule")
    ] = None,
    event_type: EventTypeQuery = None,
    subscription_id: Annotated[
        uuid.UUID | None, Query(description="Only the deliveries to this subscription")
    ] = None,
    endpoint_id: Annotated[
        uuid.UUID | None,
        Query(description="Only what went to this endpoint (its deliveries, its schedules')"),
    ] = None,
    dead_lettered_after: Annotated[
        AwareDatetime | None,
        Query(description="Only those dead-lettered after this instant (RFC 3339)"),
    ] = None,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> Page[DeadLetterOut]:
    where = DeadLetterFilter(
        tenant=caller.tenant,
        schedule_id=schedule_id,
        event_type=event_type,
        subscription_id=subscription_id,
        endpoint_id=endpoint_id,
        dead_lettered_after=dead_lettered_after,
    )
    return await pages.dead_letters(service, where, limit, cursor)


@router.post("/replay", status_code=status.HTTP_202_ACCEPTED, responses=responses(422))
async def replay_dead_letters(
    body: Annotated[ReplayRequest, Body(openapi_examples=examples.REPLAY)],
    service: DeadLettersDep,
    caller: CallerDep,
) -> Replayed:
    done = await service.replay_many(
        body.occurrence_ids,
        body.filter(),
        caller=caller,
    )
    return Replayed(replayed=done.count, occurrence_ids=done.occurrence_ids)


@router.get("/{occurrence_id}", responses=responses(404, 422))
async def get_dead_letter(
    occurrence_id: OccurrenceIdPath, service: DeadLettersDep, caller: CallerDep
) -> DeadLetterOut:
    return DeadLetterOut.of_dead_letter(await service.get(occurrence_id, caller=caller))


@router.post(
    "/{occurrence_id}/replay",
    status_code=status.HTTP_202_ACCEPTED,
    responses=responses(404, 409, 422),
)
async def replay_dead_letter(
    occurrence_id: OccurrenceIdPath, service: DeadLettersDep, caller: CallerDep
) -> ReplayAccepted:
    await service.replay(occurrence_id, caller=caller)
    return ReplayAccepted(occurrence_id=occurrence_id, status=OccurrenceStatus.PENDING)


@router.delete(
    "/{occurrence_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=responses(404, 409, 422),
)
async def discard_dead_letter(
    occurrence_id: OccurrenceIdPath, service: DeadLettersDep, caller: CallerDep
) -> Response:
    await service.discard(occurrence_id, caller=caller)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
