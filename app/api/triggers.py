"""Route under /v1/triggers: when would a trigger fire."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Body

from app.api import examples
from app.api.problems import responses
from app.api.trigger_schemas import Preview, PreviewRequest
from app.domain.trigger import (
    check_cadence,
    fire_times,
    first_fire_or_refuse,
    resolve,
)

router = APIRouter(prefix="/v1/triggers", tags=["triggers"])


@router.post("/preview", responses=responses(422))
async def preview_trigger(
    body: Annotated[PreviewRequest, Body(openapi_examples=examples.PREVIEW)],
) -> Preview:
    """The next fire instants strictly after `after` (UTC), with the same rules and
    validation as a schedule's trigger. A one-shot trigger has at most one."""
    # A hundred ticks of a cron trigger are a hundred walks of the calendar: off the
    # event loop, which serves every other request meanwhile.
    return Preview(fire_times=await asyncio.to_thread(preview_fire_times, body, datetime.now(UTC)))


def preview_fire_times(body: PreviewRequest, now: datetime) -> list[datetime]:
    """The preview's fire instants (the API's and the console's create form's)."""
    after = body.after.astimezone(UTC) if body.after is not None else now
    check_cadence(body.trigger)
    first_fire_or_refuse(resolve(body.trigger, now), now)
    count = body.count if body.max_occurrences is None else min(body.count, body.max_occurrences)
    return fire_times(body.trigger, after, count, now)
