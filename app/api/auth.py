"""API keys: who may call which route, decided once for every route of the app.

A pure ASGI middleware, so a route added later is covered without opting in. When no key is
configured the API is open; otherwise every path but the open ones (health, metrics, the
docs and their assets) needs a key, and a read-only key may only read. The key's name
reaches the routes as the request's principal; the key itself is never logged, stored or
echoed, and is compared in constant time against every configured key.

A browser sends HTTP Basic credentials again by itself, whichever page makes the request, and
needs none when no key is set: a change made that way must come from this service's own
pages or from no page at all (no Origin), so another site cannot make it through an
operator's browser (CSRF). A Bearer key is only ever sent by a client that holds it.
"""

from __future__ import annotations

import base64
import binascii
import copy
import dataclasses
import hashlib
import hmac
import html
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from fastapi import Depends, Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.hosts import PROXY_REMEDY, check_origin, console_refusal
from app.api.problem_details import MEDIA_TYPE, problem_type
from app.domain.errors import StoreUnavailableError
from app.domain.tenant_keys import KeyRole, TenantKey, actor_of
from app.domain.tenants import TENANT_HEADER, TENANT_PATTERN
from app.settings.api_keys import ApiKey

# One WWW-Authenticate header per scheme: browsers read only the first challenge of a
# header, so Basic in second place of a shared one never made them ask for a key.
CHALLENGES = ('Basic realm="chronoq"', 'Bearer realm="chronoq"')

# Paths that never need a key: probes, metrics, and the documentation with its assets.
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/docs", "/redoc", "/openapi.json"})
OPEN_PREFIXES = ("/docs/", "/redoc/", "/static/")
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Where the console's pages and forms are.
CONSOLE_PATH = "/ui"


def cross_origin(compared: str) -> str:
    """The detail of a change refused as coming from another site's page."""
    return (
        f"this change comes from a page of another site: {compared}. With HTTP Basic, or "
        "with no key set, a change must come from this service's own pages; if the page is "
        f"this service's, seen through a proxy: {PROXY_REMEDY}. A client that is not a "
        "browser sends no Origin, or uses Authorization: Bearer"
    )


def is_open(path: str) -> bool:
    if path in OPEN_PATHS:
        return True
    # A dot segment never reaches a route, but it is not an asset either.
    return path.startswith(OPEN_PREFIXES) and "/." not in path and "//" not in path


@dataclass(frozen=True)
class _Entry:
    name: str
    digest: bytes
    read_only: bool
    # A tenant key's tenant (None: an operator key, which acts in any tenant).
    tenant: str | None = None


class TenantKeys(Protocol):
    async def find(self, secret: str) -> TenantKey | None: ...


# How long a client waits before asking again when the database could not check its key.
RETRY_SECONDS = 2


async def _tenant_key(state: dict[str, Any], secret: str) -> _Entry | None:
    """The tenant key `secret` is, as an entry of the ring: named by its tenant and name."""
    keys: TenantKeys | None = state.get("tenant_keys")
    found = None if keys is None else await keys.find(secret)
    if found is None:
        return None
    return _Entry(
        actor_of(found.tenant, found.name),
        b"",
        read_only=found.role is KeyRole.READ,
        tenant=found.tenant,
    )


class KeyRing:
    """The configured keys, as digests: equal lengths, so comparing leaks no length."""

    def __init__(self, keys: Sequence[ApiKey]) -> None:
        self._entries = tuple(
            _Entry(key.name, hashlib.sha256(key.key.encode()).digest(), key.read_only)
            for key in keys
        )

    def __bool__(self) -> bool:
        return bool(self._entries)

    def find(self, candidate: str) -> _Entry | None:
        """The entry whose key is `candidate`. Every key is compared, whichever matches, so
        the time taken says nothing about which one did."""
        digest = hashlib.sha256(candidate.encode("utf-8", "surrogateescape")).digest()
        found: _Entry | None = None
        for entry in self._entries:
            if hmac.compare_digest(digest, entry.digest) and found is None:
                found = entry
        return found


