"""Routes under /v1/tenants: tenants put, read, listed and removed, their keys made,
listed and revoked, and the audit events of both (DESIGN section 14). These manage the
installation rather than act in a tenant: the tenant is the path's, and only operator keys
may use them, but for a tenant key reading its own tenant and its events. Each change names
the caller's key as its events' actor."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Body, Path, Response, status

from app.api import examples, pages
from app.api.deps import CallerDep, CursorQuery, LimitQuery, StateDep, TenantKeysDep, TenantsDep
from app.api.problems import responses
from app.api.schemas import Page
from app.api.tenant_schemas import (
    MadeKey,
    TenantEventOut,
    TenantIn,
    TenantKeyIn,
    TenantKeyOut,
    TenantOut,
)
from app.api.versions import if_match_header, versions
from app.domain.errors import ConflictError, ForbiddenError
from app.domain.tenant_keys import KeyRole
from app.domain.tenants import MAX_TENANT, TENANT_ALPHABET, TENANT_PATTERN, Caller, Tenant

router = APIRouter(prefix="/v1/tenants", tags=["tenants"])

TenantPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_TENANT,
        pattern=f"^{TENANT_PATTERN.pattern}$",
        description=f"The tenant's id ({TENANT_ALPHABET})",
        examples=["billing"],
    ),
]
IfMatch = Annotated[str | None, if_match_header("the tenant")]
KeyIdPath = Annotated[uuid.UUID, Path(description="The key's id (from its creation or the list)")]


def _operator(caller: Caller) -> None:
    if caller.own:
        raise ForbiddenError("a tenant's key manages no tenant: this needs an operator key")


def _own_or_operator(caller: Caller, tenant: str) -> None:
    if caller.own and caller.tenant != tenant:
        raise ForbiddenError(f"this key acts in tenant {caller.tenant} only")


def _one(response: Response, tenant: Tenant) -> TenantOut:
    response.headers["ETag"] = f'"{tenant.version}"'
    return TenantOut.of(tenant)


@router.get("", responses=responses(422))
async def list_tenants(
    service: TenantsDep, caller: CallerDep, limit: LimitQuery = 50, cursor: CursorQuery = None
) -> Page[TenantOut]:
    """Tenants in id order, `default` among them."""
    _operator(caller)
    return await pages.tenants(service, limit, cursor)


@router.get("/{tenant}", responses=responses(404, 422))
async def get_tenant(
    tenant: TenantPath, service: TenantsDep, caller: CallerDep, response: Response
) -> TenantOut:
    """A tenant; a tenant's key reads its own."""
    _own_or_operator(caller, tenant)
    return _one(response, await service.get(tenant))


@router.get("/{tenant}/events", responses=responses(404, 422))
async def list_tenant_events(
    tenant: TenantPath,
    service: TenantsDep,
    caller: CallerDep,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> Page[TenantEventOut]:
    """The tenant's audit events, oldest first: each change of the tenant or of its keys,
    who made it, and the tenant's version after it. A removed tenant's are kept, its
    `deleted` last; a tenant's key reads its own tenant's."""
    _own_or_operator(caller, tenant)
    return await pages.tenant_events(service, tenant, limit, cursor)


@router.put("/{tenant}", responses={201: {"model": TenantOut}, **responses(412, 422)})
async def put_tenant(
    tenant: TenantPath,
    body: Annotated[TenantIn, Body(openapi_examples=examples.TENANT)],
    service: TenantsDep,
    caller: CallerDep,
    response: Response,
    if_match: IfMatch = None,
) -> TenantOut:
    """Create (201) or replace (200) the tenant."""
    _operator(caller)
    found, created = await service.put(tenant, body.spec(), versions(if_match), actor=caller.actor)
    if created:
        response.status_code = status.HTTP_201_CREATED
    return _one(response, found)


@router.delete(
    "/{tenant}", status_code=status.HTTP_204_NO_CONTENT, responses=responses(404, 409, 412, 422)
)
async def delete_tenant(
    tenant: TenantPath, service: TenantsDep, caller: CallerDep, if_match: IfMatch = None
) -> None:
    """Remove the tenant with its ended schedules, its flow keys and its keys: refused
    (409) while any of its schedules is pending or paused, and for `default`."""
    _operator(caller)
    await service.delete(tenant, versions(if_match), actor=caller.actor)


@router.post(
    "/{tenant}/keys",
    status_code=status.HTTP_201_CREATED,
    responses=responses(404, 409, 422),
)
async def create_tenant_key(
    tenant: TenantPath,
    body: Annotated[TenantKeyIn, Body(openapi_examples=examples.TENANT_KEY)],
    service: TenantKeysDep,
    caller: CallerDep,
    state: StateDep,
) -> MadeKey:
    """A key that acts in this tenant only. `key` is in this answer only: it is stored as
    its digest, and no later answer shows it."""
    _operator(caller)
    if not state["keys"]:
        raise ConflictError(
            "the API is open (no CHRONOQ_API_KEYS): it checks no key, a tenant's neither"
        )
    made, secret = await service.make(
        tenant, body.name, KeyRole(body.role), body.expires_at, actor=caller.actor
    )
    return MadeKey.made(made, secret)


@router.get("/{tenant}/keys", responses=responses(404, 422))
async def list_tenant_keys(
    tenant: TenantPath,
    service: TenantKeysDep,
    caller: CallerDep,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> Page[TenantKeyOut]:
    """The tenant's keys, revoked ones too, oldest first: never their secret."""
    _operator(caller)
    return await pages.tenant_keys(service, tenant, limit, cursor)


@router.delete(
    "/{tenant}/keys/{key_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=responses(404, 422),
)
async def revoke_tenant_key(
    tenant: TenantPath, key_id: KeyIdPath, service: TenantKeysDep, caller: CallerDep
) -> None:
    """Revoke the key: every replica refuses it within 5 seconds (a revoked one stays so)."""
    _operator(caller)
    await service.revoke(tenant, key_id, actor=caller.actor)
