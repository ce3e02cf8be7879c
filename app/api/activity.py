"""Route /v1/activity: deliveries, failures, dead letters and lateness minute by minute,
of the fleet or of one tenant, schedule, flow key or endpoint."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from app.api.activity_schemas import ActivityOut
from app.api.deps import ActivityDep, CallerDep
from app.api.problems import responses
from app.domain.activity import Window
from app.domain.errors import InvalidInputError

router = APIRouter(prefix="/v1/activity", tags=["activity"])

SUBJECTS = ("tenant", "schedule_id", "flow_key", "endpoint_id")


@router.get("", responses=responses(403, 404, 422))
async def get_activity(
    service: ActivityDep,
    caller: CallerDep,
    window: Annotated[
        Window, Query(description="The span: the last hour or the last day")
    ] = Window.HOUR,
    tenant: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=63,
            pattern=r"^[a-z0-9][a-z0-9_-]*$",
            description="One tenant's (a tenant's own key: its own only)",
        ),
    ] = None,
    schedule_id: Annotated[
        uuid.UUID | None, Query(description="One schedule's, read from its attempt log")
    ] = None,
    flow_key: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=128,
            pattern=r"^[A-Za-z0-9._:-]+$",
            description="One flow key's (its occurrences', of every schedule naming it)",
        ),
    ] = None,
    endpoint_id: Annotated[
        uuid.UUID | None, Query(description="One endpoint's (its attempts')")
    ] = None,
) -> ActivityOut:
    """What happened over the window, minute by minute: of at most one of tenant,
    schedule_id, flow_key and endpoint_id, or with none of them the fleet's."""
    given = {
        name: value
        for name, value in zip(SUBJECTS, (tenant, schedule_id, flow_key, endpoint_id), strict=True)
        if value is not None
    }
    if len(given) > 1:
        second = list(given)[1]
        raise InvalidInputError(
            f"name at most one of {', '.join(SUBJECTS)}; {', '.join(given)} given",
            parameter=second,
        )
    found = await service.read(
        caller,
        window,
        tenant=tenant,
        schedule_id=schedule_id,
        flow_key=flow_key,
        endpoint_id=endpoint_id,
    )
    return ActivityOut.of(found)
