"""Tenant use cases: put, read, list, remove, each change recorded as an audit event of
the tenant naming who made it; the tenant's events read; and whether a tenant a request
names exists."""

from __future__ import annotations

import uuid
from dataclasses import replace

from app.domain.addresses import AddressPolicy
from app.domain.errors import InvalidInputError
from app.domain.target import (
    EndpointTarget,
    RabbitMQTarget,
    Target,
    TopicTarget,
    WebhookTarget,
)
from app.domain.tenant_events import TenantEvent
from app.domain.tenants import Tenant, TenantSpec, missing_tenant
from app.service.addresses import HostResolver, TargetAddresses
from app.service.endpoints import hold_endpoint_targets
from app.service.schedules.checks import kept_secrets
from app.settings import Settings
from app.store.dialects import transaction_now
from app.store.engine.database import Connection, Database
from app.store.records.tenant_events import TenantEventStore
from app.store.records.tenants import TenantStore


class TenantService:
    def __init__(
        self,
        database: Database,
        settings: Settings | None = None,
        resolver: HostResolver | None = None,
    ) -> None:
        self._db = database
        self._tenants = TenantStore()
        self._events = TenantEventStore()
        self._settings = settings
        policy = AddressPolicy.of(*settings.target_rules()) if settings else AddressPolicy()
        self._addresses = TargetAddresses(policy, resolver)

    async def _check_events_target(self, target: Target | None) -> None:
        """An events target can be delivered to: a webhook's host is not, and does not
        resolve to, a denied address; a rabbitmq one needs a broker."""
        if isinstance(target, TopicTarget):
            raise InvalidInputError(
                "an events target is a webhook, rabbitmq or endpoint target",
                pointer="#/events_target/type",
            )
        if isinstance(target, WebhookTarget):
            await self._addresses.check([(target, "#/events_target/url")])
        if isinstance(target, RabbitMQTarget) and not (
            self._settings is not None and self._settings.amqp_url
        ):
            raise InvalidInputError(
                "a rabbitmq target needs AMQP_URL to be configured on the service",
                pointer="#/events_target/type",
            )

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
        self,
        tenant: str,
        spec: TenantSpec,
        if_match: frozenset[int] | None = None,
        *,
        actor: str | None,
    ) -> tuple[Tenant, bool]:
        """Create or replace the tenant, whole; True when new. The answer has its usage.
        `actor` is who asks, as its events name it."""

        await self._check_events_target(spec.events_target)

        async def work(conn: Connection) -> tuple[Tenant, bool]:
            now = await transaction_now(conn)
            target = spec.events_target
            if target is not None:
                before = await self._tenants.get(conn, tenant)
                target = kept_secrets(
                    target, None if before is None else before.events_target, "#/events_target"
                )
                if isinstance(target, EndpointTarget):
                    await hold_endpoint_targets(conn, tenant, [(target, "#/events_target")])
            found, created = await self._tenants.put(
                conn, tenant, replace(spec, events_target=target), if_match, now, actor=actor
            )
            usage = await self._tenants.usage(conn, tenant, now)
            return replace(found, usage=usage), created

        return await self._db.run(work)

    async def events(
        self, tenant: str, *, after: uuid.UUID | None, limit: int
    ) -> list[TenantEvent]:
        """The tenant's audit events, oldest first: a removed tenant's too. A tenant that
        does not exist and has no events is missing."""

        async def work(conn: Connection) -> list[TenantEvent]:
            found = await self._events.history(conn, tenant, limit=limit, after=after)
            # An empty page is a tenant's (one past its last event, or with none since
            # events began) unless no such tenant is or ever was.
            if (
                not found
                and not await self._tenants.exists(conn, tenant)
                and not await self._events.any(conn, tenant)
            ):
                raise missing_tenant(tenant)
            return found

        return await self._db.run(work)

    async def list(self, *, after: str | None, limit: int, usage: bool = True) -> list[Tenant]:
        """Tenants in id order, each with its usage (`usage`; without it, one read)."""

        async def work(conn: Connection) -> list[Tenant]:
            now = await transaction_now(conn) if usage else None
            return await self._tenants.page(conn, after=after, limit=limit, now=now)

        return await self._db.run(work)

    async def delete(
        self, tenant: str, if_match: frozenset[int] | None = None, *, actor: str | None
    ) -> None:
        """Remove the tenant and all it holds but its events; refused while it has live
        schedules."""

        async def work(conn: Connection) -> None:
            now = await transaction_now(conn)
            await self._tenants.delete(conn, tenant, if_match, now, actor=actor)

        await self._db.run(work)
