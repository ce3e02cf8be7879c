"""The operator commands' backend on the database itself (`--conn`, break-glass: no key, the
actor is "cli"): the services, called as the API's routes call them, and their answers in the
HTTP API's shapes with the API's cursors (app/api/pages.py). The domain's errors pass through
as the services raise them.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Literal

from app.api import pages
from app.api.activity_schemas import ActivityOut
from app.api.endpoint_schemas import (
    EndpointAttemptOut,
    EndpointEventOut,
    EndpointIn,
    EndpointOut,
    EndpointPatch,
)
from app.api.flow_key_schemas import FlowKeyOut
from app.api.occurrence_schemas import AttemptOut, DeadLetterOut, OccurrenceOut, Replayed
from app.api.schedule_schemas import BackfillResult, ScheduleEventOut, ScheduleOut
from app.api.schemas import Page
from app.api.tenant_schemas import MadeKey, TenantEventOut, TenantKeyOut, TenantOut
from app.api.topic_schemas import SubscriptionIn, SubscriptionOut, SubscriptionPatch, TopicOut
from app.cli.operator.backends import Versions
from app.domain.activity import Window
from app.domain.endpoints import DEFAULT_OVERLAP_SECONDS, Endpoint
from app.domain.filters import DeadLetterFilter, ScheduleFilter
from app.domain.flow import FlowLimits
from app.domain.schedule import CLI_ACTOR, SchedulePatch
from app.domain.tenant_keys import KeyRole
from app.domain.tenants import DEFAULT_TENANT, Caller, TenantSpec
from app.service.activity import ActivityService
from app.service.dead_letters import DeadLetterService
from app.service.endpoints import EndpointService
from app.service.flow_keys import FlowKeyService
from app.service.occurrences import OccurrenceService
from app.service.schedules import ScheduleService
from app.service.tenant_keys import TenantKeyService
from app.service.tenants import TenantService
from app.service.topics import TopicService


class DatabaseOperator:
    """The services on the database, as the API's routes call them, acting as "cli" in
    `tenant`."""

    def __init__(
        self,
        where: str,
        schedules: ScheduleService,
        dead_letters_: DeadLetterService,
        occurrences_: OccurrenceService,
        flow_keys_: FlowKeyService,
        tenant: str = DEFAULT_TENANT,
        tenants_: TenantService | None = None,
        tenant_keys_: TenantKeyService | None = None,
        endpoints_: EndpointService | None = None,
        topics_: TopicService | None = None,
        activity_: ActivityService | None = None,
    ) -> None:
        self.where = where
        self._caller = Caller(tenant, CLI_ACTOR)
        self._activity = activity_
        self._tenants = tenants_
        self._tenant_keys = tenant_keys_
        self._endpoints = endpoints_
        self._topics = topics_
        self._schedules = schedules
        self._dead_letters = dead_letters_
        self._occurrences = occurrences_
        self._flow_keys = flow_keys_

    async def list_schedules(
        self, where: ScheduleFilter, limit: int, cursor: str | None
    ) -> Page[ScheduleOut]:
        return await pages.schedules(
            self._schedules, replace(where, tenant=self._caller.tenant), limit, cursor
        )

    async def get_schedule(self, schedule_id: uuid.UUID) -> ScheduleOut:
        return ScheduleOut.of(await self._schedules.get(schedule_id, caller=self._caller))

    async def occurrences(
        self, schedule_id: uuid.UUID, limit: int, cursor: str | None
    ) -> Page[OccurrenceOut]:
        return await pages.occurrences(self._schedules, self._caller, schedule_id, limit, cursor)

    async def events(
        self, schedule_id: uuid.UUID, limit: int, cursor: str | None
    ) -> Page[ScheduleEventOut]:
        return await pages.events(self._schedules, self._caller, schedule_id, limit, cursor)

    async def attempts(
        self, occurrence_id: uuid.UUID, limit: int, cursor: str | None
    ) -> Page[AttemptOut]:
        return await pages.attempts(self._occurrences, self._caller, occurrence_id, limit, cursor)

    async def pause(self, schedule_id: uuid.UUID) -> ScheduleOut:
        return ScheduleOut.of(await self._schedules.pause(schedule_id, caller=self._caller))

    async def resume(self, schedule_id: uuid.UUID) -> ScheduleOut:
        return ScheduleOut.of(await self._schedules.resume(schedule_id, caller=self._caller))

    async def cancel(self, schedule_id: uuid.UUID) -> ScheduleOut:
        return ScheduleOut.of(await self._schedules.cancel(schedule_id, caller=self._caller))

    async def trigger(self, schedule_id: uuid.UUID) -> OccurrenceOut:
        return OccurrenceOut.of(await self._schedules.trigger(schedule_id, caller=self._caller))

    async def patch(
        self, schedule_id: uuid.UUID, changes: dict[str, Any], if_match: Versions
    ) -> ScheduleOut:
        patch = SchedulePatch.model_validate(changes)
        changed = await self._schedules.patch(schedule_id, patch, if_match, caller=self._caller)
        return ScheduleOut.of(changed)

    async def backfill(
        self, schedule_id: uuid.UUID, start: datetime, end: datetime
    ) -> BackfillResult:
        done = await self._schedules.backfill(schedule_id, start, end, caller=self._caller)
        return BackfillResult.of(done.ticks, done.created)

    async def dead_letters(
        self, where: DeadLetterFilter, limit: int, cursor: str | None
    ) -> Page[DeadLetterOut]:
        return await pages.dead_letters(
            self._dead_letters, replace(where, tenant=self._caller.tenant), limit, cursor
        )

    async def dead_letter(self, occurrence_id: uuid.UUID) -> DeadLetterOut:
        return DeadLetterOut.of_dead_letter(
            await self._dead_letters.get(occurrence_id, caller=self._caller)
        )

    async def replay(self, occurrence_id: uuid.UUID) -> None:
        await self._dead_letters.replay(occurrence_id, caller=self._caller)

    async def replay_many(
        self, ids: Sequence[uuid.UUID] | None, where: DeadLetterFilter
    ) -> Replayed:
        done = await self._dead_letters.replay_many(ids, where, caller=self._caller)
        return Replayed(replayed=done.count, occurrence_ids=done.occurrence_ids)

    async def discard(self, occurrence_id: uuid.UUID) -> None:
        await self._dead_letters.discard(occurrence_id, caller=self._caller)

    async def flow_keys(self, limit: int, cursor: str | None) -> Page[FlowKeyOut]:
        return await pages.flow_keys(self._flow_keys, self._caller, limit, cursor)

    async def flow_key(self, key: str) -> FlowKeyOut:
        return FlowKeyOut.of(await self._flow_keys.get(key, tenant=self._caller.tenant))

    async def activity(
        self,
        window: Literal["1h", "24h"],
        *,
        tenant: str | None,
        schedule_id: uuid.UUID | None,
        flow_key: str | None,
        endpoint_id: uuid.UUID | None,
    ) -> ActivityOut:
        assert self._activity is not None
        found = await self._activity.read(
            self._caller,
            Window(window),
            tenant=tenant,
            schedule_id=schedule_id,
            flow_key=flow_key,
            endpoint_id=endpoint_id,
        )
        return ActivityOut.of(found)

    async def put_flow_key(
        self, key: str, limits: FlowLimits, if_match: Versions
    ) -> tuple[FlowKeyOut, bool]:
        found, created = await self._flow_keys.put(
            key, limits, if_match, tenant=self._caller.tenant
        )
        return FlowKeyOut.of(found), created

    async def clear_flow_key_backoff(self, key: str) -> FlowKeyOut:
        return FlowKeyOut.of(await self._flow_keys.clear_backoff(key, tenant=self._caller.tenant))

    def _tenant_service(self) -> TenantService:
        assert self._tenants is not None, "built without the tenants' service"
        return self._tenants

    def _key_service(self) -> TenantKeyService:
        assert self._tenant_keys is not None, "built without the tenant keys' service"
        return self._tenant_keys

    async def tenants(self, limit: int, cursor: str | None) -> Page[TenantOut]:
        return await pages.tenants(self._tenant_service(), limit, cursor)

    async def tenant(self, tenant: str) -> TenantOut:
        return TenantOut.of(await self._tenant_service().get(tenant))

    async def put_tenant(
        self, tenant: str, spec: TenantSpec, if_match: Versions = None
    ) -> tuple[TenantOut, bool]:
        found, created = await self._tenant_service().put(
            tenant, spec, if_match, actor=self._caller.actor
        )
        return TenantOut.of(found), created

    async def delete_tenant(self, tenant: str) -> None:
        await self._tenant_service().delete(tenant, actor=self._caller.actor)

    async def tenant_keys(self, tenant: str, limit: int, cursor: str | None) -> Page[TenantKeyOut]:
        return await pages.tenant_keys(self._key_service(), tenant, limit, cursor)

    async def make_tenant_key(
        self, tenant: str, name: str, role: KeyRole, expires_at: datetime | None
    ) -> MadeKey:
        made, secret = await self._key_service().make(
            tenant, name, role, expires_at, actor=self._caller.actor
        )
        return MadeKey.made(made, secret)

    async def revoke_tenant_key(self, tenant: str, key_id: uuid.UUID) -> None:
        await self._key_service().revoke(tenant, key_id, actor=self._caller.actor)

    async def tenant_events(
        self, tenant: str, limit: int, cursor: str | None
    ) -> Page[TenantEventOut]:
        return await pages.tenant_events(self._tenant_service(), tenant, limit, cursor)

    def _endpoint_service(self) -> EndpointService:
        assert self._endpoints is not None, "built without the endpoints' service"
        return self._endpoints

    async def endpoints(self, limit: int, cursor: str | None) -> Page[EndpointOut]:
        return await pages.endpoints(self._endpoint_service(), self._caller, limit, cursor)

    async def endpoint(self, endpoint_id: uuid.UUID) -> EndpointOut:
        return EndpointOut.of(await self._endpoint_service().get(endpoint_id, self._caller))

    async def create_endpoint(self, body: EndpointIn) -> EndpointOut:
        found, secret = await self._endpoint_service().create(body.spec(), self._caller)
        return _with_newest(found, secret)

    async def update_endpoint(
        self, endpoint_id: uuid.UUID, changes: EndpointPatch, if_match: Versions
    ) -> EndpointOut:
        found = await self._endpoint_service().update(
            endpoint_id, changes.changes(), if_match, self._caller
        )
        return EndpointOut.of(found)

    async def delete_endpoint(self, endpoint_id: uuid.UUID, if_match: Versions) -> None:
        await self._endpoint_service().delete(endpoint_id, if_match, self._caller)

    async def rotate_endpoint_secret(
        self, endpoint_id: uuid.UUID, overlap_seconds: int | None
    ) -> EndpointOut:
        overlap = DEFAULT_OVERLAP_SECONDS if overlap_seconds is None else overlap_seconds
        found, secret = await self._endpoint_service().rotate(endpoint_id, overlap, self._caller)
        return _with_newest(found, secret)

    async def enable_endpoint(self, endpoint_id: uuid.UUID) -> EndpointOut:
        return EndpointOut.of(await self._endpoint_service().enable(endpoint_id, self._caller))

    async def endpoint_events(
        self, endpoint_id: uuid.UUID, limit: int, cursor: str | None
    ) -> Page[EndpointEventOut]:
        return await pages.endpoint_events(
            self._endpoint_service(), endpoint_id, self._caller, limit, cursor
        )

    async def endpoint_attempts(
        self, endpoint_id: uuid.UUID, limit: int, cursor: str | None
    ) -> Page[EndpointAttemptOut]:
        return await pages.endpoint_attempts(
            self._endpoint_service(), endpoint_id, self._caller, limit, cursor
        )

    def _topic_service(self) -> TopicService:
        assert self._topics is not None, "built without the topics' service"
        return self._topics

    async def topics(self, limit: int, cursor: str | None) -> Page[TopicOut]:
        return await pages.topics(self._topic_service(), self._caller, limit, cursor)

    async def topic(self, name: str) -> TopicOut:
        return TopicOut.of(await self._topic_service().get(name, self._caller))

    async def put_topic(
        self, name: str, description: str | None, if_match: Versions
    ) -> tuple[TopicOut, bool]:
        found, created = await self._topic_service().put(name, description, if_match, self._caller)
        return TopicOut.of(found), created

    async def delete_topic(self, name: str, if_match: Versions) -> None:
        await self._topic_service().delete(name, if_match, self._caller)

    async def subscriptions(
        self, topic: str | None, limit: int, cursor: str | None
    ) -> Page[SubscriptionOut]:
        return await pages.subscriptions(self._topic_service(), self._caller, topic, limit, cursor)

    async def subscription(self, subscription_id: uuid.UUID) -> SubscriptionOut:
        found = await self._topic_service().subscription(subscription_id, self._caller)
        return SubscriptionOut.of(found)

    async def subscribe(self, body: SubscriptionIn) -> SubscriptionOut:
        return SubscriptionOut.of(await self._topic_service().subscribe(body.spec(), self._caller))

    async def update_subscription(
        self, subscription_id: uuid.UUID, changes: SubscriptionPatch, if_match: Versions
    ) -> SubscriptionOut:
        found = await self._topic_service().change(
            subscription_id, changes.changes(), if_match, self._caller
        )
        return SubscriptionOut.of(found)

    async def unsubscribe(self, subscription_id: uuid.UUID, if_match: Versions) -> None:
        await self._topic_service().unsubscribe(subscription_id, if_match, self._caller)


def _with_newest(found: Endpoint, secret: str) -> EndpointOut:
    """The endpoint as the answer that made `secret` shows it: with its value, by the id
    of the newest secret, as the route answers it."""
    return EndpointOut.of(found, {found.secrets[-1].id: secret})
