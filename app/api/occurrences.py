"""Routes under /v1/occurrences: one occurrence and its attempt log."""

from __future__ import annotations

from fastapi import APIRouter

from app.api import pages
from app.api.deps import CallerDep, CursorQuery, LimitQuery, OccurrenceIdPath, OccurrencesDep
from app.api.occurrence_schemas import AttemptOut, OccurrenceOut
from app.api.problems import responses
from app.api.schemas import Page

router = APIRouter(prefix="/v1/occurrences", tags=["occurrences"])


@router.get("/{occurrence_id}", responses=responses(404, 422))
async def get_occurrence(
    occurrence_id: OccurrenceIdPath, service: OccurrencesDep, caller: CallerDep
) -> OccurrenceOut:
    return OccurrenceOut.of(await service.get(occurrence_id, tenant=caller.tenant))


@router.get("/{occurrence_id}/attempts", responses=responses(404, 422))
async def list_attempts(
    occurrence_id: OccurrenceIdPath,
    service: OccurrencesDep,
    caller: CallerDep,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> Page[AttemptOut]:
    """Oldest first: a replay's attempts follow those of the occurrence's earlier life."""
    return await pages.attempts(service, caller, occurrence_id, limit, cursor)
