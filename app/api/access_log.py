"""The access log: one line per HTTP request, written when its answer has been sent.

Fields: `method`, `path` (as the client sent it, percent-encoded, never the query, whose
values may be credentials), `status`, `duration_ms` (to the answer's last byte), `client`
(the peer's address; behind a proxy that CHRONOQ_FORWARDED_ALLOW_IPS trusts, the client that
proxy names last in X-Forwarded-For),
`request_id` (the request's `X-Request-Id`, as a proxy sets it; None when absent or not one
printable word of at most 128 characters) and `api_key` (the name of the key the request was
authenticated with, never the key; None without one). Probes (/healthz, /readyz, /metrics)
are logged at DEBUG, every other request at INFO.

Two pure ASGI middlewares: `AccessLogMiddleware`, outermost, so that requests refused before
routing (unknown host, no key) are logged too; `AccessPrincipal`, inside the key check, which
hands it the key's name. When the `app.access` logger is off at a request's level, nothing
is measured or built.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.hosts import client_address
from app.telemetry.logs import ACCESS_LOGGER

log = logging.getLogger(ACCESS_LOGGER)

PROBES = frozenset({"/healthz", "/readyz", "/metrics"})
# How much of a path a line repeats: a path is bounded by the request head's limit, a line
# should be far shorter.
MAX_PATH = 512
_REQUEST_ID = re.compile(r"[\x21-\x7e]{1,128}")
# Where the outer middleware's entry travels with the request (the key check hands a copy of
# the scope on, with every key of the original).
_ENTRY = "chronoq.access"


class _Entry:
    __slots__ = ("api_key",)

    def __init__(self) -> None:
        self.api_key: str | None = None


def _request_id(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name == b"x-request-id":
            text = value.decode("latin-1")
            return text if _REQUEST_ID.fullmatch(text) else None
    return None


def _path(scope: Scope) -> str:
    raw: bytes | None = scope.get("raw_path")
    # raw_path is the target as sent without its query; uvicorn gives it, other servers may
    # not, and then the decoded path stands in (its control characters are escaped by the
    # log's formatter).
    path = raw.decode("latin-1") if raw is not None else str(scope.get("path", ""))
    return path if len(path) <= MAX_PATH else path[:MAX_PATH] + "..."


class AccessLogMiddleware:
    """Logs every HTTP request once its answer is sent (or it failed: status 500)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        level = logging.DEBUG if path in PROBES else logging.INFO
        if not log.isEnabledFor(level):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        entry = _Entry()
        scope[_ENTRY] = entry

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            fields: dict[str, Any] = {
                "method": scope["method"],
                "path": _path(scope),
                "status": status,
                "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                "client": client_address(scope, scope.get("state", {}).get("settings")),
                "request_id": _request_id(scope["headers"]),
                "api_key": entry.api_key,
            }
            log.log(level, "request", extra=fields)


class AccessPrincipal:
    """Inside the key check: tells the access log which key's name the request carries."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        entry: _Entry | None = scope.get(_ENTRY)
        state = scope.get("state")
        if entry is not None and state is not None:
            entry.api_key = state.get("principal")
        await self.app(scope, receive, send)
