"""Tenant key use cases: made (the key shown once), listed, revoked; and the lookup every
request with a key that is not an operator's goes through, remembered for a moment."""

from __future__ import annotations

import secrets
import time
import uuid
from datetime import UTC, datetime

from app.domain.errors import InvalidInputError, NotFoundError
from app.domain.ids import uuid7
from app.domain.tenant_keys import (
    CACHE_SECONDS,
    PREFIX_LENGTH,
    KeyRole,
    TenantKey,
    check_key_name,
    digest_of,
    new_secret,
)
from app.store.dialects import transaction_now
from app.store.engine.database import Connection, Database
from app.store.records.tenant_keys import TenantKeyStore
from app.store.records.tenants import TenantStore

# How many lookups a replica remembers; past it, it forgets them all (a flood of unknown
# keys costs memory up to this, and then a lookup each).
MAX_REMEMBERED = 10_000


class TenantKeyService:
    def __init__(self, database: Database, *, remember_seconds: float = CACHE_SECONDS) -> None:
        self._db = database
        self._keys = TenantKeyStore()
        self._tenants = TenantStore()
        self._remember = remember_seconds
        self._found: dict[str, tuple[float, TenantKey | None]] = {}

    async def make(
        self,
        tenant: str,
        name: str,
        role: KeyRole,
        expires_at: datetime | None,
        *,
        actor: str | None,
    ) -> tuple[TenantKey, str]:
        """A new key of `tenant`, and the key itself (shown this once, never stored).
        `actor` is who asks, as the tenant's `key_created` event names it."""
        check_key_name(name)
        secret = new_secret()

        async def work(conn: Connection) -> TenantKey:
            await self._tenants.hold(conn, tenant)
            now = await transaction_now(conn)
            if expires_at is not None and expires_at <= now:
                raise InvalidInputError("expires_at is not in the future", pointer="#/expires_at")
            key = TenantKey(
                id=uuid7(now, secrets.randbits(74)),
                tenant=tenant,
                name=name,
                role=role,
                prefix=secret[:PREFIX_LENGTH],
                created_at=now,
                expires_at=expires_at,
                revoked_at=None,
                last_used_at=None,
            )
            await self._keys.insert(conn, key, digest_of(secret), actor=actor)
            return key

        return await self._db.run(work), secret

    async def list(self, tenant: str, *, after: uuid.UUID | None, limit: int) -> list[TenantKey]:
        async def work(conn: Connection) -> list[TenantKey]:
            await self._tenants.hold(conn, tenant)
            return await self._keys.of_tenant(conn, tenant, after=after, limit=limit)

        return await self._db.run(work)

    async def revoke(self, tenant: str, id_: uuid.UUID, *, actor: str | None) -> None:
        """Every replica refuses the key within `CACHE_SECONDS` of this. `actor` is who
        asks, as the tenant's `key_revoked` event names it."""

        async def work(conn: Connection) -> bool:
            await self._tenants.hold(conn, tenant)
            now = await transaction_now(conn)
            return await self._keys.revoke(conn, tenant, id_, now, actor=actor)

        if not await self._db.run(work):
            raise NotFoundError(f"tenant {tenant} has no key {id_}")

    async def find(self, secret: str) -> TenantKey | None:
        """The valid key `secret` is (None: none, or revoked, or expired). What a lookup
        found is remembered for `remember_seconds`; a lookup that finds a valid key notes
        its use."""
        digest = digest_of(secret)
        now = time.monotonic()
        remembered = self._found.get(digest)
        if remembered is not None and now - remembered[0] < self._remember:
            key = remembered[1]
        else:
            key = await self._db.run(lambda conn: self._keys.by_digest(conn, digest))
            if len(self._found) >= MAX_REMEMBERED:
                self._found.clear()
            self._found[digest] = (now, key)
            if key is not None and key.valid_at(datetime.now(UTC)):
                await self._db.run(lambda conn: self._keys.used(conn, key.id, datetime.now(UTC)))
        if key is None or not key.valid_at(datetime.now(UTC)):
            return None
        return key
