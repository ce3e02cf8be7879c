"""A webhook receiver on 127.0.0.1 for tests and benchmarks: records requests, scripted replies."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.time() on arrival
    query: str = ""  # the raw query string, without its "?"

    @property
    def occurrence_id(self) -> str:
        return self.headers["X-Occurrence-Id"]


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    body: str = ""


class Receiver:
    """Serve on a free port; `script(path, replies...)` queues replies, then 200 for the rest."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        # Every request as it arrives, before its reply's delay (`requests`: once answered).
        self.arrivals: list[Received] = []
        self._scripts: dict[str, deque[Reply]] = defaultdict(deque)
        self._defaults: dict[str, Reply] = {}
        self._arrived = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._transports: set[asyncio.Transport] = set()
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str = "/hook") -> str:
        return self.base_url + path

    def script(self, path: str, *replies: Reply) -> None:
        self._scripts[path].extend(replies)

    def always(self, path: str, reply: Reply) -> None:
        self._defaults[path] = reply

    async def _handle(self, request: web.Request) -> web.Response:
        if request.transport is not None:
            self._transports.add(request.transport)
        body = await request.read()
        received = Received(
            request.method,
            request.path,
            dict(request.headers),
            body,
            time.time(),
            request.query_string,
        )
        async with self._arrived:
            self.arrivals.append(received)
            self._arrived.notify_all()
        queue = self._scripts.get(request.path)
        reply = queue.popleft() if queue else self._defaults.get(request.path, Reply())
        if reply.delay:
            await asyncio.sleep(reply.delay)
        async with self._arrived:
            self.requests.append(received)
            self._arrived.notify_all()
        return web.Response(status=reply.status, headers=reply.headers, text=reply.body)

    def on(self, path: str) -> list[Received]:
        return [r for r in self.requests if r.path == path]

    async def wait_for(
        self, count: int, path: str | None = None, timeout: float = 10.0
    ) -> list[Received]:
        """Wait until `count` requests (to `path`, if given) have arrived."""

        def matching() -> list[Received]:
            return self.requests if path is None else self.on(path)

        async with asyncio.timeout(timeout), self._arrived:
            await self._arrived.wait_for(lambda: len(matching()) >= count)
        return matching()

    async def wait_for_arrivals(self, count: int, timeout: float = 10.0) -> list[Received]:
        """Wait until `count` requests have arrived, answered or still held by a delay."""
        async with asyncio.timeout(timeout), self._arrived:
            await self._arrived.wait_for(lambda: len(self.arrivals) >= count)
        return self.arrivals

    async def __aenter__(self) -> Receiver:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server: Any = site._server
        self.port = server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        # A connection whose request was cut off mid-reply can outlive the cleanup; close
        # it here rather than leave the socket to the garbage collector.
        for transport in self._transports:
            if not transport.is_closing():
                transport.abort()
        self._transports.clear()
        await asyncio.sleep(0)
