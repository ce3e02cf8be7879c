"""Routes under /ui: the operator console's pages, and the forms they post (DESIGN 10).

Every page reads through the services and the very functions that answer the API's lists,
so a page has the API's filters, cursors and redactions, and its cost. Every page is in one
tenant, the one its address names (`app.ui.tenancy`); a page asked for in a tenant its key
cannot be in is the page that says why. Every change is a POST form answered by a redirect
back (post, redirect, get), guarded by a token bound to the key that loaded the form and by
an Origin/Referer check (`app.ui.forms`). Nothing here is in the OpenAPI document: the
console is not part of the API.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from importlib.resources import files
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles

from app.api.deps import DeadLettersDep, OccurrencesDep, SchedulesDep
from app.ui.activity_pages import add_activity_routes
from app.ui.backfill_form import add_backfill_route
from app.ui.dead_letter_pages import DeadLetterPages
from app.ui.endpoint_pages import EndpointPages, add_endpoint_routes
from app.ui.find_page import add_find_route
from app.ui.flow_key_pages import FlowKeyPages, add_flow_key_routes
from app.ui.forms import FormGuard
from app.ui.frame import PageFrame
from app.ui.live import LiveNumbers
from app.ui.schedule_create import add_create_routes
from app.ui.schedule_pages import SCHEDULE_ACTIONS, SchedulePages
from app.ui.tenancy import SECTIONS, TenantRefusedError, ViewerDep, switched
from app.ui.tenant_pages import TenantPages, add_tenant_routes
from app.ui.topic_pages import TopicPages, add_topic_routes


def static_files() -> StaticFiles:
    """The console's stylesheet and script, served by the service itself."""
    return StaticFiles(directory=str(files("app.ui") / "static"))


class Console:
    """The console's pages for one app, sharing one frame (templates, form guard and live
    numbers)."""

    def __init__(self, guard: FormGuard | None = None, live: LiveNumbers | None = None) -> None:
        self.frame = PageFrame(guard, live)
        self.schedules = SchedulePages(self.frame)
        self.dead_letters = DeadLetterPages(self.frame)
        self.flow_keys = FlowKeyPages(self.frame)
        self.tenants = TenantPages(self.frame)
        self.endpoints = EndpointPages(self.frame)
        self.topics = TopicPages(self.frame)


def _route_class(frame: PageFrame) -> type[APIRoute]:
    """The console's routes: a page asked for in a tenant its key cannot be in (raised as
    its viewer is read, before the page runs) is answered with the page that says why."""

    class ConsoleRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handle = super().get_route_handler()

            async def guarded(request: Request) -> Response:
                try:
                    return await handle(request)
                except TenantRefusedError as exc:
                    return await frame.refuse(request, exc.viewer, exc.status, exc.detail)

            return guarded

    return ConsoleRoute


@functools.cache
def default_router() -> APIRouter:
    """`router()` of the console's own pages, built once per process: it holds no state of
    an app's (each request reaches its app's services through its dependencies), and
    building the routes is most of what making an app costs."""
    return router()


def router(console: Console | None = None) -> APIRouter:
    """The console's routes, none of them in the OpenAPI document."""
    pages = console or Console()
    schedule_pages, dead_letter_pages = pages.schedules, pages.dead_letters
    routes = APIRouter(prefix="/ui", include_in_schema=False, route_class=_route_class(pages.frame))

    @routes.get("", response_class=HTMLResponse)
    @routes.get("/schedules", response_class=HTMLResponse)
    async def schedules(request: Request, who: ViewerDep, service: SchedulesDep) -> HTMLResponse:
        return await schedule_pages.schedules(request, who, service)

    add_create_routes(routes, pages.frame)

    @routes.get("/schedules/{schedule_id}", response_class=HTMLResponse)
    async def schedule(
        request: Request,
        who: ViewerDep,
        service: SchedulesDep,
        occurrence_service: OccurrencesDep,
        schedule_id: str,
    ) -> HTMLResponse:
        return await schedule_pages.schedule(request, who, service, occurrence_service, schedule_id)

    for action in SCHEDULE_ACTIONS:

        def act(action: str = action) -> Callable[..., Awaitable[Response]]:
            async def handle(
                request: Request, who: ViewerDep, service: SchedulesDep, schedule_id: uuid.UUID
            ) -> Response:
                return await schedule_pages.act(request, who, service, schedule_id, action)

            return handle

        routes.add_api_route(
            f"/schedules/{{schedule_id}}/{action}",
            act(),
            methods=["POST"],
            name=f"console_{action}",
        )

    @routes.post("/schedules/{schedule_id}/edit")
    async def edit(
        request: Request,
        who: ViewerDep,
        service: SchedulesDep,
        occurrence_service: OccurrencesDep,
        schedule_id: uuid.UUID,
    ) -> Response:
        return await schedule_pages.edit(request, who, service, occurrence_service, schedule_id)

    @routes.get("/live", response_class=HTMLResponse)
    async def live(request: Request, who: ViewerDep) -> HTMLResponse:
        """The header's numbers alone, for the pages' script to refresh them in place."""
        return await pages.frame.render(request, who, "_live.html", whole=False)

    @routes.get("/switch")
    async def switch(request: Request, who: ViewerDep) -> RedirectResponse:
        """The header's switcher, a GET form: to the list it was on (`to`) in the tenant
        typed (`other`) or else chosen (`choice`), which that page checks."""
        query = request.query_params
        tenant = query.get("other", "").strip() or query.get("choice", "").strip()
        section = query.get("to", SECTIONS[0])
        root = request.scope.get("root_path", "")
        return RedirectResponse(root + switched(section, tenant), status_code=303)

    @routes.get("/dead-letters", response_class=HTMLResponse)
    async def dead_letters(
        request: Request, who: ViewerDep, service: DeadLettersDep
    ) -> HTMLResponse:
        return await dead_letter_pages.dead_letters(request, who, service)

    @routes.post("/dead-letters/replay")
    async def replay_selected(
        request: Request, who: ViewerDep, service: DeadLettersDep
    ) -> Response:
        return await dead_letter_pages.settle(request, who, service, "replay")

    @routes.post("/dead-letters/discard")
    async def discard_selected(
        request: Request, who: ViewerDep, service: DeadLettersDep
    ) -> Response:
        return await dead_letter_pages.settle(request, who, service, "discard")

    @routes.post("/dead-letters/{occurrence_id}/replay")
    async def replay_one(
        request: Request, who: ViewerDep, service: DeadLettersDep, occurrence_id: uuid.UUID
    ) -> Response:
        return await dead_letter_pages.settle(request, who, service, "replay", occurrence_id)

    @routes.post("/dead-letters/{occurrence_id}/discard")
    async def discard_one(
        request: Request, who: ViewerDep, service: DeadLettersDep, occurrence_id: uuid.UUID
    ) -> Response:
        return await dead_letter_pages.settle(request, who, service, "discard", occurrence_id)

    add_find_route(routes, pages.frame)
    add_activity_routes(routes, pages.frame)
    add_backfill_route(routes, schedule_pages)
    add_flow_key_routes(routes, pages.flow_keys)
    add_endpoint_routes(routes, pages.endpoints)
    add_topic_routes(routes, pages.topics)
    add_tenant_routes(routes, pages.tenants)
    return routes
