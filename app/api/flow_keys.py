"""Routes under /v1/flow-keys: a key's limits, put, read with live figures, removed; and
a destination's back-off cleared."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Response, status

from app.api import examples, pages
from app.api.deps import CallerDep, CursorQuery, FlowKeysDep, LimitQuery
from app.api.flow_key_schemas import FlowKeyIn, FlowKeyOut
from app.api.occurrence_schemas import OccurrenceOut
from app.api.problems import responses
from app.api.schemas import Page
from app.api.versions import if_match_header, versions
from app.domain.flow import FlowKey

router = APIRouter(prefix="/v1/flow-keys", tags=["flow-keys"])

KeyPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9._:-]+$",
        description="The flow key (1-128 of A-Z a-z 0-9 . _ : -), as schedules name it",
        examples=["customer-42"],
    ),
]
IfMatch = Annotated[str | None, if_match_header("the flow key")]


def _one(response: Response, found: FlowKey) -> FlowKeyOut:
    if found.version is not None:
        response.headers["ETag"] = f'"{found.version}"'
    return FlowKeyOut.of(found)


@router.get("", responses=responses(422))
async def list_flow_keys(
    service: FlowKeysDep, caller: CallerDep, limit: LimitQuery = 50, cursor: CursorQuery = None
) -> Page[FlowKeyOut]:
    """Keys in name order: those with limits and those only schedules name."""
    return await pages.flow_keys(service, caller, limit, cursor)


@router.get("/{key}", responses=responses(422))
async def get_flow_key(
    key: KeyPath, service: FlowKeysDep, caller: CallerDep, response: Response
) -> FlowKeyOut:
    """Any key: one never put answers with no limits, and its live figures."""
    return _one(response, await service.get(key, tenant=caller.tenant))


@router.get("/{key}/occurrences", responses=responses(422))
async def list_waiting_occurrences(
    key: KeyPath,
    service: FlowKeysDep,
    caller: CallerDep,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> Page[OccurrenceOut]:
    """The occurrences waiting on the key: pending (due or not, held back or not), in the
    order a fifo key starts them (fire instant, then id). Its schedules:
    `GET /v1/schedules?flow_key=`."""
    return await pages.waiting_on_key(service, caller, key, limit, cursor)


@router.put("/{key}", responses={201: {"model": FlowKeyOut}, **responses(412, 422)})
async def put_flow_key(
    key: KeyPath,
    body: Annotated[FlowKeyIn, Body(openapi_examples=examples.FLOW_KEY)],
    service: FlowKeysDep,
    caller: CallerDep,
    response: Response,
    if_match: IfMatch = None,
) -> FlowKeyOut:
    """Create or replace the key's limits: 201 when it had none."""
    found, created = await service.put(key, body.limits(), versions(if_match), tenant=caller.tenant)
    if created:
        response.status_code = status.HTTP_201_CREATED
    return _one(response, found)


@router.post("/{key}/clear-backoff", responses=responses(422))
async def clear_flow_key_backoff(
    key: KeyPath, service: FlowKeysDep, caller: CallerDep, response: Response
) -> FlowKeyOut:
    """End the back-off a destination asked for (`backoff_until`, from a 429 or 503 with
    Retry-After): what waits on the key starts as its limits allow. The limits and their
    version stay; a key with no back-off is answered as it is."""
    return _one(response, await service.clear_backoff(key, tenant=caller.tenant))


@router.delete("/{key}", status_code=status.HTTP_204_NO_CONTENT, responses=responses(404, 412, 422))
async def delete_flow_key(
    key: KeyPath, service: FlowKeysDep, caller: CallerDep, if_match: IfMatch = None
) -> None:
    """Remove the key's limits and back-off: its schedules keep the name and run unlimited."""
    await service.delete(key, versions(if_match), tenant=caller.tenant)
