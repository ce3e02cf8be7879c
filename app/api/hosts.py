"""Where a request says it is going: its Host, checked against the allow list and never
repeated back, and whether a page's Origin is this service's own.

Invariant: no request whose Host is not allowed (CHRONOQ_ALLOWED_HOSTS) reaches a route but
the probes, so a website that rebinds its own name onto a local address cannot drive an open
instance: its requests name its own host. And no answer repeats the Host: redirects are
relative.

A browser names the page a request comes from in `Origin` and cannot forge it, nor the
`Sec-Fetch-*` headers; a client that is not a browser sends neither, or whatever it likes,
but then it has no one else's credentials to replay.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from urllib.parse import urlsplit

from starlette.responses import RedirectResponse
from starlette.routing import Match, Router
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.problem_details import MEDIA_TYPE, excerpt, problem_type
from app.settings import HostAllowList, Settings

# Answered whatever the Host: an orchestrator's probes name the address they dial (a pod's
# IP), and these say nothing but whether the replica is up and ready.
PROBE_PATHS = frozenset({"/healthz", "/readyz"})
# How much of a refused Host the answer repeats.
_HOST_ECHO = 100

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The one value of header `name` (lower case), as Latin-1 text; None when absent or
    repeated."""
    values = [value for key, value in headers if key == name]
    return values[0].decode("latin-1") if len(values) == 1 else None


def split_host(value: str) -> tuple[str, int | None] | None:
    """A Host header's name (lower case, no trailing dot, an IPv6 literal without its
    brackets) and port; None when it is not one."""
    value = value.strip()
    if value.startswith("["):
        literal, bracket, rest = value[1:].partition("]")
        if not bracket or not literal or (rest and not rest.startswith(":")):
            return None
        name, port_text = literal, rest[1:]
    else:
        name, _, port_text = value.partition(":")
    if port_text and not (port_text.isascii() and port_text.isdigit()):
        return None
    port = int(port_text) if port_text else None
    name = name.lower().removesuffix(".")
    if not name or (port is not None and port > 65535):
        return None
    return name, port


def is_same_origin(scope: Scope) -> bool:
    """Whether the request comes from no page, or from a page of this service's own origin:
    `Sec-Fetch-Site: same-origin`, or an `Origin` whose scheme, host and port are those the
    request reached (its scheme, its Host header). `Origin: null` is never this service's."""
    headers = scope.get("headers", [])
    if header(headers, b"sec-fetch-site") == "same-origin":
        return True
    if not any(name == b"origin" for name, _ in headers):
        return True
    origin = header(headers, b"origin")
    host = header(headers, b"host")
    if origin is None or host is None or origin.strip() == "null":
        return False
    reached = split_host(host)
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return False
    scheme = str(scope.get("scheme", "http")).lower()
    if reached is None or parts.hostname is None or "@" in parts.netloc:
        return False
    if parts.path or parts.query or parts.fragment:
        return False
    if parts.scheme.lower() != scheme:
        return False
    name = parts.hostname.removesuffix(".")
    default = DEFAULT_PORTS.get(scheme)
    return name == reached[0] and (port or default) == (reached[1] or default)


def _route_path(scope: Scope) -> str:
    """The request's path below the app's root path."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and (path == root or path.startswith(root + "/")):
        return path[len(root) :]
    return path


class AllowedHostsMiddleware:
    """Answers 400 to a request whose Host is not allowed, before any other check."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._allowed: tuple[Settings, HostAllowList] | None = None

    def _allow_list(self, settings: Settings) -> HostAllowList:
        if self._allowed is None or self._allowed[0] is not settings:
            self._allowed = (settings, settings.host_allow_list())
        return self._allowed[1]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        settings: Settings | None = (scope.get("state") or {}).get("settings")
        if scope["type"] not in ("http", "websocket") or settings is None:
            # Nothing configured: no lifespan, and then the key check serves nothing but
            # the open paths.
            await self.app(scope, receive, send)
            return
        allowed = self._allow_list(settings)
        host = header(scope.get("headers", []), b"host")
        reached = split_host(host) if host is not None else None
        if (
            allowed.any
            or (reached is not None and allowed.admits(reached[0]))
            or _route_path(scope) in PROBE_PATHS
        ):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        named = f"the Host {excerpt(host, _HOST_ECHO)!r}" if host is not None else "no Host"
        problem = {
            "type": problem_type("host-not-allowed"),
            "title": "Bad Request",
            "status": 400,
            "detail": f"the request names {named}, which is not one this service answers to "
            "(CHRONOQ_ALLOWED_HOSTS)",
        }
        body = json.dumps(problem).encode()
        headers = [
            (b"content-type", MEDIA_TYPE.encode()),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 400, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class RelativeSlashRedirect:
    """A router's `default`: a path that a route would take with its trailing slash added
    or removed is redirected there, as Starlette's `redirect_slashes` does, but with a
    relative Location: Starlette's names the Host the request came with."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.not_found = router.not_found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route_path = _route_path(scope)
        if scope["type"] == "http" and route_path not in ("/", ""):
            path: str = scope["path"]
            other = {**scope, "path": path.rstrip("/") if path.endswith("/") else path + "/"}
            for route in self.router.routes:
                if route.matches(other)[0] is not Match.NONE:
                    # One leading slash: `//host/...` would be another host's address.
                    location = "/" + other["path"].lstrip("/")
                    for character, escaped in (("?", "%3F"), ("#", "%23"), ("\\", "%5C")):
                        location = location.replace(character, escaped)
                    query = scope.get("query_string", b"").decode("latin-1")
                    redirect = RedirectResponse(location + (f"?{query}" if query else ""))
                    await redirect(scope, receive, send)
                    return
        await self.not_found(scope, receive, send)


def use_relative_redirects(router: Router) -> None:
    """Make `router`'s trailing-slash redirects relative."""
    router.redirect_slashes = False
    router.default = RelativeSlashRedirect(router)
