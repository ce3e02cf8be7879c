"""Request body limits, enforced while the body arrives rather than after it is buffered.

Invariant: no request body larger than `CHRONOQ_MAX_REQUEST_BYTES` is read into memory:
one that declares a larger Content-Length is refused before a byte of it is read, and a
chunked one as soon as it passes the limit (413). A body that has not all arrived within
`CHRONOQ_REQUEST_BODY_TIMEOUT` seconds of the request reaching the app (right after its
head) is refused with 408, however it trickles in, so a slow client cannot hold memory or a
connection slot for as long as it likes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.problem_details import problem_response

# A client too slow to send its body in time is not waited for again: the connection ends
# with the answer. (After a 413 the server reads on and drops the rest, within
# CHRONOQ_REQUEST_HEAD_TIMEOUT, so that the client reads the answer rather than a reset.)
_CLOSE = {"Connection": "close"}


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

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
        deadline = asyncio.get_running_loop().time() + total
        received = 0
        complete = False

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
            return message

        await self.app(scope, limited, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses a malformed one itself
    return None


def _too_large_detail(limit: int) -> str:
    return f"the request body is larger than {limit} bytes (CHRONOQ_MAX_REQUEST_BYTES)"


def _too_large(limit: int) -> Any:
    return problem_response(413, "Payload Too Large", _too_large_detail(limit))
