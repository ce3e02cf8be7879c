"""Which rows one claim takes: first attempts first, then retries and replays, then keyed
rows, each kind from its own index (`ClaimRows`, `CLAIM_SETS`).

Invariants:
- first attempts take the claim's room first, less what is kept for the other two kinds
  while those have rows due: up to a third each, so that none waits behind another's
  backlog and first attempts always have the rest;
- a kind that got no room is looked at (one probe of its index) every LOOK_EVERY claims,
  so that what falls due during a long backlog of first attempts gets its share within a
  few claims;
- every row is leased under the one claim's token, in the caller's transaction.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.tenants import DEFAULT_TENANT, DEFAULT_WEIGHT
from app.store.dialects import dialect_of
from app.store.dialects.base import Dialect
from app.store.loop.flow_claims import FlowClaims, KeyedClaim
from app.store.loop.sql import ClaimRows
from app.store.schema.tables import UNKEYED_AGAIN, in_claim_set, occurrences
from app.store.schema.types import UTCDateTime

# A claim that first attempts fill looks for the other kinds of row (retries and replays,
# keyed rows) every this many claims, even when the last look found none, so that what
# falls due during a long backlog of first attempts gets its share within a few claims.
LOOK_EVERY = 4


@dataclass(slots=True)
class _Share:
    """The room of each claim kept for one kind of row besides first attempts: up to a
    third of the claim while the kind has rows due, so that none waits behind another's
    backlog, and first attempts always have the rest. A kind that had no room is looked at
    every LOOK_EVERY claims (a look: one probe of its index)."""

    demand: int = 0  # how many the last claim of the kind could have taken
    unseen: int = 0  # claims in a row that did not look at the kind
    # The part of each claim its tenants' weights give the kind (keyed rows: the other
    # tenants', against the default tenant's unkeyed rows), when more than a third.
    weighted: float = 0.0

    def kept(self, limit: int) -> int:
        return min(max(limit // 3, math.ceil(limit * self.weighted)), self.demand)

    def found(self, count: int, room: int, limit: int) -> None:
        """The kind's claim took `count` of the `room` it had: all of it, or a look that
        found some (`room` 0), means it may have more, and keeps its whole share."""
        self.demand = limit if count and count >= room else count

    def looks(self, room: int) -> bool:
        if room > 0:
            self.unseen = 0
            return True
        self.unseen += 1
        if self.unseen < LOOK_EVERY:
            return False
        self.unseen = 0
        return True


@dataclass(slots=True)
class _Starts:
    """How many attempts the statements of one claim may still start (None: all): a
    statement that found more than that starts none of its rows."""

    left: int | None

    def took(self, rows: Sequence[Any]) -> None:
        if self.left is not None:
            self.left -= sum(1 for row in rows if not row.lease_ahead)


@dataclass(frozen=True, slots=True)
class Leased:
    """What one claim leased, of every kind; `more`: it stopped at a limit with more due."""

    rows: list[Any]
    more: bool
    keyed: KeyedClaim
    # A claim ahead's reading of the database's clock: the instant it read, and the instant
    # of the monotonic clock by which it had (`app.worker.database_clock`); None without
    # `ahead`.
    reading: tuple[datetime, float] | None = None


async def _any_due(conn: AsyncConnection, dialect: Dialect, where: str) -> bool:
    """Whether a claim index (`CLAIM_SETS`) has a row due: its first entry, by the host's
    clock (a look needs no more)."""
    statement = (
        sa.select(occurrences.c.occurrence_id)
        .where(
            in_claim_set(where),
            occurrences.c.available_at <= sa.bindparam("now", type_=UTCDateTime()),
        )
        .limit(1)
    )
    return (await conn.execute(statement, {"now": dialect.clock.host_now()})).first() is not None


class ClaimMix:
    """The kinds of row one claim takes, and the share each keeps from claim to claim."""

    def __init__(self) -> None:
        self._flow = FlowClaims()
        self._again = _Share()  # retries and replays
        self._keyed = _Share()

    async def lease(
        self,
        conn: AsyncConnection,
        *,
        limit: int,
        lease: float,
        token: uuid.UUID,
        owner: str,
        ahead: float,
        start: int | None = None,
        skip: Sequence[str] = (),
    ) -> Leased:
        """Lease up to `limit` rows, first attempts first (`ahead`, `start`, `skip`: as
        `ClaimStore.claim`; each statement may start what the ones before it left)."""
        dialect = dialect_of(conn)
        starts = _Starts(start)

        async def lease_of(rows: ClaimRows, most: int) -> list[Any]:
            found = await dialect.claim(
                conn,
                limit=most,
                lease=lease,
                token=token,
                owner=owner,
                ahead=ahead,
                rows=rows,
                start=starts.left,
                skip=skip,
            )
            starts.took(found)
            return list(found)

        kept_again, kept_keyed = self._again.kept(limit), self._keyed.kept(limit)
        fresh_limit = limit - kept_again - kept_keyed
        reading = None
        if ahead > 0:
            # First, so that it comes back at once: what is claimed ahead waits for its
            # instant by the database's clock as this reading bounds it.
            reading = (await dialect.transaction_now(conn), time.monotonic())
        claimed = await lease_of(ClaimRows.FRESH, fresh_limit)
        more = len(claimed) >= fresh_limit
        room = limit - kept_keyed - len(claimed)
        if self._again.looks(room):
            if room > 0:
                again = await lease_of(ClaimRows.AGAIN, room)
                self._again.found(len(again), room, limit)
                more = more or len(again) >= room
                claimed += again
            else:  # a look only: whether any is due
                self._again.found(int(await _any_due(conn, dialect, UNKEYED_AGAIN)), 0, limit)
        keyed = await self._claim_keyed(
            conn, limit, limit - len(claimed), lease, token, owner, ahead, starts.left, skip
        )
        claimed += keyed.rows
        more = more or keyed.demand > len(keyed.rows) > 0
        return Leased(claimed, more, keyed, reading)

    @property
    def weights(self) -> dict[str, int]:
        """The tenants' weights as last read (a tenant not named: DEFAULT_WEIGHT)."""
        return self._flow.weights

    async def _claim_keyed(
        self,
        conn: AsyncConnection,
        limit: int,
        room: int,
        lease: float,
        token: uuid.UUID,
        owner: str,
        ahead: float,
        start: int | None,
        skip: Sequence[str],
    ) -> KeyedClaim:
        """Keyed rows into the room the unkeyed ones left; with none left, a look (one
        index probe) every LOOK_EVERY claims at whether any may start."""
        if not self._keyed.looks(room):
            return KeyedClaim([])
        keyed = await self._flow.claim(
            conn,
            room=room,
            lease=lease,
            token=token,
            owner=owner,
            ahead=ahead,
            start=start,
            skip=skip,
        )
        # More than it took (or a look that found any): it keeps its whole share.
        self._keyed.demand = limit if keyed.demand > len(keyed.rows) else keyed.demand
        others = sum(w for t, w in keyed.tenants.items() if t != DEFAULT_TENANT)
        if others:
            mine = self._flow.weights.get(DEFAULT_TENANT, DEFAULT_WEIGHT)
            self._keyed.weighted = others / (others + mine)
        else:
            self._keyed.weighted = 0.0
        return keyed
