"""The console's tenant pages (DESIGN 14): the tenants in id order with their weight, pause
and usage, for operator keys; one tenant with its usage, quotas, weight and retention, its
Pause/Resume button and the form that edits its settings. A tenant's key sees its own
tenant's page, read-only (it manages no tenant), and is sent there from the list.

The pages read through the very functions that answer the API's list and tenant, so they
have its cursors and figures. The form puts the whole tenant (PUT /v1/tenants/{id}) under
If-Match of the version the page showed, its display name and pause as they are: a stale
form is refused and the page shows the tenant as it is now; every field the API refuses is
named beside its input, and nothing is stored. Pause and Resume flip `paused` of the tenant
as it is when pressed (under If-Match of the version just read), so a press never undoes
another change made meanwhile. The default tenant is never paused and has no delivery
quotas: its page has neither the button nor those inputs.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError

from app.api import pages as api_pages
from app.api.deps import TenantsDep
from app.api.problem_details import validation_message
from app.api.schemas import Page
from app.api.tenant_schemas import TenantIn, TenantOut
from app.domain.errors import ChronoqError, InvalidInputError, PreconditionFailedError
from app.domain.tenants import (
    DEFAULT_TENANT,
    MAX_WEIGHT,
    MIN_WEIGHT,
    TENANT_ALPHABET,
    Tenant,
    TenantSpec,
    check_tenant,
)
from app.ui.activity_pages import chart_view
from app.ui.display import period
from app.ui.forms import Viewer, beside
from app.ui.frame import PageFrame, back, status_of
from app.ui.query import filter_value, link
from app.ui.tenancy import ViewerDep, switched

PAGE_SIZE = 50
QUOTA_FIELDS = (
    "max_schedules",
    "max_creates_per_minute",
    "max_deliveries_per_second",
    "max_in_flight",
)
# Quotas the default tenant never has (TenantSpec.check): its form leaves them out.
DELIVERY_QUOTAS = ("max_deliveries_per_second", "max_in_flight")
FORM_FIELDS = ("weight", *QUOTA_FIELDS, "retention_seconds")
LABELS = {
    "weight": f"Weight ({MIN_WEIGHT}-{MAX_WEIGHT})",
    "max_schedules": "Max schedules",
    "max_creates_per_minute": "Max creates a minute",
    "max_deliveries_per_second": "Max deliveries a second",
    "max_in_flight": "Max in flight",
    "retention_seconds": "Retention (s)",
}
_MAX_FIELD = 32  # longer than any value the form takes
_WHOLE = re.compile(r"[0-9]{1,12}")

_DONE = {
    "paused": "Paused: none of the tenant's occurrences starts until it is resumed (they "
    "wait; nothing is skipped).",
    "resumed": "Resumed: what waits on the tenant starts as its quotas allow.",
    "saved": "Settings saved.",
}
_STALE = (
    "This tenant changed since the page was loaded: nothing was saved. The page and the form "
    "now show it as it is; make your change again."
)
_STALE_PRESS = "This tenant changed while the button was pressed. Nothing was saved; try again."
_NOT_MANAGED = "a tenant's key manages no tenant: this needs an operator key"


def form_of(tenant: TenantOut) -> dict[str, str]:
    """The edit form's values for the tenant as it is (empty: no limit, or the setting)."""
    values: dict[str, int | None] = {
        "weight": tenant.weight,
        **tenant.quotas.model_dump(),
        "retention_seconds": tenant.retention_seconds,
    }
    return {name: "" if values[name] is None else str(values[name]) for name in FORM_FIELDS}


def spec_of(tenant: Tenant) -> TenantSpec:
    """The tenant as a PUT gives it, whole."""
    return TenantSpec(
        display_name=tenant.display_name,
        weight=tenant.weight,
        paused=tenant.paused,
        quotas=tenant.quotas,
        retention_seconds=tenant.retention_seconds,
        events_target=tenant.events_target,
    )


def shown_fields(tenant_id: str) -> tuple[str, ...]:
    """The fields of the tenant's form: the default tenant's has no delivery quotas."""
    if tenant_id != DEFAULT_TENANT:
        return FORM_FIELDS
    return tuple(name for name in FORM_FIELDS if name not in DELIVERY_QUOTAS)


def field_of(pointer: str | None) -> str | None:
    """The form field a JSON pointer of the PUT's body names (None: no field of the form)."""
    name = (pointer or "").removeprefix("#/").removeprefix("quotas/")
    return name if name in FORM_FIELDS else None


