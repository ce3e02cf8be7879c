"""Routes under /v1/tenants: tenants put, read, listed and removed (DESIGN section 14).
These manage the installation rather than act in a tenant: `Chronoq-Tenant` names none
here, and the tenant is the path's."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Response, status

from app.api import examples, pages
from app.api.deps import CursorQuery, LimitQuery, TenantsDep
from app.api.problems import responses
from app.api.schemas import Page
from app.api.tenant_schemas import TenantIn, TenantOut
from app.api.versions import if_match_header, versions
from app.domain.tenants import MAX_TENANT, TENANT_ALPHABET, TENANT_PATTERN, Tenant

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


def _one(response: Response, tenant: Tenant) -> TenantOut:
    response.headers["ETag"] = f'"{tenant.version}"'
    return TenantOut.of(tenant)


@router.get("", responses=responses(422))
async def list_tenants(
    service: TenantsDep, limit: LimitQuery = 50, cursor: CursorQuery = None
) -> Page[TenantOut]:
    """Tenants in id order, `default` among them."""
    return await pages.tenants(service, limit, cursor)


@router.get("/{tenant}", responses=responses(404, 422))
async def get_tenant(tenant: TenantPath, service: TenantsDep, response: Response) -> TenantOut:
    return _one(response, await service.get(tenant))


@router.put("/{tenant}", responses={201: {"model": TenantOut}, **responses(412, 422)})
async def put_tenant(
    tenant: TenantPath,
    body: Annotated[TenantIn, Body(openapi_examples=examples.TENANT)],
    service: TenantsDep,
    response: Response,
    if_match: IfMatch = None,
) -> TenantOut:
    """Create (201) or replace (200) the tenant."""
    found, created = await service.put(tenant, body.display_name, versions(if_match))
    if created:
        response.status_code = status.HTTP_201_CREATED
    return _one(response, found)


@router.delete(
    "/{tenant}", status_code=status.HTTP_204_NO_CONTENT, responses=responses(404, 409, 412, 422)
)
async def delete_tenant(tenant: TenantPath, service: TenantsDep, if_match: IfMatch = None) -> None:
    """Remove the tenant with its ended schedules and its flow keys: refused (409) while
    any of its schedules is pending or paused, and for `default`."""
    await service.delete(tenant, versions(if_match))