@dataclass(frozen=True)
class Credentials:
    """What an Authorization header presents: the key, and whether it came as HTTP Basic,
    which a browser that once logged in sends again by itself, whichever page asks."""

    key: str = dataclasses.field(repr=False)
    basic: bool


def presented_credentials(headers: Sequence[tuple[bytes, bytes]]) -> Credentials | None:
    """The key an Authorization header carries (Bearer, or Basic with the key as the
    password and any user name); None when absent, repeated or malformed."""
    values = [value for name, value in headers if name.lower() == b"authorization"]
    if len(values) != 1:
        return None
    try:
        text = values[0].decode("ascii")
    except UnicodeDecodeError:
        return None
    scheme, _, credentials = text.strip().partition(" ")
    credentials = credentials.strip()
    if not credentials:
        return None
    if scheme.lower() == "bearer":
        return Credentials(credentials, basic=False)
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        _, colon, password = decoded.partition(":")
        return Credentials(password, basic=True) if colon and password else None
    return None


def presented_key(headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    """The key of `presented_credentials`, however it was sent."""
    credentials = presented_credentials(headers)
    return credentials.key if credentials is not None else None


async def _answer(
    send: Send, status: int, slug: str, title: str, detail: str, headers: list[tuple[bytes, bytes]]
) -> None:
    problem = {"type": problem_type(slug), "title": title, "status": status, "detail": detail}
    body = json.dumps(problem).encode()
    start = [
        (b"content-type", MEDIA_TYPE.encode()),
        (b"content-length", str(len(body)).encode()),
        *headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})


def _is_console(scope: Scope) -> bool:
    path: str = scope.get("path", "")
    return path == CONSOLE_PATH or path.startswith(CONSOLE_PATH + "/")


