"""The HTTP requests' timings (`chronoq_http_request_duration_seconds`, declared with the
API's other series in `api_metrics`), labelled by route template."""

from __future__ import annotations

import time

from starlette.routing import Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.telemetry.api_metrics import HTTP_DURATION

UNMATCHED = "unmatched"


def _route_template(scope: Scope) -> str:
    """The template of the route that served the request (`/v1/schedules/{schedule_id}`),
    never the path itself: a label per path would grow without bound. A file of a mounted
    directory (the console's static files, the docs' assets) is labelled by its mount,
    `/ui/static/{path}`."""
    path = getattr(scope.get("route"), "path", None)
    if isinstance(path, str) and path:
        return path
    # A mount sets no route, only the app it hands the request to.
    endpoint = scope.get("endpoint")
    if endpoint is not None:
        for route in getattr(scope.get("app"), "routes", ()):
            if isinstance(route, Mount) and route.app is endpoint:
                return f"{route.path}/{{path}}"
    return UNMATCHED


class HttpMetricsMiddleware:
    """Times every HTTP request the router receives, to the end of its answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            HTTP_DURATION.labels(scope["method"], _route_template(scope), str(status)).observe(
                time.perf_counter() - started
            )
