"""Request body limits, enforced while the body arrives rather than after it is buffered.

Invariant: no request body larger than `CHRONOQ_MAX_REQUEST_BYTES` is read into memory:
one that declares a larger Content-Length is refused before a byte of it is read, and a
chunked one as soon as it passes the limit (413). A body that has not all arrived within
`CHRONOQ_REQUEST_BODY_TIMEOUT` seconds of the request reaching the app (right after its
head) is refused with 408, however it trickles in, so a slow client cannot hold memory or a
connection slot for as long as it likes.

Nor can it hold many at once: at most `CHRONOQ_MAX_BODIES_PER_CLIENT` requests of one client
address (the trusted proxy's forwarded client, as `app.api.hosts.client_address` says) may
be receiving their bodies at the same time in a process; past that, a request with a body is
refused with 429 and Retry-After before a byte of its body is read, and its connection
closed, so one address cannot take every connection slot with bodies that trickle in for
the whole body deadline. A body counts from the request reaching the app until it has all
arrived (or the request ends without reading it).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.hosts import client_address
from app.api.problem_details import problem_response

# A client too slow to send its body in time is not waited for again: the connection ends
# with the answer. (After a 413 the server reads on and drops the rest, within
# CHRONOQ_REQUEST_HEAD_TIMEOUT, so that the client reads the answer rather than a reset.)
_CLOSE = {"Connection": "close"}
# When a client refused for the bodies it is sending is told to try again: its other bodies
# arrive, or run out of time, meanwhile.
BUSY_RETRY_AFTER = 1


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # Per client address: its requests whose bodies are still arriving.
        self._arriving: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        settings = scope.get("state", {}).get("settings")
        if settings is None:  # no lifespan (a bare ASGI call): nothing configured
            await self.app(scope, receive, send)
            return
        limit: int = settings.max_request_bytes
        total: float = settings.request_body_timeout
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _too_large(limit)(scope, receive, send)
            return
        counted: str | None = None  # the client whose arriving bodies this one counts in
        if _has_body(scope, declared):
            client = client_address(scope, settings) or ""
            if self._arriving[client] >= settings.max_bodies_per_client:
                await _busy(settings.max_bodies_per_client)(scope, receive, send)
                return
            self._arriving[client] += 1
            counted = client
        deadline = asyncio.get_running_loop().time() + total
        received = 0
        complete = False

        def arrived() -> None:
            nonlocal counted
            if counted is not None:
                self._arriving[counted] -= 1
                if self._arriving[counted] <= 0:
                    del self._arriving[counted]
                counted = None

        async def limited() -> Message:
            nonlocal received, complete
            if complete:
                # The body is in; what follows is the wait for a disconnect, which is not
                # the client's to hurry.
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise HTTPException(
                    408,
                    f"the request body did not arrive within {total:g} seconds "
                    "(CHRONOQ_REQUEST_BODY_TIMEOUT)",
                    headers=_CLOSE,
                ) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise HTTPException(413, _too_large_detail(limit))
                complete = not message.get("more_body", False)
            else:
                complete = True
            if complete:
                arrived()
            return message

        try:
            await self.app(scope, limited, send)
        finally:
            arrived()


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses a malformed one itself
    return None


def _has_body(scope: Scope, declared: int | None) -> bool:
    if declared is not None:
        return declared > 0
    return any(name == b"transfer-encoding" for name, _ in scope.get("headers", []))


def _busy(most: int) -> Any:
    return problem_response(
        429,
        "Too Many Requests",
        f"this client already has {most} request bodies arriving, the most it may "
        "(CHRONOQ_MAX_BODIES_PER_CLIENT); send this one once one of them is in",
        slug="too-many-bodies",
        headers={"Retry-After": str(BUSY_RETRY_AFTER), **_CLOSE},
    )


def _too_large_detail(limit: int) -> str:
    return f"the request body is larger than {limit} bytes (CHRONOQ_MAX_REQUEST_BYTES)"


def _too_large(limit: int) -> Any:
    return problem_response(413, "Payload Too Large", _too_large_detail(limit))
