"""Topics and subscriptions as stored: put, read, listed, changed, removed; and what a
fan-out reads of them (`subscriptions_of`).

Invariants:
- A topic is removed only while no pending or paused schedule targets it, and an endpoint
  only while no subscription names it (`EndpointStore.delete`).
- A subscription names an endpoint and a topic of its own tenant, each held (a shared lock)
  until the transaction that makes or changes it ends.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.errors import ConflictError, InvalidInputError
from app.domain.ids import event_id
from app.domain.schedule import ScheduleStatus, check_version
from app.domain.topics import (
    Subscription,
    SubscriptionSpec,
    Topic,
    missing_subscription,
    missing_topic,
)
from app.store.records.endpoints import EndpointStore
from app.store.schema.tables import schedules, subscriptions, topics

_t = topics.c
_s = subscriptions.c
_LIVE = (ScheduleStatus.PENDING.value, ScheduleStatus.PAUSED.value)


def _topic(row: Row[Any], count: int = 0) -> Topic:
    return Topic(
        tenant=row.tenant,
        name=row.name,
        description=row.description,
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
        subscriptions=count,
    )


def _subscription(row: Any) -> Subscription:
    return Subscription(
        id=row.id,
        tenant=row.tenant,
        spec=SubscriptionSpec(
            topic=row.topic,
            endpoint_id=row.endpoint_id,
            event_types=None if row.event_types is None else tuple(row.event_types),
            match=row.match,
        ),
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def topic_destination(topic: str) -> str:
    """What a schedule that targets `topic` stores as its destination."""
    return f"topic:{topic}"


class TopicStore:
    """Statements on `topics` and `subscriptions`, inside the caller's transaction."""

    async def _counts(
        self, conn: AsyncConnection, tenant: str, names: Sequence[str]
    ) -> dict[str, int]:
        if not names:
            return {}
        found = await conn.execute(
            sa.select(_s.topic, sa.func.count())
            .where(_s.tenant == tenant, _s.topic.in_(list(names)))
            .group_by(_s.topic)
        )
        return {row[0]: row[1] for row in found}

    async def put(
        self,
        conn: AsyncConnection,
        tenant: str,
        name: str,
        description: str | None,
        if_match: frozenset[int] | None,
        now: datetime,
    ) -> tuple[Topic, bool]:
        """Create or replace the topic; True when new."""
        locked = sa.select(topics).where(_t.tenant == tenant, _t.name == name).with_for_update()
        row = (await conn.execute(locked)).one_or_none()
        created = row is None
        if created:
            # Two puts of a new topic at once: the second's insert fails on the key (a
            # 409: put again, and it replaces the first's).
            try:
                await conn.execute(
                    topics.insert().values(
                        tenant=tenant, name=name, version=1, created_at=now, updated_at=now
                    )
                )
            except IntegrityError:
                raise ConflictError(
                    f"topic {name} was made by another request at the same instant: put it again"
                ) from None
            row = (await conn.execute(locked)).one()
        assert row is not None
        if if_match is not None:
            current = 0 if created else row.version
            check_version(current, if_match, f"the topic is at version {current}")
        await conn.execute(
            topics.update()
            .where(_t.tenant == tenant, _t.name == name)
            .values(
                description=description,
                version=1 if created else row.version + 1,
                updated_at=now,
            )
        )
        return await self.get(conn, tenant, name), created

    async def get(self, conn: AsyncConnection, tenant: str, name: str) -> Topic:
        row = (
            await conn.execute(sa.select(topics).where(_t.tenant == tenant, _t.name == name))
        ).one_or_none()
        if row is None:
            raise missing_topic(name)
        return _topic(row, (await self._counts(conn, tenant, [name])).get(name, 0))

    async def page(
        self, conn: AsyncConnection, tenant: str, *, after: str | None, limit: int
    ) -> list[Topic]:
        statement = sa.select(topics).where(_t.tenant == tenant)
        if after is not None:
            statement = statement.where(_t.name > after)
        rows = list(await conn.execute(statement.order_by(_t.name).limit(limit)))
        counts = await self._counts(conn, tenant, [row.name for row in rows])
        return [_topic(row, counts.get(row.name, 0)) for row in rows]

    async def delete(
        self,
        conn: AsyncConnection,
        tenant: str,
        name: str,
        if_match: frozenset[int] | None,
    ) -> None:
        """Remove the topic and its subscriptions: refused while a live schedule targets
        it."""
        row = (
            await conn.execute(
                sa.select(topics).where(_t.tenant == tenant, _t.name == name).with_for_update()
            )
        ).one_or_none()
        if row is None:
            raise missing_topic(name)
        if if_match is not None:
            check_version(row.version, if_match, f"the topic is at version {row.version}")
        named = await conn.execute(
            sa.select(schedules.c.id)
            .where(
                schedules.c.tenant == tenant,
                schedules.c.destination == topic_destination(name),
                schedules.c.status.in_(_LIVE),
            )
            .limit(1)
        )
        if (first := named.first()) is not None:
            raise ConflictError(
                f"schedule {first.id} targets the topic: cancel it or move it to another "
                "target first"
            )
        await conn.execute(subscriptions.delete().where(_s.tenant == tenant, _s.topic == name))
        await conn.execute(topics.delete().where(_t.tenant == tenant, _t.name == name))

    async def hold(self, conn: AsyncConnection, tenant: str, names: Iterable[str]) -> set[str]:
        """Those of `names` that are topics of `tenant`, each held until the transaction
        ends (a shared lock: a removal waits for it)."""
        wanted = sorted(set(names))
        if not wanted:
            return set()
        found = await conn.execute(
            sa.select(_t.name)
            .where(_t.tenant == tenant, _t.name.in_(wanted))
            .order_by(_t.name)
            .with_for_update(read=True)
        )
        return set(found.scalars())

    # -- subscriptions ---------------------------------------------------------------

    async def _check_refs(self, conn: AsyncConnection, tenant: str, spec: SubscriptionSpec) -> None:
        if spec.topic not in await self.hold(conn, tenant, [spec.topic]):
            raise InvalidInputError(
                f"topic {spec.topic} does not exist in this tenant: put it first",
                pointer="#/topic",
            )
        if spec.endpoint_id not in await EndpointStore().hold(conn, tenant, [spec.endpoint_id]):
            raise InvalidInputError(
                f"endpoint {spec.endpoint_id} does not exist in this tenant",
                pointer="#/endpoint_id",
            )

    async def subscribe(
        self, conn: AsyncConnection, tenant: str, spec: SubscriptionSpec, now: datetime
    ) -> Subscription:
        await self._check_refs(conn, tenant, spec)
        made = event_id(now)
        await conn.execute(
            subscriptions.insert().values(
                id=made,
                tenant=tenant,
                topic=spec.topic,
                endpoint_id=spec.endpoint_id,
                event_types=None if spec.event_types is None else list(spec.event_types),
                match=spec.match,
                version=1,
                created_at=now,
                updated_at=now,
            )
        )
        return await self.subscription(conn, tenant, made)

    async def subscription(
        self, conn: AsyncConnection, tenant: str, subscription_id: uuid.UUID, *, lock: bool = False
    ) -> Subscription:
        statement = sa.select(subscriptions).where(_s.id == subscription_id, _s.tenant == tenant)
        if lock:
            statement = statement.with_for_update()
        row = (await conn.execute(statement)).one_or_none()
        if row is None:
            raise missing_subscription(subscription_id)
        return _subscription(row)

    async def subscriptions_page(
        self,
        conn: AsyncConnection,
        tenant: str,
        *,
        topic: str | None,
        after: uuid.UUID | None,
        limit: int,
    ) -> list[Subscription]:
        statement = sa.select(subscriptions).where(_s.tenant == tenant)
        if topic is not None:
            statement = statement.where(_s.topic == topic)
        if after is not None:
            statement = statement.where(_s.id > after)
        rows = await conn.execute(statement.order_by(_s.id).limit(limit))
        return [_subscription(row) for row in rows]

    async def change(
        self,
        conn: AsyncConnection,
        tenant: str,
        subscription_id: uuid.UUID,
        spec: SubscriptionSpec,
        if_match: frozenset[int] | None,
        now: datetime,
    ) -> Subscription:
        current = await self.subscription(conn, tenant, subscription_id, lock=True)
        if if_match is not None:
            check_version(
                current.version, if_match, f"the subscription is at version {current.version}"
            )
        await self._check_refs(conn, tenant, spec)
        await conn.execute(
            subscriptions.update()
            .where(_s.id == subscription_id)
            .values(
                topic=spec.topic,
                endpoint_id=spec.endpoint_id,
                event_types=sa.null() if spec.event_types is None else list(spec.event_types),
                match=sa.null() if spec.match is None else spec.match,
                version=current.version + 1,
                updated_at=now,
            )
        )
        return await self.subscription(conn, tenant, subscription_id)

    async def unsubscribe(
        self,
        conn: AsyncConnection,
        tenant: str,
        subscription_id: uuid.UUID,
        if_match: frozenset[int] | None,
    ) -> None:
        current = await self.subscription(conn, tenant, subscription_id, lock=True)
        if if_match is not None:
            check_version(
                current.version, if_match, f"the subscription is at version {current.version}"
            )
        await conn.execute(subscriptions.delete().where(_s.id == subscription_id))


async def subscriptions_of(
    conn: AsyncConnection, named: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], list[Subscription]]:
    """The subscriptions of each (tenant, topic) of `named`, oldest first (one read)."""
    pairs = sorted(set(named))
    if not pairs:
        return {}
    tenants = sorted({tenant for tenant, _ in pairs})
    names = sorted({topic for _, topic in pairs})
    rows = await conn.execute(
        sa.select(subscriptions).where(_s.tenant.in_(tenants), _s.topic.in_(names)).order_by(_s.id)
    )
    found: dict[tuple[str, str], list[Subscription]] = {pair: [] for pair in pairs}
    for row in rows:
        key = (row.tenant, row.topic)
        if key in found:
            found[key].append(_subscription(row))
    return found


async def endpoint_subscribed(conn: AsyncConnection, endpoint_id: uuid.UUID) -> uuid.UUID | None:
    """A subscription that names the endpoint (None: none does)."""
    found = await conn.execute(sa.select(_s.id).where(_s.endpoint_id == endpoint_id).limit(1))
    return found.scalar()
