"""Routes under /v1/endpoints: a tenant's reusable webhook destinations made, read,
listed, changed and removed; their signing secrets rotated, their circuit enabled, and
their events read (DESIGN section 15)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Body, Path, Response, status

from app.api import examples, pages
from app.api.deps import CallerDep, CursorQuery, EndpointsDep, LimitQuery
from app.api.endpoint_schemas import (
    EndpointAttemptOut,
    EndpointEventOut,
    EndpointIn,
    EndpointOut,
    EndpointPatch,
    RotateIn,
)
from app.api.problems import responses
from app.api.schemas import Page
from app.api.versions import if_match_header, versions
from app.domain.endpoints import Endpoint

router = APIRouter(prefix="/v1/endpoints", tags=["endpoints"])

EndpointIdPath = Annotated[uuid.UUID, Path(description="The endpoint's id")]
IfMatch = Annotated[str | None, if_match_header("the endpoint")]


def _one(
    response: Response, found: Endpoint, shown: dict[uuid.UUID, str] | None = None
) -> EndpointOut:
    response.headers["ETag"] = f'"{found.version}"'
    return EndpointOut.of(found, shown)


def _newest(found: Endpoint, secret: str) -> dict[uuid.UUID, str]:
    """The secret just made, by its id: the newest of the endpoint's."""
    return {found.secrets[-1].id: secret}


@router.post("", status_code=status.HTTP_201_CREATED, responses=responses(409, 422))
async def create_endpoint(
    body: Annotated[EndpointIn, Body(openapi_examples=examples.ENDPOINT)],
    service: EndpointsDep,
    caller: CallerDep,
    response: Response,
) -> EndpointOut:
    """A new endpoint with a generated signing secret: its value is in this answer only
    (`signing_secrets[0].secret`), and no later answer shows it."""
    found, secret = await service.create(body.spec(), caller)
    return _one(response, found, _newest(found, secret))


@router.get("", responses=responses(422))
async def list_endpoints(
    service: EndpointsDep, caller: CallerDep, limit: LimitQuery = 50, cursor: CursorQuery = None
) -> Page[EndpointOut]:
    """The tenant's endpoints, oldest first, each with its state and live figures."""
    return await pages.endpoints(service, caller, limit, cursor)


@router.get("/{endpoint_id}", responses=responses(404, 422))
async def get_endpoint(
    endpoint_id: EndpointIdPath, service: EndpointsDep, caller: CallerDep, response: Response
) -> EndpointOut:
    """An endpoint, its circuit's state and its live figures."""
    return _one(response, await service.get(endpoint_id, caller))


@router.patch("/{endpoint_id}", responses=responses(404, 409, 412, 422))
async def patch_endpoint(
    endpoint_id: EndpointIdPath,
    body: Annotated[EndpointPatch, Body(openapi_examples=examples.ENDPOINT_PATCH)],
    service: EndpointsDep,
    caller: CallerDep,
    response: Response,
    if_match: IfMatch = None,
) -> EndpointOut:
    """Change some of its fields: a new URL, headers or flow apply to every attempt
    claimed after the change, with no change to the schedules that target it."""
    found = await service.update(endpoint_id, body.changes(), versions(if_match), caller)
    return _one(response, found)


@router.delete(
    "/{endpoint_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=responses(404, 409, 412, 422),
)
async def delete_endpoint(
    endpoint_id: EndpointIdPath, service: EndpointsDep, caller: CallerDep, if_match: IfMatch = None
) -> None:
    """Remove the endpoint and its secrets: refused (409) while a pending or paused
    schedule targets it."""
    await service.delete(endpoint_id, versions(if_match), caller)


@router.post("/{endpoint_id}/secrets/rotate", responses=responses(404, 412, 422))
async def rotate_endpoint_secret(
    endpoint_id: EndpointIdPath,
    body: Annotated[RotateIn, Body(openapi_examples=examples.ROTATE)],
    service: EndpointsDep,
    caller: CallerDep,
    response: Response,
    if_match: IfMatch = None,
) -> EndpointOut:
    """A new signing secret (its value in this answer only); the live ones go on signing
    for `overlap_seconds`, so that each delivery meanwhile carries one signature per live
    secret and a receiver can switch without a failed delivery. The endpoint's version grows:
    with If-Match, a request sent twice rotates once."""
    found, secret = await service.rotate(
        endpoint_id, body.overlap_seconds, caller, versions(if_match)
    )
    return _one(response, found, _newest(found, secret))


@router.post("/{endpoint_id}/enable", responses=responses(404, 422))
async def enable_endpoint(
    endpoint_id: EndpointIdPath, service: EndpointsDep, caller: CallerDep, response: Response
) -> EndpointOut:
    """Close the circuit, whatever its state (a disabled endpoint's too): its waiting
    deliveries start as its limits allow."""
    return _one(response, await service.enable(endpoint_id, caller))


@router.get("/{endpoint_id}/events", responses=responses(404, 422))
async def list_endpoint_events(
    endpoint_id: EndpointIdPath,
    service: EndpointsDep,
    caller: CallerDep,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> Page[EndpointEventOut]:
    """The endpoint's events, oldest first: its writes, rotations and its circuit's
    changes of state, who made each; a removed endpoint's are kept."""
    return await pages.endpoint_events(service, endpoint_id, caller, limit, cursor)


@router.get("/{endpoint_id}/attempts", responses=responses(404, 422))
async def list_endpoint_attempts(
    endpoint_id: EndpointIdPath,
    service: EndpointsDep,
    caller: CallerDep,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> Page[EndpointAttemptOut]:
    """The attempts that went to the endpoint, newest first, each with its occurrence: how
    it answered lately."""
    return await pages.endpoint_attempts(service, endpoint_id, caller, limit, cursor)
