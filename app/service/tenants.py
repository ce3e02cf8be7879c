"""Tenant use cases: put, read, list, remove; and whether a tenant a request names exists."""

from __future__ import annotations

from app.domain.tenants import Quotas, Tenant, missing_tenant
from app.store.dialects import transaction_now
from app.store.engine.database import Connection, Database
from app.store.records.tenants import TenantStore


class TenantService:
    def __init__(self, database: Database) -> None:
        self._db = database
        self._tenants = TenantStore()

    async def exists(self, tenant: str) -> bool:
        return await self._db.run(lambda conn: self._tenants.exists(conn, tenant))

    async def get(self, tenant: str) -> Tenant:
        found = await self._db.run(lambda conn: self._tenants.get(conn, tenant))
        if found is None:
            raise missing_tenant(tenant)
        return found

    async def put(
        self,
        tenant: str,
        display_name: str | None,
        if_match: frozenset[int] | None = None,
        quotas: Quotas | None = None,
    ) -> tuple[Tenant, bool]:
        """Create or replace the tenant, whole (quotas left out: none); True when new."""

        async def work(conn: Connection) -> tuple[Tenant, bool]:
            now = await transaction_now(conn)
            wanted = quotas or Quotas()
            return await self._tenants.put(conn, tenant, display_name, if_match, now, wanted)

        return await self._db.run(work)

    async def list(self, *, after: str | None, limit: int) -> list[Tenant]:
        return await self._db.run(lambda conn: self._tenants.page(conn, after=after, limit=limit))

    async def delete(self, tenant: str, if_match: frozenset[int] | None = None) -> None:
        """Remove the tenant and all it holds; refused while it has live schedules."""
        await self._db.run(lambda conn: self._tenants.delete(conn, tenant, if_match))
