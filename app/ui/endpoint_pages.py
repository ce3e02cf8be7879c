"""The console's endpoint pages (DESIGN 15): the tenant's endpoints with their circuit's
state and live figures; one endpoint with its state, failures in a row, next probe, flow
limits, secrets (their hints, never their values), recent attempts and events, and the
buttons that rotate its secret and enable it.

The pages read through the very functions that answer the API's list, endpoint, attempts
and events, so they have its figures and redactions. Rotate shows the new secret once, on
the page its POST answers (never in an address, a redirect or a later page); Enable closes
the circuit, whatever its state.
"""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from app.api import pages as api_pages
from app.api.deps import EndpointsDep
from app.api.endpoint_schemas import EndpointOut
from app.api.schemas import Page
from app.domain.endpoints import DEFAULT_OVERLAP_SECONDS
from app.domain.errors import ChronoqError, PreconditionFailedError
from app.ui.activity_pages import chart_view
from app.ui.display import period
from app.ui.forms import Viewer
from app.ui.frame import PageFrame, back, status_of
from app.ui.tenancy import ViewerDep

PAGE_SIZE = 50
RECENT = 20
_DONE = {"enabled": "Enabled: the circuit is closed, and what waits flows as its limits allow."}
_STALE_ROTATE = (
    "This endpoint changed since the page was loaded (a rotation sent again?): nothing was "
    "rotated. Its secrets are as listed below."
)
_STATES = {
    "closed": "deliveries flow",
    "open": "no attempt starts; its deliveries wait, uncharged, for the probe",
    "half_open": "the cooldown is over: the next attempt probes the endpoint",
    "disabled": "no attempt starts until it is enabled",
}


def _endpoint_id(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


class EndpointPages:
    def __init__(self, frame: PageFrame) -> None:
        self._frame = frame

    async def endpoints(self, request: Request, viewer: Viewer, service: EndpointsDep) -> Response:
        async def read(cursor: str | None) -> Page[EndpointOut]:
            return await api_pages.endpoints(service, viewer.caller, PAGE_SIZE, cursor)

        return await self._frame.listed(request, viewer, "endpoints.html", "Endpoints", read)

    async def endpoint(
        self,
        request: Request,
        viewer: Viewer,
        service: EndpointsDep,
        endpoint_id: str,
        *,
        new_secret: str | None = None,
        notice: str | None = None,
        error: str | None = None,
        status: int = 200,
    ) -> HTMLResponse:
        """The endpoint's page; `new_secret` once, on the page a rotation answers."""
        frame = self._frame
        found_id = _endpoint_id(endpoint_id)
        if found_id is None:
            return await frame.refuse(
                request, viewer, 404, f"{endpoint_id[:80]!r} is not an endpoint id"
            )
        try:
            found = EndpointOut.of(await service.get(found_id, viewer.caller))
            attempts = await api_pages.endpoint_attempts(
                service, found_id, viewer.caller, RECENT, None
            )
            events = await api_pages.endpoint_events(service, found_id, viewer.caller, 50, None)
            chart = await chart_view(request, viewer, endpoint_id=found_id)
        except ChronoqError as exc:
            return await frame.refuse(request, viewer, status_of(exc), exc.detail)
        return await frame.render(
            request,
            viewer,
            "endpoint.html",
            status,
            title=found.name or str(found.id),
            error=error,
            endpoint=found,
            meaning=_STATES[found.state],
            attempts=attempts.items,
            events=events.items,
            new_secret=new_secret,
            overlap=period(DEFAULT_OVERLAP_SECONDS),
            notice=notice or _DONE.get(request.query_params.get("done", "")),
            period=period,
            activity=chart,
        )

    async def rotate(
        self, request: Request, viewer: Viewer, service: EndpointsDep, endpoint_id: uuid.UUID
    ) -> Response:
        """A new secret, shown on this answer's page only (it is never stored readable)."""
        frame = self._frame
        fields = await frame.posted(request, viewer)
        if isinstance(fields, HTMLResponse):
            return fields
        versions = fields.get("version", [])
        if len(versions) != 1 or not versions[0].isdigit() or len(versions[0]) > 12:
            return await frame.refuse(
                request, viewer, 422, "The form names no version of the endpoint: reload the page."
            )
        try:
            _, secret = await service.rotate(
                endpoint_id,
                DEFAULT_OVERLAP_SECONDS,
                viewer.caller,
                frozenset({int(versions[0])}),
            )
        except PreconditionFailedError:
            # A form sent again (a reload of the page that showed the secret): nothing more
            # is rotated, and no secret is shown.
            return await self.endpoint(
                request, viewer, service, str(endpoint_id), error=_STALE_ROTATE, status=409
            )
        except ChronoqError as exc:
            return await frame.refuse(request, viewer, status_of(exc), exc.detail)
        notice = (
            "A new signing secret: copy it now, it is not shown again. The earlier ones sign "
            f"beside it for {period(DEFAULT_OVERLAP_SECONDS)}."
        )
        return await self.endpoint(
            request, viewer, service, str(endpoint_id), new_secret=secret, notice=notice
        )

    async def enable(
        self, request: Request, viewer: Viewer, service: EndpointsDep, endpoint_id: uuid.UUID
    ) -> Response:
        frame = self._frame
        fields = await frame.posted(request, viewer)
        if isinstance(fields, HTMLResponse):
            return fields
        try:
            await service.enable(endpoint_id, viewer.caller)
        except ChronoqError as exc:
            return await frame.refuse(request, viewer, status_of(exc), exc.detail)
        return back(request, viewer, f"/ui/endpoints/{endpoint_id}?done=enabled")


def add_endpoint_routes(routes: APIRouter, pages: EndpointPages) -> None:
    """The endpoint pages' routes on the console's `routes`."""

    @routes.get("/endpoints", response_class=HTMLResponse)
    async def endpoints(request: Request, who: ViewerDep, service: EndpointsDep) -> Response:
        return await pages.endpoints(request, who, service)

    @routes.get("/endpoints/{endpoint_id}", response_class=HTMLResponse)
    async def endpoint(
        request: Request, who: ViewerDep, service: EndpointsDep, endpoint_id: str
    ) -> HTMLResponse:
        return await pages.endpoint(request, who, service, endpoint_id)

    @routes.post("/endpoints/{endpoint_id}/rotate")
    async def rotate(
        request: Request, who: ViewerDep, service: EndpointsDep, endpoint_id: uuid.UUID
    ) -> Response:
        return await pages.rotate(request, who, service, endpoint_id)

    @routes.post("/endpoints/{endpoint_id}/enable")
    async def enable(
        request: Request, who: ViewerDep, service: EndpointsDep, endpoint_id: uuid.UUID
    ) -> Response:
        return await pages.enable(request, who, service, endpoint_id)
