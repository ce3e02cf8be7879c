"""Tenant use cases: put, read, list, remove; and whether a tenant a request names exists."""

from __future__ import annotations

from dataclasses import replace

from app.domain.tenants import Tenant, TenantSpec, missing_tenant
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
        """The tenant with its usage."""

        async def work(conn: Connection) -> Tenant | None:
            return await self._tenants.get(conn, tenant, await transaction_now(conn))

        found = await self._db.run(work)
        if found is None:
            raise missing_tenant(tenant)
        return found

    async def put(
        self, tenant: str, spec: TenantSpec, if_match: frozenset[int] | None = None
    ) -> tuple[Tenant, bool]:
        """Create or replace the tenant, whole; True when new. The answer has its usage."""

        async def work(conn: Connection) -> tuple[Tenant, bool]:
            now = await transaction_now(conn)
            found, created = await self._tenants.put(conn, tenant, spec, if_match, now)
            usage = await self._tenants.usage(conn, tenant, now)
            return replace(found, usage=usage), created

        return await self._db.run(work)

    async def list(self, *, after: str | None, limit: int) -> list[Tenant]:
        """Tenants in id order, each with its usage."""

        async def work(conn: Connection) -> list[Tenant]:
            now = await transaction_now(conn)
            return await self._tenants.page(conn, after=after, limit=limit, now=now)

        return await self._db.run(work)

    async def delete(self, tenant: str, if_match: frozenset[int] | None = None) -> None:
        """Remove the tenant and all it holds; refused while it has live schedules."""
        await self._db.run(lambda conn: self._tenants.delete(conn, tenant, if_match))
