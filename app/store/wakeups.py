"""Wake-ups: an idle delivery loop sleeps until the earliest instant it knows of, and is
woken early when something becomes due sooner.

A write that makes an occurrence due (a create, a trigger, a replay, a resume, a PATCH, a
backfill) announces how soon. On PostgreSQL the announcement is a `NOTIFY` sent in the
write's own transaction, so it reaches every replica's `LISTEN` connection when, and only
if, the write commits. On SQLite, whose only replica is this process, it goes straight to
the loop. Announcements are hints: a lost one costs at most one poll interval, since the
loop never sleeps longer than that.

Each installation has a channel of its own (`chronoq_due_<schema>` with CHRONOQ_DB_SCHEMA),
so installations sharing a database do not wake each other's loops.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from contextlib import suppress
from datetime import UTC, datetime

import asyncpg
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.occurrence import OccurrenceStatus
from app.store.database import schema_of
from app.store.tables import UTCDateTime, occurrences

log = logging.getLogger(__name__)

CHANNEL = "chronoq_due"
_MAX_CHANNEL = 63  # PostgreSQL identifiers, channel names included, are cut at 63 bytes
RECONNECT_MIN = 0.5
RECONNECT_MAX = 10.0
PING_INTERVAL = 30.0

Listener = Callable[[float], None]

_NOTIFY = sa.text(
    "SELECT pg_notify(:channel, CAST(EXTRACT(EPOCH FROM (:at - now())) AS text))"
).bindparams(sa.bindparam("at", type_=UTCDateTime()))


def due_channel(schema: str | None) -> str:
    """The NOTIFY channel of the installation in `schema` (None: the default one)."""
    if schema is None:
        return CHANNEL
    channel = f"{CHANNEL}_{schema}"
    if len(channel) <= _MAX_CHANNEL:
        return channel
    digest = hashlib.blake2b(schema.encode(), digest_size=8).hexdigest()
    return f"{channel[: _MAX_CHANNEL - len(digest) - 1]}_{digest}"


class Wakeups:
    """This process's end of the announcements: listeners hear "something is due in N
    seconds" (negative: already due)."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        with suppress(ValueError):
            self._listeners.remove(listener)

    def due_in(self, seconds: float) -> None:
        for listener in list(self._listeners):
            listener(seconds)

    async def announce(self, conn: AsyncConnection, at: datetime | None) -> None:
        """Inside a write's transaction: an occurrence is due at `at` (None: nothing new)."""
        if at is None:
            return
        if conn.dialect.name == "postgresql":
            await conn.execute(_NOTIFY, {"channel": due_channel(schema_of(conn)), "at": at})
        else:
            # SQLite: the loop's claim waits for this transaction's write lock, so waking it
            # before the commit cannot make it miss the row.
            self.due_in((at - datetime.now(UTC)).total_seconds())


async def next_due_in(conn: AsyncConnection) -> float | None:
    """Seconds until the earliest pending occurrence that is not yet due (None: none).

    Rows already due but not claimed belong to paused schedules; they wait for a resume,
    which announces itself. Reads the partial claim index only.
    """
    pending = occurrences.c.status == OccurrenceStatus.PENDING
    if conn.dialect.name == "postgresql":
        earliest = sa.func.min(occurrences.c.available_at)
        seconds = await conn.scalar(
            sa.select(sa.extract("epoch", earliest - sa.func.now())).where(
                pending, occurrences.c.available_at > sa.func.now()
            )
        )
        return None if seconds is None else float(seconds)
    now = datetime.now(UTC)
    at = await conn.scalar(
        sa.select(sa.func.min(occurrences.c.available_at)).where(
            pending, occurrences.c.available_at > sa.literal(now, UTCDateTime())
        )
    )
    if at is None:
        return None
    when = at if isinstance(at, datetime) else datetime.fromisoformat(str(at))
    when = when.replace(tzinfo=UTC) if when.tzinfo is None else when
    return (when - now).total_seconds()


class PgListener:
    """One `LISTEN` connection per replica, re-established whenever it is lost; polling
    covers the gap while it is down."""

    def __init__(self, url: str, wakeups: Wakeups, *, schema: str | None = None) -> None:
        parsed = make_url(url)
        self.channel = due_channel(schema)
        self._dsn = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
        self._host = f"{parsed.host or 'localhost'}:{parsed.port or 5432}"
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
                conn = await asyncpg.connect(
                    self._dsn, timeout=10, server_settings={"application_name": "chronoq-listen"}
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
                while not lost.is_set():
                    # A connection cut without a FIN (a partition) shows only when used.
                    with suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), PING_INTERVAL)
                        break
                    await asyncio.wait_for(conn.execute("SELECT 1"), timeout=5)
                log.warning("lost the LISTEN connection to %s; reconnecting", self._host)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("LISTEN on %s failed (%s)", self._host, type(exc).__name__)
            finally:
                self.connected.clear()
                with suppress(Exception):
                    await asyncio.wait_for(conn.close(), timeout=2)
