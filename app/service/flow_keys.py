"""Flow key use cases: a key's limits put, read with its live figures, removed, listed;
and a destination's back-off cleared. Keys are named per tenant: each use case reaches the
caller's tenant's keys only (the store names a key by its tenant and name,
`app.domain.tenants.stored_key`), and answers with the key's name."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime

from app.domain.errors import NotFoundError
from app.domain.flow import FlowKey, FlowLimits
from app.domain.occurrence import Occurrence
from app.domain.tenants import key_name, key_prefix, stored_key
from app.store.dialects import transaction_now
from app.store.engine.database import Connection, Database
from app.store.records.flow_keys import FlowKeyStore


def _named(found: FlowKey) -> FlowKey:
    return replace(found, key=key_name(found.key))


class FlowKeyService:
    def __init__(self, database: Database) -> None:
        self._db = database
        self._keys = FlowKeyStore()

    async def get(self, key: str, *, tenant: str) -> FlowKey:
        """Any key, put or not: one never put has no limits, and its live figures."""

        async def work(conn: Connection) -> FlowKey:
            return await self._keys.get(conn, stored_key(tenant, key), await transaction_now(conn))

        return _named(await self._db.run(work))

    async def put(
        self, key: str, limits: FlowLimits, if_match: frozenset[int] | None = None, *, tenant: str
    ) -> tuple[FlowKey, bool]:
        """Create or replace the key's limits; True when it had none."""
        stored = stored_key(tenant, key)

        async def work(conn: Connection) -> tuple[FlowKey, bool]:
            return await self._keys.put(conn, stored, limits, if_match, await transaction_now(conn))

        found, created = await self._db.run(work)
        return _named(found), created

    async def clear_backoff(self, key: str, *, tenant: str) -> FlowKey:
        """End the back-off a destination set on the key; its limits stay as they are."""
        stored = stored_key(tenant, key)

        async def work(conn: Connection) -> FlowKey:
            return await self._keys.clear_backoff(conn, stored, await transaction_now(conn))

        return _named(await self._db.run(work))

    async def delete(
        self, key: str, if_match: frozenset[int] | None = None, *, tenant: str
    ) -> None:
        """Remove the key's limits: its schedules keep the name and run unlimited."""
        stored = stored_key(tenant, key)

        async def work(conn: Connection) -> bool:
            return await self._keys.delete(conn, stored, if_match)

        if not await self._db.run(work):
            raise NotFoundError(f"flow key {key} has no limits")

    async def waiting(
        self,
        key: str,
        *,
        after: tuple[datetime, uuid.UUID] | None,
        limit: int,
        tenant: str,
    ) -> list[Occurrence]:
        """The occurrences waiting on the key (pending, in fire order), after `after`."""
        stored = stored_key(tenant, key)

        async def work(conn: Connection) -> list[Occurrence]:
            return await self._keys.waiting(conn, stored, limit=limit, after=after)

        return await self._db.run(work)

    async def list(self, *, after: str | None, limit: int, tenant: str) -> list[FlowKey]:
        """The tenant's keys in name order, after the key named `after`."""

        async def work(conn: Connection) -> list[FlowKey]:
            return await self._keys.page(
                conn,
                prefix=key_prefix(tenant),
                after=None if after is None else stored_key(tenant, after),
                limit=limit,
                now=await transaction_now(conn),
            )

        return [_named(found) for found in await self._db.run(work)]
