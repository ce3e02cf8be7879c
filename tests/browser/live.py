"""The app served for real over HTTP, for a browser: uvicorn on 127.0.0.1 in a thread;
and the log of what a browser's pages asked for.

The server runs on an event loop of its own in its own thread, so it answers while the test's
loop waits on the browser, and it starts in a fraction of a second (no interpreter to start,
unlike tests/e2e's subprocesses). Its socket is bound before the server starts, so the port
is never raced for.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import uvicorn
from playwright.async_api import BrowserContext, ConsoleMessage

from app.main import create_app
from app.service.addresses import HostResolver
from app.settings import Settings

HOST = "127.0.0.1"
# The pages may also use these schemes, which never reach the network.
LOCAL_SCHEMES = frozenset({"data", "blob", "about"})


class LiveApp:
    """`create_app(settings)` served by uvicorn (lifespan on, access log off) on a free port
    of 127.0.0.1 until `stop()`. `url("/docs")` is the address of a path."""

    def __init__(self, settings: Settings, *, resolver: HostResolver | None = None) -> None:
        self.settings = settings
        config = uvicorn.Config(
            create_app(settings, resolver=resolver),
            lifespan="on",
            log_config=None,
            access_log=False,
            loop="asyncio",
            timeout_graceful_shutdown=5,
        )
        self._server = uvicorn.Server(config)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind((HOST, 0))
        self.port: int = self._socket.getsockname()[1]
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def url(self, path: str = "/") -> str:
        return self.base_url + path

    def start(self, timeout: float = 30.0) -> None:
        """Until the lifespan has run and the socket accepts requests."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the app stopped while starting (its lifespan failed?)")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the app did not start within {timeout:g}s")
            time.sleep(0.01)

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful shutdown (lifespan exit included), then the socket is closed."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._socket.close()
        if self._thread.is_alive():
            raise RuntimeError(f"the app did not stop within {timeout:g}s")

    def __enter__(self) -> LiveApp:
        self.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop()


def off_host(urls: list[str], host: str = HOST) -> list[str]:
    """The URLs that would leave `host`: any other host, or a scheme that is not local."""
    left = []
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme in LOCAL_SCHEMES:
            continue
        if parts.scheme not in ("http", "https", "ws", "wss") or parts.hostname != host:
            left.append(url)
    return left


@dataclass
class PageLog:
    """What the pages of the watched browser contexts asked for and what went wrong in them:
    `requests`, every URL requested in order (sub-resources, redirects, fetches, and those a
    page's policy blocked alike); `errors`, uncaught exceptions and console errors."""

    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def off_host(self) -> list[str]:
        """The requests that went anywhere but 127.0.0.1."""
        return off_host(self.requests)

    def watch(self, context: BrowserContext) -> None:
        """Log every page of `context`, popups included."""
        context.on("request", lambda request: self.requests.append(request.url))
        context.on("weberror", lambda error: self.errors.append(f"uncaught: {error.error}"))
        context.on("console", self._console)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"console: {message.text}")