async def _answer_page(scope: Scope, send: Send, status: int, detail: str) -> None:
    """A refusal of one of the console's forms, as the page a browser shows: the text and a
    way back, nothing loaded from anywhere."""
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Refused · Chronoq'
        f'</title></head><body><h1>Refused</h1><p role="alert">{html.escape(detail)}</p>'
        f'<p><a href="{html.escape(scope.get("root_path", ""))}{CONSOLE_PATH}/schedules">'
        "Schedules</a></p></body></html>"
    ).encode()
    headers = [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
        (b"x-content-type-options", b"nosniff"),
        (b"cache-control", b"no-store"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class ApiKeyMiddleware:
    """Refuses requests without a valid key (401), changes by read-only keys (403) and
    changes from another site's page with credentials a browser sends by itself (403);
    passes the key's name on as the request state's `principal` (None: no keys set)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        state: dict[str, Any] = dict(scope.get("state") or {})
        path = scope["path"]
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        ring: KeyRing | None = state.get("keys")
        if ring is None and not is_open(path):
            # Only the lifespan builds the key ring: without it, nothing but the open
            # paths is served.
            await self._refuse(
                scope, send, 503, "unavailable", "Service unavailable", "the service is starting"
            )
            return
        principal: str | None = None
        # Credentials a browser sends by itself: HTTP Basic, or none at all when no key is
        # needed. A change made with them must come from this service's own pages (CSRF).
        replayable = not ring
        if ring and not is_open(path):
            presented = presented_credentials(scope.get("headers", []))
            entry = ring.find(presented.key) if presented is not None else None
            if entry is None and presented is not None:
                # Not an operator key: perhaps a tenant's, which acts in its tenant only.
                try:
                    entry = await _tenant_key(state, presented.key)
                except StoreUnavailableError:
                    await self._refuse(
                        scope,
                        send,
                        503,
                        "unavailable",
                        "Service unavailable",
                        f"the database cannot be reached; retry in {RETRY_SECONDS} seconds",
                        [(b"retry-after", str(RETRY_SECONDS).encode())],
                    )
                    return
            if entry is None:
                detail = (
                    "this route needs an API key: Authorization: Bearer <key>"
                    if presented is None
                    else "the API key is not one this service knows"
                )
                await self._refuse(
                    scope,
                    send,
                    401,
                    "unauthorized",
                    "Unauthorized",
                    detail,
                    [(b"www-authenticate", challenge.encode()) for challenge in CHALLENGES],
                )
                return
            if entry.read_only and scope.get("method", "GET") not in READ_METHODS:
                await self._refuse(
                    scope,
                    send,
                    403,
                    "forbidden",
                    "Forbidden",
                    f"the API key {entry.name!r} is read-only",
                )
                return
            principal = entry.name
            state["read_only"] = entry.read_only
            if entry.tenant is not None:
                state["key_tenant"] = entry.tenant
            replayable = presented is not None and presented.basic
        method = scope.get("method", "GET")
        if scope["type"] == "http" and replayable and method not in READ_METHODS:
            origin = check_origin(scope)
            if not origin.same:
                if _is_console(scope):
                    # A browser posted one of the console's forms: it shows a page, not JSON.
                    await _answer_page(scope, send, 403, console_refusal(origin.compared()))
                    return
                detail = cross_origin(origin.compared())
                await self._refuse(scope, send, 403, "cross-origin", "Forbidden", detail)
                return
        state["principal"] = principal
        await self.app({**scope, "state": state}, receive, send)

    @staticmethod
    async def _refuse(
        scope: Scope,
        send: Send,
        status: int,
        slug: str,
        title: str,
        detail: str,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await _answer(send, status, slug, title, detail, headers or [])


SECURITY_SCHEMES = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key (CHRONOQ_API_KEYS): `Authorization: Bearer <key>`",
    },
    "basic": {
        "type": "http",
        "scheme": "basic",
        "description": "The API key as the password, any user name (for a browser)",
    },
}
_PROBLEM = {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}
_UNAUTHORIZED = {
    "description": "No API key, or one this service does not know (only when keys are set)",
    "headers": {
        "WWW-Authenticate": {
            "description": "The schemes to authenticate with",
            "required": True,
            "schema": {"type": "string"},
        }
    },
    "content": _PROBLEM,
}
_FORBIDDEN = {
    "description": "The API key is read-only; or the change comes from a page of another "
    "site (an Origin that is not this service's, with HTTP Basic or with no key set)",
    "content": _PROBLEM,
}


_TENANT_PARAMETER = {
    "name": TENANT_HEADER,
    "in": "header",
    "required": False,
    "description": "The tenant to act in (default: `default`); one that does not exist is a 404",
    "schema": {"type": "string", "pattern": f"^{TENANT_PATTERN.pattern}$"},
}
_NOT_FOUND = {
    "description": "Not found: the resource, or the tenant `Chronoq-Tenant` names, does not "
    "exist (another tenant's resource is one that does not exist)",
    "content": _PROBLEM,
}


def document(openapi: dict[str, Any]) -> dict[str, Any]:
    """Declare the key schemes, and on every operation that is not open that it needs a
    key (401) and, for a change, a key that is not read-only (403); that it acts in the
    tenant `Chronoq-Tenant` names, which is a 404 when it does not exist."""
    components = openapi.setdefault("components", {})
    components["securitySchemes"] = copy.deepcopy(SECURITY_SCHEMES)
    for path, operations in openapi.get("paths", {}).items():
        if is_open(path):
            continue
        for method, operation in operations.items():
            operation["security"] = [{"bearer": []}, {"basic": []}]
            declared = operation.setdefault("responses", {})
            declared.setdefault("401", copy.deepcopy(_UNAUTHORIZED))
            declared.setdefault("404", copy.deepcopy(_NOT_FOUND))
            operation.setdefault("parameters", []).append(copy.deepcopy(_TENANT_PARAMETER))
            if method.upper() not in READ_METHODS:
                declared.setdefault("403", copy.deepcopy(_FORBIDDEN))
    return openapi


def _principal(request: Request) -> str | None:
    principal: str | None = request.state._state.get("principal")
    return principal


# The name of the key the request came with; None when the API is open (no keys set).
PrincipalDep = Annotated[str | None, Depends(_principal)]
