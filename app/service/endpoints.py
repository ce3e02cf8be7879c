"""Endpoint use cases: made (their first secret shown once), read, listed, changed,
removed, their secrets rotated (the new one shown once), their circuit enabled, and their
events read; each in one transaction, in the caller's tenant."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from app.domain.addresses import AddressPolicy
from app.domain.endpoints import (
    Endpoint,
    EndpointEvent,
    EndpointSpec,
    missing_endpoint,
    new_signing_secret,
)
from app.domain.errors import InvalidInputError
from app.domain.occurrence import Attempt
from app.domain.placeholders import PlaceholderError, keep_stored_secrets
from app.domain.target import EndpointTarget, Target, WebhookTarget
from app.domain.tenants import Caller
from app.service.addresses import HostResolver, TargetAddresses
from app.settings import Settings
from app.store.dialects import transaction_now
from app.store.engine.database import Connection, Database
from app.store.records.attempts import AttemptStore
from app.store.records.endpoints import EndpointStore
from app.store.records.tenants import TenantStore


def _request(url: str, headers: dict[str, str]) -> WebhookTarget:
    return WebhookTarget.model_construct(
        type="webhook",
        url=url,
        method="POST",
        headers=headers,
        timeout_seconds=10.0,
        signing_secret=None,
    )


def _kept(
    url: str, headers: dict[str, str], stored: EndpointSpec | None
) -> tuple[str, dict[str, str]]:
    """`url` and `headers` with each redacted form a client sent back replaced by the
    stored value it stands for (as a webhook target's, `app.domain.placeholders`); one
    that nothing stored stands for is refused, naming its field."""
    old = None if stored is None else _request(stored.url, stored.headers)
    try:
        kept = keep_stored_secrets(_request(url, headers), old)
    except PlaceholderError as exc:
        raise InvalidInputError(str(exc), pointer=f"#/{exc.field}") from None
    assert isinstance(kept, WebhookTarget)
    return kept.url, dict(kept.headers)


class EndpointService:
    def __init__(
        self, database: Database, settings: Settings, resolver: HostResolver | None = None
    ) -> None:
        self._db = database
        self._endpoints = EndpointStore()
        self._tenants = TenantStore()
        self._addresses = TargetAddresses(AddressPolicy.of(*settings.target_rules()), resolver)

    async def _check_url(self, url: str) -> None:
        """The URL's host is not, and does not resolve to, a denied address (DESIGN 8)."""
        target = WebhookTarget(type="webhook", url=url)
        await self._addresses.check([(target, "#/url")])

    async def create(self, spec: EndpointSpec, caller: Caller) -> tuple[Endpoint, str]:
        """A new endpoint, and its first signing secret (shown this once)."""
        await self._check_url(spec.url)
        _kept(spec.url, spec.headers, None)
        secret = new_signing_secret()

        async def work(conn: Connection) -> Endpoint:
            await self._tenants.hold(conn, caller.tenant)
            now = await transaction_now(conn)
            return await self._endpoints.create(
                conn, caller.tenant, spec, secret, now, actor=caller.actor
            )

        return await self._db.run(work), secret

    async def get(self, endpoint_id: uuid.UUID, caller: Caller) -> Endpoint:
        async def work(conn: Connection) -> Endpoint:
            now = await transaction_now(conn)
            return await self._endpoints.get(conn, caller.tenant, endpoint_id, now)

        return await self._db.run(work)

    async def page(self, caller: Caller, *, after: uuid.UUID | None, limit: int) -> list[Endpoint]:
        async def work(conn: Connection) -> list[Endpoint]:
            now = await transaction_now(conn)
            return await self._endpoints.page(
                conn, caller.tenant, after=after, limit=limit, now=now
            )

        return await self._db.run(work)

    async def update(
        self,
        endpoint_id: uuid.UUID,
        changes: dict[str, Any],
        if_match: frozenset[int] | None,
        caller: Caller,
    ) -> Endpoint:
        """Apply a PATCH's `changes` (field: value, as `EndpointSpec` holds it): a new URL,
        headers or flow limits apply to every attempt claimed after it commits."""
        if "url" in changes:
            await self._check_url(changes["url"])

        async def work(conn: Connection) -> Endpoint:
            now = await transaction_now(conn)
            current = await self._endpoints.get(conn, caller.tenant, endpoint_id, now)
            spec = replace(current.spec, **changes)
            if "url" in changes or "headers" in changes:
                url, headers = _kept(spec.url, spec.headers, current.spec)
                spec = replace(spec, url=url, headers=headers)
                changes.update(url=url, headers=headers)
            spec.check()
            changed = [
                name for name, value in changes.items() if getattr(current.spec, name) != value
            ]
            return await self._endpoints.update(
                conn,
                caller.tenant,
                endpoint_id,
                spec,
                changed,
                if_match,
                now,
                actor=caller.actor,
            )

        return await self._db.run(work)

    async def delete(
        self, endpoint_id: uuid.UUID, if_match: frozenset[int] | None, caller: Caller
    ) -> None:
        async def work(conn: Connection) -> None:
            now = await transaction_now(conn)
            await self._endpoints.delete(
                conn, caller.tenant, endpoint_id, if_match, now, actor=caller.actor
            )

        await self._db.run(work)

    async def rotate(
        self,
        endpoint_id: uuid.UUID,
        overlap_seconds: int,
        caller: Caller,
        if_match: frozenset[int] | None = None,
    ) -> tuple[Endpoint, str]:
        """A new signing secret (shown this once); the live ones expire after the overlap."""
        secret = new_signing_secret()

        async def work(conn: Connection) -> Endpoint:
            now = await transaction_now(conn)
            return await self._endpoints.rotate(
                conn,
                caller.tenant,
                endpoint_id,
                secret,
                overlap_seconds,
                if_match,
                now,
                actor=caller.actor,
            )

        return await self._db.run(work), secret

    async def enable(self, endpoint_id: uuid.UUID, caller: Caller) -> Endpoint:
        async def work(conn: Connection) -> Endpoint:
            now = await transaction_now(conn)
            return await self._endpoints.enable(
                conn, caller.tenant, endpoint_id, now, actor=caller.actor
            )

        return await self._db.run(work)

    async def attempts(
        self,
        endpoint_id: uuid.UUID,
        caller: Caller,
        *,
        before: tuple[datetime, uuid.UUID] | None,
        limit: int,
    ) -> list[tuple[uuid.UUID, Attempt]]:
        """The attempts that went to the endpoint, newest first, with their occurrences."""

        async def work(conn: Connection) -> list[tuple[uuid.UUID, Attempt]]:
            if not await self._endpoints.exists(conn, caller.tenant, endpoint_id):
                raise missing_endpoint(endpoint_id)
            return await AttemptStore().of_endpoint(conn, endpoint_id, limit=limit, before=before)

        return await self._db.run(work)

    async def events(
        self, endpoint_id: uuid.UUID, caller: Caller, *, after: uuid.UUID | None, limit: int
    ) -> list[EndpointEvent]:
        """The endpoint's events, oldest first; a removed endpoint's are kept."""

        async def work(conn: Connection) -> list[EndpointEvent]:
            found = await self._endpoints.history(
                conn, caller.tenant, endpoint_id, after=after, limit=limit
            )
            if (
                not found
                and after is None
                and not await self._endpoints.exists(conn, caller.tenant, endpoint_id)
            ):
                raise missing_endpoint(endpoint_id)
            return found

        return await self._db.run(work)


async def hold_endpoint_targets(
    conn: Connection, tenant: str, targets: Sequence[tuple[Target | None, str]]
) -> None:
    """Each endpoint that `targets` (target, its pointer) name exists in `tenant`, and goes
    on existing until the transaction ends; one that does not is refused, naming it."""
    named = [(t, pointer) for t, pointer in targets if isinstance(t, EndpointTarget)]
    if not named:
        return
    found = await EndpointStore().hold(conn, tenant, (t.endpoint_id for t, _ in named))
    for target, pointer in named:
        if target.endpoint_id not in found:
            raise InvalidInputError(
                f"endpoint {target.endpoint_id} does not exist in this tenant",
                pointer=f"{pointer}/endpoint_id",
            )
