"""Flow key use cases: a key's limits put, read with its live figures, removed, listed;
and a destination's back-off cleared."""

from __future__ import annotations

from app.domain.errors import NotFoundError
from app.domain.flow import FlowKey, FlowLimits
from app.store.dialects import transaction_now
from app.store.engine.database import Connection, Database
from app.store.records.flow_keys import FlowKeyStore


class FlowKeyService:
    def __init__(self, database: Database) -> None:
        self._db = database
        self._keys = FlowKeyStore()

    async def get(self, key: str) -> FlowKey:
        """Any key, put or not: one never put has no limits, and its live figures."""

        async def work(conn: Connection) -> FlowKey:
            return await self._keys.get(conn, key, await transaction_now(conn))

        return await self._db.run(work)

    async def put(
        self, key: str, limits: FlowLimits, if_match: frozenset[int] | None = None
    ) -> tuple[FlowKey, bool]:
        """Create or replace the key's limits; True when it had none."""

        async def work(conn: Connection) -> tuple[FlowKey, bool]:
            return await self._keys.put(conn, key, limits, if_match, await transaction_now(conn))

        return await self._db.run(work)

    async def clear_backoff(self, key: str) -> FlowKey:
        """End the back-off a destination set on the key; its limits stay as they are."""

        async def work(conn: Connection) -> FlowKey:
            return await self._keys.clear_backoff(conn, key, await transaction_now(conn))

        return await self._db.run(work)

    async def delete(self, key: str, if_match: frozenset[int] | None = None) -> None:
        """Remove the key's limits: its schedules keep the name and run unlimited."""

        async def work(conn: Connection) -> bool:
            return await self._keys.delete(conn, key, if_match)

        if not await self._db.run(work):
            raise NotFoundError(f"flow key {key} has no limits")

    async def list(self, *, after: str | None, limit: int) -> list[FlowKey]:
        async def work(conn: Connection) -> list[FlowKey]:
            return await self._keys.page(
                conn, after=after, limit=limit, now=await transaction_now(conn)
            )

        return await self._db.run(work)
