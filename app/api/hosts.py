"""Where a request says it is going: its Host, checked against the allow list and never
repeated back in a redirect, and whether a page's Origin is this service's own.

Invariant: no request whose Host is not allowed (CHRONOQ_ALLOWED_HOSTS) reaches a route but
the probes, so a website that rebinds its own name onto a local address cannot drive an open
instance: its requests name its own host. And no answer repeats the Host: redirects are
relative.

A browser names the page a request comes from in `Origin` and cannot forge it, nor the
`Sec-Fetch-*` headers; a client that is not a browser sends neither, or whatever it likes,
but then it has no one else's credentials to replay.

Behind a proxy, the origin the browser reached is the proxy's: the proxy passes the Host the
browser used (port included), or says it in X-Forwarded-Host and X-Forwarded-Proto, which
are believed from the peers CHRONOQ_FORWARDED_ALLOW_IPS names only, and for a host the
allowed hosts admit only: a forwarded header never widens what the Host check admits.
CHRONOQ_PUBLIC_ORIGIN names one more origin, the address operators open.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.responses import RedirectResponse
from starlette.routing import Match, Router
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.problem_details import MEDIA_TYPE, excerpt, problem_type
from app.settings import Settings
from app.settings.addresses import HostAllowList
from app.settings.web_origins import DEFAULT_PORTS, WebOrigin, parse_origin, split_host

# Answered whatever the Host: an orchestrator's probes name the address they dial (a pod's
# IP), and these say nothing but whether the replica is up and ready.
PROBE_PATHS = frozenset({"/healthz", "/readyz"})
# How much of a refused Host the answer repeats.
_HOST_ECHO = 100

# How much of an origin a refusal repeats.
_ORIGIN_ECHO = 100
# What to do when this service's own pages are refused behind a proxy (a refusal says it
# after what it compared).
PROXY_REMEDY = (
    "have the proxy pass the Host the browser used, port included (nginx: "
    "proxy_set_header Host $http_host), or set CHRONOQ_PUBLIC_ORIGIN to the address the "
    "console is opened at"
)


def console_refusal(compared: str) -> str:
    """What the console says of a form posted from a page at another address."""
    # Reloading never helps here: the same page posts from the same address.
    return (
        f"This form did not come from this console's address: {compared}. Reloading will "
        f"not help. If you opened the console through a proxy, {PROXY_REMEDY}."
    )


def header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The one value of header `name` (lower case), as Latin-1 text; None when absent or
    repeated."""
    values = [value for key, value in headers if key == name]
    return values[0].decode("latin-1") if len(values) == 1 else None


def _nearest(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The last entry of a forwarded header: the one the proxy next to this service added."""
    value = header(headers, name)
    return value.rsplit(",", 1)[-1].strip() if value is not None else None


def own_origin(scope: Scope, settings: Settings | None) -> WebOrigin | None:
    """The origin the request reached, as the browser sees it: its scheme and Host, or,
    from a peer CHRONOQ_FORWARDED_ALLOW_IPS trusts, its X-Forwarded-Proto and a
    X-Forwarded-Host the allowed hosts admit (either may be absent). None: no Host."""
    headers = scope.get("headers", [])
    scheme = {"ws": "http", "wss": "https"}.get(scope.get("scheme", "http"), scope.get("scheme"))
    host = header(headers, b"host")
    reached = split_host(host) if host is not None else None
    client = scope.get("client")
    if settings is not None and client and settings.proxy_allow_list().admits(str(client[0])):
        proto = _nearest(headers, b"x-forwarded-proto")
        if proto is not None and proto.lower() in DEFAULT_PORTS:
            scheme = proto.lower()
        forwarded = _nearest(headers, b"x-forwarded-host")
        named = split_host(forwarded) if forwarded else None
        if named is not None and settings.host_allow_list().admits(named[0]):
            reached = named
    if reached is None or scheme not in DEFAULT_PORTS:
        return None
    return WebOrigin.of(str(scheme), *reached)


def client_address(scope: Scope, settings: Settings | None) -> str | None:
    """Who sent the request: the peer's address, or, from a peer CHRONOQ_FORWARDED_ALLOW_IPS
    trusts, the address its X-Forwarded-For names last (the client the proxy next to this
    service saw), when that is an IP address."""
    client = scope.get("client")
    peer = str(client[0]) if client else None
    forwarded = _nearest(scope.get("headers", []), b"x-forwarded-for")
    if forwarded is None or peer is None or settings is None:
        return peer
    if not settings.proxy_allow_list().admits(peer):
        return peer
    try:
        return str(ipaddress.ip_address(forwarded))
    except ValueError:
        return peer


@dataclass(frozen=True, slots=True)
class OriginCheck:
    """Whether a request comes from no page or from a page of this service's own origin,
    and what was compared: `seen`, what the browser sent (None: no Origin or Referer, or
    `Sec-Fetch-Site: same-origin`); `expected`, the origins that pass, CHRONOQ_PUBLIC_ORIGIN
    last when it is set."""

    same: bool
    seen: str | None
    expected: tuple[WebOrigin, ...]
    public: WebOrigin | None = None

    def compared(self) -> str:
        """What was compared, in words: bounded, and repeating nothing but origins."""
        seen = self.seen if self.seen is not None else "no Origin"
        if not self.expected:
            return f"the browser sent {seen}, and this service's own origin is unknown (no Host)"
        named = [
            repr(excerpt(str(origin), _ORIGIN_ECHO))
            + (" (CHRONOQ_PUBLIC_ORIGIN)" if origin == self.public else "")
            for origin in self.expected
        ]
        return f"the browser sent {seen}, and this service's origin is {' or '.join(named)}"


def check_origin(scope: Scope) -> OriginCheck:
    """Whether the request comes from no page (neither Origin nor Referer), or from a page
    of this service's own origin: `Sec-Fetch-Site: same-origin`, or an Origin (without one,
    a Referer's origin) equal to the request's own (`own_origin`) or to
    CHRONOQ_PUBLIC_ORIGIN. `Origin: null` is never this service's. The one check of both
    the API (HTTP Basic changes, app.api.auth) and the console's forms."""
    headers = scope.get("headers", [])
    settings: Settings | None = (scope.get("state") or {}).get("settings")
    own = own_origin(scope, settings)
    public = settings.public_web_origin() if settings is not None else None
    expected = tuple(dict.fromkeys(o for o in (own, public) if o is not None))

    def verdict(same: bool, seen: str | None) -> OriginCheck:
        return OriginCheck(same, seen, expected, public)

    if header(headers, b"sec-fetch-site") == "same-origin":
        return verdict(True, None)
    names = {name for name, _ in headers}
    what = "Origin" if b"origin" in names else "Referer" if b"referer" in names else None
    if what is None:
        return verdict(True, None)
    text = header(headers, what.lower().encode())
    if text is None:
        return verdict(False, f"several {what} headers")
    if what == "Referer":
        # Only its origin is compared or repeated: a path or query is nobody else's business.
        origin = parse_origin(_origin_part(text) or "")
        if origin is None:
            return verdict(False, "a Referer that names no origin")
        return verdict(
            origin in expected, f"the Referer origin {excerpt(str(origin), _ORIGIN_ECHO)!r}"
        )
    origin = parse_origin(text)
    if origin is None:
        return verdict(False, f"Origin {excerpt(text.strip(), _ORIGIN_ECHO)!r}")
    return verdict(origin in expected, f"Origin {excerpt(str(origin), _ORIGIN_ECHO)!r}")


def _origin_part(url: str) -> str | None:
    """`scheme://host:port` of an absolute URL; None when it has none."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else None


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
