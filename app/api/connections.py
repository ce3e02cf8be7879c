"""The HTTP connections of a replica: how many it holds, and how long one may take to ask.

Invariant: a replica holds at most CHRONOQ_MAX_CONNECTIONS client connections, and none of
them waits longer than CHRONOQ_REQUEST_HEAD_TIMEOUT for a complete request head, whether it
is new, between two requests of a keep-alive connection (from the first byte of the next
one), or still sending the rest of a body nobody reads; bytes that trickle in do not reset
the clock. So a client without a key cannot hold the descriptors that the delivery loop and
the database pools need, nor a slot for as long as it likes.

At the cap, a new connection takes the place of the one that has waited longest for a
request head (an idle or slow client, closed to make room), so a prompt request such as a
probe's is still served while idle sockets fill the cap; when every connection is busy with
a request, the new one is closed at once. `chronoq serve` runs uvicorn with this protocol
(`GuardedHttpToolsProtocol`, by class: `--processes N` replicas import it by path), and
checks before it starts that the cap leaves room under the process's descriptor limit.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from app.settings import Settings, SettingsError
from app.telemetry import api_metrics

try:
    import resource
except ImportError:  # pragma: no cover - not a POSIX system
    resource = None  # type: ignore[assignment]

_DEFAULTS = Settings.model_fields

# Descriptors a replica needs beside its client connections. The database pools: the API's
# 10 (and 10 more at peaks), the loop's 4 (and 4), PostgreSQL's LISTEN connection, and the
# broker's. Everything else: the listening socket, the event loop's own, logs, SQLite's
# files, DNS lookups, and the connections accepted in one burst beyond the cap before they
# are closed.
DATABASE_DESCRIPTORS = 32
OTHER_DESCRIPTORS = 256


@dataclass(frozen=True)
class DescriptorBudget:
    """How many file descriptors a replica may need, by use."""

    connections: int
    deliveries: int
    database: int = DATABASE_DESCRIPTORS
    other: int = OTHER_DESCRIPTORS

    @property
    def reserve(self) -> int:
        """What the replica needs beside its client connections."""
        return self.deliveries + self.database + self.other

    @property
    def total(self) -> int:
        return self.connections + self.reserve


def descriptor_budget(settings: Settings) -> DescriptorBudget:
    # A webhook delivery holds one socket while it runs (the client's pool holds at most
    # CHRONOQ_CONCURRENCY).
    return DescriptorBudget(connections=settings.max_connections, deliveries=settings.concurrency)


def _raise_open_files_limit() -> tuple[int, int] | None:
    """Raise the soft limit on open files to the hard limit, or as near as the system lets
    (macOS refuses an unlimited soft limit); the limits then, None where there are none."""
    if resource is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    for wanted in (hard, 1 << 20, 1 << 16, 10240):
        if wanted == unlimited or (hard != unlimited and wanted > hard) or wanted <= soft:
            continue
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            continue
        soft = wanted
        break
    return soft, hard


# The least cap a replica lowers its default to by itself on a tight descriptor limit.
MIN_DEFAULT_CONNECTIONS = 64


def ensure_descriptors(settings: Settings) -> int | None:
    """Raise this process's open-files limit as far as it goes (the replica processes of
    `--processes N` inherit it). When the cap would leave too few descriptors for the
    delivery loop and the database pools: a cap left at its default is lowered to what fits
    (returned, for the caller to apply and say), so that `make run` works under a tight
    `ulimit -n`; one the operator set is refused, naming CHRONOQ_MAX_CONNECTIONS."""
    limits = _raise_open_files_limit()
    if limits is None:
        return None
    soft, hard = limits
    budget = descriptor_budget(settings)
    if soft == resource.RLIM_INFINITY or budget.total <= soft:
        return None
    room = soft - budget.reserve
    if "max_connections" not in settings.model_fields_set and room >= MIN_DEFAULT_CONNECTIONS:
        return room
    fix = (
        f"lower CHRONOQ_MAX_CONNECTIONS to at most {room}, or raise the limit"
        if room >= 1
        else "raise the limit"
    )
    shown_hard = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    raise SettingsError(
        f"CHRONOQ_MAX_CONNECTIONS={settings.max_connections} leaves too few file descriptors: "
        f"a replica may need {budget.total} ({budget.connections} client connections, "
        f"{budget.deliveries} deliveries (CHRONOQ_CONCURRENCY), {budget.database} for the "
        f"database pools and {budget.other} for the rest) and this process may open {soft} "
        f"(ulimit -n; hard limit {shown_hard}): {fix}"
    )


class _Waiting:
    """The connections of one server waiting for a request head, longest waiting first."""

    def __init__(self) -> None:
        self._order: dict[GuardedHttpToolsProtocol, None] = {}

    def add(self, connection: GuardedHttpToolsProtocol) -> None:
        self._order.pop(connection, None)
        self._order[connection] = None

    def discard(self, connection: GuardedHttpToolsProtocol) -> None:
        self._order.pop(connection, None)

    def pop_oldest(self) -> GuardedHttpToolsProtocol | None:
        for connection in self._order:
            del self._order[connection]
            return connection
        return None


# One per server (a process runs one; tests may run several).
_WAITING: weakref.WeakKeyDictionary[ServerState, _Waiting] = weakref.WeakKeyDictionary()


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a connection cap and a request-head timeout, read
    from the settings the app's lifespan built (the server's lifespan state)."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        settings: Settings | None = app_state.get("settings")
        self._max_connections: int = (
            settings.max_connections
            if settings is not None
            else _DEFAULTS["max_connections"].default
        )
        self._head_timeout: float = (
            settings.request_head_timeout
            if settings is not None
            else _DEFAULTS["request_head_timeout"].default
        )
        self._waiting_list = _WAITING.setdefault(server_state, _Waiting())
        self._waiting = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._refused = False

    def connection_made(  # type: ignore[override]
        self, transport: asyncio.Transport
    ) -> None:
        if len(self.connections) >= self._max_connections:
            longest = self._waiting_list.pop_oldest()
            if longest is None:
                # Every connection is busy with a request: this one is not even read.
                self._refused = True
                transport.abort()
                api_metrics.HTTP_CONNECTIONS_CLOSED.labels("over_cap").inc()
                return
            longest.close_waiting("evicted")
        super().connection_made(transport)
        api_metrics.HTTP_CONNECTIONS.inc()
        self._start_waiting(timed=True)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        self._stop_waiting()
        api_metrics.HTTP_CONNECTIONS.dec()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # A head has begun (or the rest of a body nobody reads is still coming): from now
        # on the clock runs, whatever trickles in.
        if self._waiting and self._head_timer is None:
            self._arm_head_timer()
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._stop_waiting()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        idle = not self.pipeline
        super().on_response_complete()
        if idle and not self.transport.is_closing():
            # Waiting for the next request; its clock starts with its first byte, unless
            # this request's body is still coming in.
            self._start_waiting(timed=self.cycle is not None and self.cycle.more_body)

    def close_waiting(self, reason: str) -> None:
        """Close this connection, which waits for a request head (`reason` is counted)."""
        self._stop_waiting()
        if not self.transport.is_closing():
            api_metrics.HTTP_CONNECTIONS_CLOSED.labels(reason).inc()
            self.transport.close()

    def _start_waiting(self, *, timed: bool) -> None:
        self._waiting = True
        self._waiting_list.add(self)
        if timed and self._head_timer is None:
            self._arm_head_timer()

    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(
            self._head_timeout, self.close_waiting, "head_timeout"
        )

    def _stop_waiting(self) -> None:
        self._waiting = False
        self._waiting_list.discard(self)
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