def _whole(text: str, name: str) -> int | None:
    """A field's number; empty is none (no limit, or the setting), but for the weight."""
    if not text and name != "weight":
        return None
    if not _WHOLE.fullmatch(text):
        if name == "weight":
            raise ValueError(f"a whole number from {MIN_WEIGHT} to {MAX_WEIGHT}")
        if name == "retention_seconds":
            raise ValueError("a whole number of seconds, or empty for the setting's")
        raise ValueError("a whole number, or empty for no limit")
    return int(text)


def checked_spec(form: dict[str, str], current: Tenant) -> tuple[TenantSpec | None, dict[str, str]]:
    """The tenant the form puts over `current` (its display name and pause kept), or the
    message of each field refused, by field: all of them at once, as the API words them."""
    refused: dict[str, str] = {}
    numbers: dict[str, int | None] = {}
    for name in FORM_FIELDS:
        try:
            numbers[name] = _whole(form.get(name, "").strip(), name)
        except ValueError as exc:
            refused[name] = str(exc)
    body: dict[str, Any] = {
        "display_name": current.display_name,
        # A weight refused above stands in as it is, to be refused once.
        "weight": numbers.get("weight", current.weight),
        "paused": current.paused,
        "quotas": {name: numbers.get(name) for name in QUOTA_FIELDS},
        "retention_seconds": numbers.get("retention_seconds"),
    }
    try:
        put = TenantIn.model_validate(body)
    except ValidationError as exc:
        for error in exc.errors():
            pointer = "#/" + "/".join(str(part) for part in error["loc"])
            name = field_of(pointer) or ""
            refused.setdefault(name, validation_message(error))
        return None, refused
    if refused:
        return None, refused
    # Its events target as it is (the form does not show it).
    return replace(put.spec(), events_target=current.events_target), {}


