"""Routes under /v1/occurrences: one occurrence and its attempt log."""

from __future__ import annotations

from fastapi import APIRouter

from app.api import pagination
from app.api.deps import CursorQuery, LimitQuery, OccurrenceIdPath, OccurrencesDep
from app.api.problems import responses
from app.api.schemas import AttemptOut, OccurrenceOut, Page
from app.domain.ids import format_instant

router = APIRouter(prefix="/v1/occurrences", tags=["occurrences"])


@router.get("/{occurrence_id}", responses=responses(404, 422))
async def get_occurrence(occurrence_id: OccurrenceIdPath, service: OccurrencesDep) -> OccurrenceOut:
    return OccurrenceOut.of(await service.get(occurrence_id))


@router.get("/{occurrence_id}/attempts", responses=responses(404, 422))
async def list_attempts(
    occurrence_id: OccurrenceIdPath,
    service: OccurrencesDep,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> Page[AttemptOut]:
    """Oldest first: a replay's attempts follow those of the occurrence's earlier life."""
    found = await service.attempts(
        occurrence_id, limit=limit + 1, after=pagination.decode_instant_id(cursor)
    )
    page = found[:limit]
    next_cursor = None
    if len(found) > limit:
        last = page[-1]
        assert last.id is not None
        next_cursor = pagination.encode(format_instant(last.started_at), str(last.id))
    return Page(items=[AttemptOut.of(a) for a in page], next_cursor=next_cursor)
