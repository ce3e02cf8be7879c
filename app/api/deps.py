"""Typed access to what the lifespan built, for route signatures."""

from __future__ import annotations

import uuid
from typing import Annotated, TypedDict, cast

from fastapi import Depends, Path, Query, Request

from app.api.auth import KeyRing
from app.api.pagination import MAX_CURSOR_LENGTH
from app.api.readiness import Readiness
from app.domain.errors import ForbiddenError
from app.domain.tenants import (
    DEFAULT_TENANT,
    TENANT_HEADER,
    Caller,
    check_tenant,
    missing_tenant,
)
from app.service.activity import ActivityService
from app.service.dead_letters import DeadLetterService
from app.service.endpoints import EndpointService
from app.service.flow_keys import FlowKeyService
from app.service.occurrences import OccurrenceService
from app.service.schedules import ScheduleService
from app.service.tenant_keys import TenantKeyService
from app.service.tenants import TenantService
from app.service.topics import TopicService
from app.settings import Settings
from app.telemetry import tracing


class State(TypedDict):
    settings: Settings
    schedules: ScheduleService
    dead_letters: DeadLetterService
    occurrences: OccurrenceService
    flow_keys: FlowKeyService
    tenants: TenantService
    tenant_keys: TenantKeyService  # read by the API key middleware too
    endpoints: EndpointService
    topics: TopicService
    activity: ActivityService
    readiness: Readiness
    keys: KeyRing  # read by the API key middleware; empty: the API is open


def _state(request: Request) -> State:
    # Starlette copies the lifespan's yielded mapping into each request's state.
    return cast(State, request.state._state)


def _schedules(request: Request) -> ScheduleService:
    return _state(request)["schedules"]


def _dead_letters(request: Request) -> DeadLetterService:
    return _state(request)["dead_letters"]


def _occurrences(request: Request) -> OccurrenceService:
    return _state(request)["occurrences"]


def _flow_keys(request: Request) -> FlowKeyService:
    return _state(request)["flow_keys"]


def _tenants(request: Request) -> TenantService:
    return _state(request)["tenants"]


def _tenant_keys(request: Request) -> TenantKeyService:
    return _state(request)["tenant_keys"]


def _endpoints(request: Request) -> EndpointService:
    return _state(request)["endpoints"]


def _topics(request: Request) -> TopicService:
    return _state(request)["topics"]


async def _caller(request: Request) -> Caller:
    """Who asks (the API key's name) and in which tenant: a tenant key's own, else the one
    `Chronoq-Tenant` names, or `default`. A tenant that does not exist is a 404 naming it,
    as a missing resource is; one outside the grammar a 422 naming the header; another
    than a tenant key's own a 403."""
    principal: str | None = request.state._state.get("principal")
    named = request.headers.get(TENANT_HEADER)
    own: str | None = request.state._state.get("key_tenant")
    if own is not None:  # a tenant key: its own tenant, and no other
        if named is not None and named != own:
            raise ForbiddenError(f"this key acts in tenant {own} only")
        return Caller(own, principal, own=True)
    if named is None or named == DEFAULT_TENANT:
        return Caller(DEFAULT_TENANT, principal)
    check_tenant(named, parameter=TENANT_HEADER)
    if not await _tenants(request).exists(named):
        raise missing_tenant(named)
    return Caller(named, principal)


def _activity(request: Request) -> ActivityService:
    return _state(request)["activity"]


def _readiness(request: Request) -> Readiness:
    return _state(request)["readiness"]


def _settings(request: Request) -> Settings:
    return _state(request)["settings"]


def _traceparent(request: Request) -> str | None:
    """The trace context a create stores with its schedules (`app.telemetry.tracing`)."""
    return tracing.request_traceparent(request.headers)


StateDep = Annotated[State, Depends(_state)]
SchedulesDep = Annotated[ScheduleService, Depends(_schedules)]
DeadLettersDep = Annotated[DeadLetterService, Depends(_dead_letters)]
OccurrencesDep = Annotated[OccurrenceService, Depends(_occurrences)]
FlowKeysDep = Annotated[FlowKeyService, Depends(_flow_keys)]
TenantsDep = Annotated[TenantService, Depends(_tenants)]
TenantKeysDep = Annotated[TenantKeyService, Depends(_tenant_keys)]
EndpointsDep = Annotated[EndpointService, Depends(_endpoints)]
TopicsDep = Annotated[TopicService, Depends(_topics)]
ActivityDep = Annotated[ActivityService, Depends(_activity)]
# Every router's routes act in the caller's tenant (`in_tenant`, on each router): resolved
# once per request, as FastAPI caches a dependency.
CallerDep = Annotated[Caller, Depends(_caller)]
in_tenant = Depends(_caller)
ReadinessDep = Annotated[Readiness, Depends(_readiness)]
SettingsDep = Annotated[Settings, Depends(_settings)]
TraceparentDep = Annotated[str | None, Depends(_traceparent)]
LimitQuery = Annotated[int, Query(ge=1, le=500, description="Page size")]
# A cursor is never empty (leave it out for the first page) and is base64url without padding.
CursorQuery = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=MAX_CURSOR_LENGTH,
        pattern="^[A-Za-z0-9_-]+$",
        description="The next_cursor of the page before; leave it out for the first page",
    ),
]
ScheduleIdPath = Annotated[uuid.UUID, Path(description="The schedule's id")]
OccurrenceIdPath = Annotated[uuid.UUID, Path(description="The occurrence's id")]