class TenantPages:
    def __init__(self, frame: PageFrame) -> None:
        self._frame = frame

    async def tenants(self, request: Request, viewer: Viewer, service: TenantsDep) -> Response:
        """The tenants in id order, for an operator; a tenant's key goes to its own."""
        if viewer.own:
            return back(request, viewer, f"/ui/tenants/{viewer.tenant}")
        query = request.query_params
        error: str | None = None
        page: Page[TenantOut] = Page(items=[], next_cursor=None)
        next_url: str | None = None
        try:
            page = await api_pages.tenants(service, PAGE_SIZE, filter_value(query, "cursor"))
            if page.next_cursor is not None:
                next_url = link({}, cursor=page.next_cursor)
        except InvalidInputError as exc:
            error = exc.detail
        return await self._frame.render(
            request,
            viewer,
            "tenants.html",
            422 if error else 200,
            title="Tenants",
            items=page.items,
            open_url=lambda tenant: switched("schedules", tenant),
            next_url=next_url,
            paged=bool(query.get("cursor")),
            error=error,
        )

    async def tenant(
        self,
        request: Request,
        viewer: Viewer,
        service: TenantsDep,
        tenant_id: str,
        *,
        status: int = 200,
        form: dict[str, str] | None = None,
        error: str | None = None,
        invalid: dict[str, str] | None = None,
    ) -> HTMLResponse:
        """The tenant's page; `form` (the values posted), `error` and `invalid` (each
        refused field's message) when it answers a refused edit."""
        frame = self._frame
        try:
            check_tenant(tenant_id)
        except InvalidInputError:
            detail = f"{tenant_id[:80]!r} is not a tenant id: a tenant id is {TENANT_ALPHABET}"
            return await frame.refuse(request, viewer, 404, detail)
        if viewer.own and tenant_id != viewer.tenant:
            return await frame.refuse(
                request, viewer, 403, f"this key acts in tenant {viewer.tenant} only"
            )
        try:
            found = TenantOut.of(await service.get(tenant_id))
            chart = await chart_view(request, viewer, tenant=tenant_id)
        except ChronoqError as exc:
            return await frame.refuse(request, viewer, status_of(exc), exc.detail)
        is_default = found.id == DEFAULT_TENANT
        return await frame.render(
            request,
            viewer,
            "tenant.html",
            status,
            title=found.id,
            tenant=found,
            is_default=is_default,
            # An operator manages tenants; a tenant's key reads its own.
            manages=not viewer.own,
            fields=shown_fields(found.id),
            quotas=[name for name in shown_fields(found.id) if name in QUOTA_FIELDS],
            labels=LABELS,
            form=form or form_of(found),
            error=error,
            invalid=invalid or {},
            first_invalid=next((name for name in FORM_FIELDS if name in (invalid or {})), None),
            notice=None if error else _DONE.get(request.query_params.get("done", "")),
            schedules_url=("/ui/schedules" if viewer.own else switched("schedules", found.id)),
            activity=chart,
            period=period,
        )

    async def press(
        self, request: Request, viewer: Viewer, service: TenantsDep, tenant_id: str, paused: bool
    ) -> Response:
        """Pause or Resume: `paused` of the tenant as it is now, the rest kept."""
        frame = self._frame
        fields = await frame.posted(request, viewer)
        if isinstance(fields, HTMLResponse):
            return fields
        if viewer.own:
            return await frame.refuse(request, viewer, 403, _NOT_MANAGED)
        try:
            check_tenant(tenant_id)
            found = await service.get(tenant_id)
            if found.paused != paused:
                spec = replace(spec_of(found), paused=paused)
                await service.put(
                    tenant_id, spec, frozenset({found.version}), actor=viewer.caller.actor
                )
        except PreconditionFailedError:
            return await self.tenant(
                request, viewer, service, tenant_id, status=409, error=_STALE_PRESS
            )
        except ChronoqError as exc:
            return await frame.refuse(request, viewer, status_of(exc), exc.detail)
        done = "paused" if paused else "resumed"
        return back(request, viewer, f"/ui/tenants/{tenant_id}?done={done}")

    async def edit(
        self, request: Request, viewer: Viewer, service: TenantsDep, tenant_id: str
    ) -> Response:
        """The settings form: the whole tenant, put under If-Match of the version it showed."""
        frame = self._frame
        fields = await frame.posted(request, viewer)
        if isinstance(fields, HTMLResponse):
            return fields
        if viewer.own:
            return await frame.refuse(request, viewer, 403, _NOT_MANAGED)
        versions = fields.get("version", [])
        if len(versions) != 1 or not _WHOLE.fullmatch(versions[0]):
            return await frame.refuse(
                request, viewer, 422, "The form names no version of the tenant: reload the page."
            )
        version = int(versions[0])
        # What was typed, shown again beside the refusal.
        posted = {name: (fields.get(name) or [""])[0][:_MAX_FIELD] for name in FORM_FIELDS}

        async def again(
            status: int, error: str, invalid: dict[str, str] | None = None
        ) -> HTMLResponse:
            return await self.tenant(
                request,
                viewer,
                service,
                tenant_id,
                status=status,
                form=None if status == 409 else posted,
                error=error,
                invalid=invalid,
            )

        try:
            check_tenant(tenant_id)
            current = await service.get(tenant_id)
            if current.version != version:
                raise PreconditionFailedError("stale form")
            spec, refused = checked_spec(posted, current)
            if spec is None:
                return await again(422, *beside(refused, shown_fields(tenant_id)))
            await service.put(tenant_id, spec, frozenset({version}), actor=viewer.caller.actor)
        except PreconditionFailedError:
            return await again(409, _STALE)
        except InvalidInputError as exc:
            refused = {field_of(exc.pointer) or "": exc.detail}
            return await again(422, *beside(refused, shown_fields(tenant_id)))
        except ChronoqError as exc:
            return await frame.refuse(request, viewer, status_of(exc), exc.detail)
        return back(request, viewer, f"/ui/tenants/{tenant_id}?done=saved")


def add_tenant_routes(routes: APIRouter, pages: TenantPages) -> None:
    """The tenant pages' routes on the console's `routes`."""

    @routes.get("/tenants", response_class=HTMLResponse)
    async def tenants(request: Request, who: ViewerDep, service: TenantsDep) -> Response:
        return await pages.tenants(request, who, service)

    @routes.get("/tenants/{tenant_id}", response_class=HTMLResponse)
    async def tenant(
        request: Request, who: ViewerDep, service: TenantsDep, tenant_id: str
    ) -> HTMLResponse:
        return await pages.tenant(request, who, service, tenant_id)

    @routes.post("/tenants/{tenant_id}/pause")
    async def pause(
        request: Request, who: ViewerDep, service: TenantsDep, tenant_id: str
    ) -> Response:
        return await pages.press(request, who, service, tenant_id, paused=True)

    @routes.post("/tenants/{tenant_id}/resume")
    async def resume(
        request: Request, who: ViewerDep, service: TenantsDep, tenant_id: str
    ) -> Response:
        return await pages.press(request, who, service, tenant_id, paused=False)

    @routes.post("/tenants/{tenant_id}/settings")
    async def edit(
        request: Request, who: ViewerDep, service: TenantsDep, tenant_id: str
    ) -> Response:
        return await pages.edit(request, who, service, tenant_id)
