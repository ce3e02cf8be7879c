"""The delivery loop's view of the store: claim, settle and release, each one transaction.

Everything the loop needs from the database goes through `DeliveryQueue`, so the loop
never asks which database it runs on, and its tests can put a fake in its place.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from typing import Protocol

from app.domain.occurrence import Delivery, Settlement, Unsent
from app.domain.settled import Settled
from app.domain.tenants import DEFAULT_WEIGHT
from app.store.dialects import announce, next_due_in, transaction_now
from app.store.engine.database import Connection, Database
from app.store.engine.wakeups import Wakeups
from app.store.loop.claims import Claimed, ClaimStore
from app.store.loop.releases import ReleaseStore
from app.store.loop.settlements import SettlementStore


class Queue(Protocol):
    """What the delivery loop asks of the store."""

    async def claim(
        self,
        *,
        limit: int,
        lease: float,
        owner: str,
        backoff: Callable[[int], float],
        ahead: float = 0.0,
        start: int | None = None,
        skip: Sequence[str] = (),
    ) -> Claimed:
        """Lease up to `limit` due occurrences, and with `ahead` > 0 those due within that
        many seconds that no lease holds (`Claimed.not_before`); with more than `start`
        due, none starts (`Claimed.unstarted`); none of the destinations in `skip`."""
        ...

    async def start_ahead(self, deliveries: Sequence[Delivery]) -> set[uuid.UUID]:
        """Of unstarted deliveries about to start (claimed ahead and now due, or waiting
        beyond the free slots), the ids of those that may start (no cancel or pause since
        their claim), marked started."""
        ...

    async def settle(self, settlements: Sequence[Settlement]) -> Settled:
        """Record finished attempts; returns the schedules their dead letters paused and
        the endpoints whose circuit they moved."""
        ...

    async def release(
        self, deliveries: Sequence[Delivery], *, started: bool, unsent: Unsent | None = None
    ) -> None: ...

    def listening(self) -> AbstractAsyncContextManager[None]: ...

    def weight_of(self, tenant: str) -> int:
        """The tenant's weight as the claims last read it (fair dispatch)."""
        ...


class DeliveryQueue:
    """The store behind the delivery loop."""

    def __init__(
        self,
        database: Database,
        wakeups: Wakeups,
        claims: ClaimStore | None = None,
        *,
        starts: Database | None = None,
    ) -> None:
        self._db = database
        # The start marks of unstarted attempts (`start_ahead`) are on the path of every
        # such delivery: a connection of their own keeps them from queueing behind the
        # claims and settles of `database`'s pool.
        self._starts = starts or database
        self._wakeups = wakeups
        self._claims = claims or ClaimStore()
        self._settlements = SettlementStore()
        self._releases = ReleaseStore()

    def weight_of(self, tenant: str) -> int:
        return self._claims.weights.get(tenant, DEFAULT_WEIGHT)

    async def claim(
        self,
        *,
        limit: int,
        lease: float,
        owner: str,
        backoff: Callable[[int], float],
        ahead: float = 0.0,
        start: int | None = None,
        skip: Sequence[str] = (),
    ) -> Claimed:
        """Lease up to `limit` due occurrences, and with `ahead` > 0 those due within that
        many seconds that no lease holds (`Claimed.not_before`); with more than `start`
        due, none starts (`Claimed.unstarted`); none of the destinations in `skip`. When
        there are none, the same transaction reads how soon the next one is due, for the
        idle sleep."""

        async def work(conn: Connection) -> Claimed:
            found = await self._claims.claim(
                conn,
                limit=limit,
                lease=lease,
                owner=owner,
                backoff=backoff,
                ahead=ahead,
                start=start,
                skip=skip,
            )
            if found.deliveries:
                return found
            due_in = await next_due_in(conn)
            held_back_in = found.due_in  # a key held back for its rate or a back-off
            if due_in is None or (held_back_in is not None and held_back_in < due_in):
                due_in = held_back_in
            return replace(found, due_in=due_in)

        return await self._db.run(work)

    async def start_ahead(self, deliveries: Sequence[Delivery]) -> set[uuid.UUID]:
        if not deliveries:
            return set()
        dialect = self._starts.dialect
        # Through a pooler in transaction mode a statement outside a transaction may be
        # prepared on one server connection and run on another: there the marks keep theirs.
        if not dialect.marks_alone or self._starts.pooled:
            return await self._starts.run(lambda conn: dialect.mark_started(conn, deliveries))
        # One statement, one round trip: no transaction around it.
        async with self._starts.connect() as conn:
            alone = await conn.execution_options(isolation_level="AUTOCOMMIT")
            return await dialect.mark_started(alone, deliveries)

    async def settle(self, settlements: Sequence[Settlement]) -> Settled:
        if not settlements:
            return Settled()
        return await self._db.run(lambda conn: self._settlements.settle(conn, settlements))

    async def release(
        self, deliveries: Sequence[Delivery], *, started: bool, unsent: Unsent | None = None
    ) -> None:
        """Hand occurrences back and tell the other replicas, so that one of them takes
        them when they are due (`ReleaseStore.release`)."""
        if not deliveries:
            return

        async def work(conn: Connection) -> None:
            await self._releases.release(conn, deliveries, started=started, unsent=unsent)
            await announce(conn, self._wakeups, await transaction_now(conn))

        await self._db.run(work)

    @asynccontextmanager
    async def listening(self) -> AsyncIterator[None]:
        """While open, announcements from other replicas reach this process's wake-ups:
        as the dialect has them (a LISTEN connection on PostgreSQL; none where other
        replicas' work is found by polling, or where every writer is this process)."""
        if self._db.session_url is None:  # pooled, and no direct URL: the poll finds writes
            yield
            return
        async with self._db.dialect.listening(self._db.session_url, self._db.schema, self._wakeups):
            yield
