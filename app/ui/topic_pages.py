"""The console's topic pages (DESIGN 15): the tenant's topics with how many subscriptions
each has; one topic with its subscriptions (what each takes, and the endpoint it goes to,
linked to that endpoint's page). Read through the functions that answer the API."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from app.api import pages as api_pages
from app.api.deps import TopicsDep
from app.api.schemas import Page
from app.api.topic_schemas import SubscriptionOut, TopicOut
from app.domain.errors import ChronoqError
from app.domain.topics import TOPIC_NAME
from app.ui.forms import Viewer
from app.ui.frame import PageFrame, status_of
from app.ui.tenancy import ViewerDep

PAGE_SIZE = 50
SUBSCRIPTIONS = 200


class TopicPages:
    def __init__(self, frame: PageFrame) -> None:
        self._frame = frame

    async def topics(self, request: Request, viewer: Viewer, service: TopicsDep) -> Response:
        async def read(cursor: str | None) -> Page[TopicOut]:
            return await api_pages.topics(service, viewer.caller, PAGE_SIZE, cursor)

        return await self._frame.listed(request, viewer, "topics.html", "Topics", read)

    async def topic(
        self, request: Request, viewer: Viewer, service: TopicsDep, name: str
    ) -> HTMLResponse:
        frame = self._frame
        if not TOPIC_NAME.fullmatch(name):
            return await frame.refuse(request, viewer, 404, f"{name[:80]!r} is not a topic name")
        try:
            found = TopicOut.of(await service.get(name, viewer.caller))
            subscribed: Page[SubscriptionOut] = await api_pages.subscriptions(
                service, viewer.caller, name, SUBSCRIPTIONS, None
            )
        except ChronoqError as exc:
            return await frame.refuse(request, viewer, status_of(exc), exc.detail)
        return await frame.render(
            request,
            viewer,
            "topic.html",
            title=found.name,
            topic=found,
            subscriptions=subscribed.items,
            more=subscribed.next_cursor is not None,
        )


def add_topic_routes(routes: APIRouter, pages: TopicPages) -> None:
    """The topic pages' routes on the console's `routes`."""

    @routes.get("/topics", response_class=HTMLResponse)
    async def topics(request: Request, who: ViewerDep, service: TopicsDep) -> Response:
        return await pages.topics(request, who, service)

    @routes.get("/topics/{name}", response_class=HTMLResponse)
    async def topic(
        request: Request, who: ViewerDep, service: TopicsDep, name: str
    ) -> HTMLResponse:
        return await pages.topic(request, who, service, name)
