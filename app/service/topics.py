"""Topic and subscription use cases, each one transaction in the caller's tenant; and the
check a create or a change of a schedule makes of the topic it targets."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from app.domain.errors import InvalidInputError
from app.domain.target import Target, TopicTarget
from app.domain.tenants import Caller
from app.domain.topics import Subscription, SubscriptionSpec, Topic
from app.store.dialects import transaction_now
from app.store.engine.database import Connection, Database
from app.store.records.tenants import TenantStore
from app.store.records.topics import TopicStore


class TopicService:
    def __init__(self, database: Database) -> None:
        self._db = database
        self._topics = TopicStore()
        self._tenants = TenantStore()

    async def put(
        self,
        name: str,
        description: str | None,
        if_match: frozenset[int] | None,
        caller: Caller,
    ) -> tuple[Topic, bool]:
        async def work(conn: Connection) -> tuple[Topic, bool]:
            await self._tenants.hold(conn, caller.tenant)
            now = await transaction_now(conn)
            return await self._topics.put(conn, caller.tenant, name, description, if_match, now)

        return await self._db.run(work)

    async def get(self, name: str, caller: Caller) -> Topic:
        return await self._db.run(lambda conn: self._topics.get(conn, caller.tenant, name))

    async def page(self, caller: Caller, *, after: str | None, limit: int) -> list[Topic]:
        return await self._db.run(
            lambda conn: self._topics.page(conn, caller.tenant, after=after, limit=limit)
        )

    async def delete(self, name: str, if_match: frozenset[int] | None, caller: Caller) -> None:
        await self._db.run(lambda conn: self._topics.delete(conn, caller.tenant, name, if_match))

    async def subscribe(self, spec: SubscriptionSpec, caller: Caller) -> Subscription:
        async def work(conn: Connection) -> Subscription:
            now = await transaction_now(conn)
            return await self._topics.subscribe(conn, caller.tenant, spec, now)

        return await self._db.run(work)

    async def subscription(self, subscription_id: uuid.UUID, caller: Caller) -> Subscription:
        return await self._db.run(
            lambda conn: self._topics.subscription(conn, caller.tenant, subscription_id)
        )

    async def subscriptions(
        self, caller: Caller, *, topic: str | None, after: uuid.UUID | None, limit: int
    ) -> list[Subscription]:
        return await self._db.run(
            lambda conn: self._topics.subscriptions_page(
                conn, caller.tenant, topic=topic, after=after, limit=limit
            )
        )

    async def change(
        self,
        subscription_id: uuid.UUID,
        changes: dict[str, object],
        if_match: frozenset[int] | None,
        caller: Caller,
    ) -> Subscription:
        """Apply a PATCH's `changes` (field: value, as `SubscriptionSpec` holds it)."""

        async def work(conn: Connection) -> Subscription:
            now = await transaction_now(conn)
            current = await self._topics.subscription(conn, caller.tenant, subscription_id)
            spec = SubscriptionSpec(
                topic=str(changes.get("topic", current.spec.topic)),
                endpoint_id=changes.get("endpoint_id", current.spec.endpoint_id),  # type: ignore[arg-type]
                event_types=changes.get("event_types", current.spec.event_types),  # type: ignore[arg-type]
                match=changes.get("match", current.spec.match),  # type: ignore[arg-type]
            )
            return await self._topics.change(
                conn, caller.tenant, subscription_id, spec, if_match, now
            )

        return await self._db.run(work)

    async def unsubscribe(
        self, subscription_id: uuid.UUID, if_match: frozenset[int] | None, caller: Caller
    ) -> None:
        await self._db.run(
            lambda conn: self._topics.unsubscribe(conn, caller.tenant, subscription_id, if_match)
        )


async def hold_topic_targets(
    conn: Connection, tenant: str, targets: Sequence[tuple[Target | None, str]]
) -> None:
    """Each topic that `targets` (target, its pointer) name exists in `tenant`, and goes on
    existing until the transaction ends; one that does not is refused, naming it."""
    named = [(t, pointer) for t, pointer in targets if isinstance(t, TopicTarget)]
    if not named:
        return
    found = await TopicStore().hold(conn, tenant, (t.topic for t, _ in named))
    for target, pointer in named:
        if target.topic not in found:
            raise InvalidInputError(
                f"topic {target.topic} does not exist in this tenant: put it first "
                f"(PUT /v1/topics/{target.topic})",
                pointer=f"{pointer}/topic",
            )
