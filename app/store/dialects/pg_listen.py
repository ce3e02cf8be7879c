"""PostgreSQL's wake-ups across replicas: one `LISTEN` connection per replica on the
installation's channel (`due_channel`), kept up by itself; polling covers any gap.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.engine import make_url

from app.store.dialects.pg_hosts import HostChooser

if TYPE_CHECKING:
    from app.store.engine.wakeups import Wakeups

log = logging.getLogger("app.store.dialects.postgresql")

RECONNECT_MIN = 0.5
RECONNECT_MAX = 10.0
PING_INTERVAL = 30.0
PING_TIMEOUT = 5.0
CONNECT_TIMEOUT = 10.0  # on each host of a multi-host URL (pg_hosts)
# The keep-alive: the server answers, and still takes writes. NOTIFYs are sent where writes
# commit; a server demoted to a standby, or fenced read-only during a failover, hears none.
_TAKES_WRITES = (
    "SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off'"
)

CHANNEL = "chronoq_due"
_MAX_CHANNEL = 63  # identifiers, channel names included, are cut at 63 bytes


def due_channel(schema: str | None) -> str:
    """The NOTIFY channel of the installation in `schema` (None: the default one)."""
    if schema is None:
        return CHANNEL
    channel = f"{CHANNEL}_{schema}"
    if len(channel) <= _MAX_CHANNEL:
        return channel
    digest = hashlib.blake2b(schema.encode(), digest_size=8).hexdigest()
    return f"{channel[: _MAX_CHANNEL - len(digest) - 1]}_{digest}"


class PgListener:
    """One `LISTEN` connection per replica, re-established whenever it is lost or its server
    no longer takes writes; polling covers the gap while it is down."""

    def __init__(self, url: str, wakeups: Wakeups, *, schema: str | None = None) -> None:
        parsed = make_url(url)
        self.channel = due_channel(schema)
        # What the engine's connections are given, so that a multi-host URL's hosts and its
        # target_session_attrs bring this connection to the primary too.
        _, args = asyncpg_dialect().create_connect_args(parsed)  # type: ignore[no-untyped-call]
        self._connect_args: dict[str, Any] = dict(args)
        hosts: Any = self._connect_args.get("host") or "localhost"
        ports: Any = self._connect_args.get("port") or 5432
        if isinstance(hosts, list):
            self._host = ",".join(f"{h}:{p}" for h, p in zip(hosts, ports, strict=True))
        else:
            self._host = f"{hosts}:{ports}"
        self._hosts = HostChooser(CONNECT_TIMEOUT)
        self._wakeups = wakeups
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        self.connections = 0  # how many times it (re)connected, for tests and metrics

    def start(self) -> None:
        self._task = asyncio.create_task(self._stay_listening(), name="chronoq-listen")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task

    def _heard(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        try:
            seconds = float(payload)
        except ValueError:
            return
        self._wakeups.due_in(seconds)

    async def _stay_listening(self) -> None:
        delay = RECONNECT_MIN
        while True:
            try:
                conn = await self._hosts.connect(
                    **self._connect_args,
                    server_settings={"application_name": "chronoq-listen"},
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "cannot LISTEN on %s (%s); polling meanwhile, retrying in %.1fs",
                    self._host,
                    type(exc).__name__,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX)
                continue
            lost = asyncio.Event()
            conn.add_termination_listener(lambda _conn, lost=lost: lost.set())
            try:
                await conn.add_listener(self.channel, self._heard)
                delay = RECONNECT_MIN
                self.connections += 1
                self.connected.set()
                # Anything announced while no connection listened is unknown: wake the
                # loop so it looks for itself.
                self._wakeups.due_in(0.0)
                demoted = False
                while not lost.is_set():
                    # A connection cut without a FIN (a partition) shows only when used.
                    with suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), PING_INTERVAL)
                        break
                    if not await conn.fetchval(_TAKES_WRITES, timeout=PING_TIMEOUT):
                        demoted = True
                        break
                if demoted:
                    log.warning(
                        "the server of the LISTEN connection (%s) no longer takes writes; "
                        "reconnecting",
                        self._host,
                    )
                else:
                    log.warning("lost the LISTEN connection to %s; reconnecting", self._host)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("LISTEN on %s failed (%s)", self._host, type(exc).__name__)
            finally:
                self.connected.clear()
                with suppress(Exception):
                    await asyncio.wait_for(conn.close(), timeout=2)
