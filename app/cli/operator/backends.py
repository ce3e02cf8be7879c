"""What the operator commands run against: a running service over HTTP (`--url`, with an API
key: the key's name is the actor), or the database itself (`--conn`, break-glass: no key, the
actor is "cli"). Both answer in the HTTP API's shapes, with the API's cursors, and refuse
with the domain's errors, so a command is written once for both.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Literal, Protocol

from app.api import pages
from app.api.activity_schemas import ActivityOut
from app.api.endpoint_schemas import (
    EndpointAttemptOut,
    EndpointEventOut,
    EndpointIn,
    EndpointOut,
    EndpointPatch,
)
from app.api.flow_key_schemas import FlowKeyIn, FlowKeyOut
from app.api.occurrence_schemas import AttemptOut, DeadLetterOut, OccurrenceOut, Replayed
from app.api.schedule_schemas import BackfillResult, ScheduleEventOut, ScheduleOut
from app.api.schemas import Page
from app.api.tenant_schemas import (
    MadeKey,
    QuotasIn,
    TenantEventOut,
    TenantIn,
    TenantKeyOut,
    TenantOut,
)
from app.api.topic_schemas import SubscriptionIn, SubscriptionOut, SubscriptionPatch, TopicOut
from app.client import AsyncClient, ProblemError
from app.client import errors as problems
from app.domain import errors
from app.domain.activity import Window
from app.domain.endpoints import DEFAULT_OVERLAP_SECONDS, Endpoint
from app.domain.filters import DeadLetterFilter, ScheduleFilter, ScheduleSort
from app.domain.flow import FlowLimits, Ordering
from app.domain.ids import format_instant
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

Versions = frozenset[int] | None  # If-Match: the versions a change may apply to


class Operator(Protocol):
    """The operations of the operator commands."""

    where: str  # the service or database, as error messages name it

    async def list_schedules(
        self, where: ScheduleFilter, limit: int, cursor: str | None
    ) -> Page[ScheduleOut]: ...
    async def get_schedule(self, schedule_id: uuid.UUID) -> ScheduleOut: ...
    async def occurrences(
        self, schedule_id: uuid.UUID, limit: int, cursor: str | None
    ) -> Page[OccurrenceOut]: ...
    async def events(
        self, schedule_id: uuid.UUID, limit: int, cursor: str | None
    ) -> Page[ScheduleEventOut]: ...
    async def attempts(
        self, occurrence_id: uuid.UUID, limit: int, cursor: str | None
    ) -> Page[AttemptOut]: ...
    async def pause(self, schedule_id: uuid.UUID) -> ScheduleOut: ...
    async def resume(self, schedule_id: uuid.UUID) -> ScheduleOut: ...
    async def cancel(self, schedule_id: uuid.UUID) -> ScheduleOut: ...
    async def trigger(self, schedule_id: uuid.UUID) -> OccurrenceOut: ...
    async def patch(
        self, schedule_id: uuid.UUID, changes: dict[str, Any], if_match: Versions
    ) -> ScheduleOut: ...
    async def backfill(
        self, schedule_id: uuid.UUID, start: datetime, end: datetime
    ) -> BackfillResult: ...
    async def dead_letters(
        self, where: DeadLetterFilter, limit: int, cursor: str | None
    ) -> Page[DeadLetterOut]: ...
    async def dead_letter(self, occurrence_id: uuid.UUID) -> DeadLetterOut: ...
    async def replay(self, occurrence_id: uuid.UUID) -> None: ...
    async def replay_many(
        self, ids: Sequence[uuid.UUID] | None, where: DeadLetterFilter
    ) -> Replayed: ...
    async def discard(self, occurrence_id: uuid.UUID) -> None: ...
    async def flow_keys(self, limit: int, cursor: str | None) -> Page[FlowKeyOut]: ...
    async def flow_key(self, key: str) -> FlowKeyOut: ...
    async def activity(
        self,
        window: Literal["1h", "24h"],
        *,
        tenant: str | None,
        schedule_id: uuid.UUID | None,
        flow_key: str | None,
        endpoint_id: uuid.UUID | None,
    ) -> ActivityOut: ...
    async def put_flow_key(
        self, key: str, limits: FlowLimits, if_match: Versions
    ) -> tuple[FlowKeyOut, bool]: ...
    async def clear_flow_key_backoff(self, key: str) -> FlowKeyOut: ...
    async def tenants(self, limit: int, cursor: str | None) -> Page[TenantOut]: ...
    async def tenant(self, tenant: str) -> TenantOut: ...
    async def put_tenant(
        self, tenant: str, spec: TenantSpec, if_match: Versions = None
    ) -> tuple[TenantOut, bool]: ...
    async def delete_tenant(self, tenant: str) -> None: ...
    async def tenant_keys(
        self, tenant: str, limit: int, cursor: str | None
    ) -> Page[TenantKeyOut]: ...
    async def make_tenant_key(
        self, tenant: str, name: str, role: KeyRole, expires_at: datetime | None
    ) -> MadeKey: ...
    async def revoke_tenant_key(self, tenant: str, key_id: uuid.UUID) -> None: ...
    async def tenant_events(
        self, tenant: str, limit: int, cursor: str | None
    ) -> Page[TenantEventOut]: ...
    async def endpoints(self, limit: int, cursor: str | None) -> Page[EndpointOut]: ...
    async def endpoint(self, endpoint_id: uuid.UUID) -> EndpointOut: ...
    async def create_endpoint(self, body: EndpointIn) -> EndpointOut: ...
    async def update_endpoint(
        self, endpoint_id: uuid.UUID, changes: EndpointPatch, if_match: Versions
    ) -> EndpointOut: ...
    async def delete_endpoint(self, endpoint_id: uuid.UUID, if_match: Versions) -> None: ...
    async def rotate_endpoint_secret(
        self, endpoint_id: uuid.UUID, overlap_seconds: int | None
    ) -> EndpointOut: ...
    async def enable_endpoint(self, endpoint_id: uuid.UUID) -> EndpointOut: ...
    async def endpoint_events(
        self, endpoint_id: uuid.UUID, limit: int, cursor: str | None
    ) -> Page[EndpointEventOut]: ...
    async def endpoint_attempts(
        self, endpoint_id: uuid.UUID, limit: int, cursor: str | None
    ) -> Page[EndpointAttemptOut]: ...
    async def topics(self, limit: int, cursor: str | None) -> Page[TopicOut]: ...
    async def topic(self, name: str) -> TopicOut: ...
    async def put_topic(
        self, name: str, description: str | None, if_match: Versions
    ) -> tuple[TopicOut, bool]: ...
    async def delete_topic(self, name: str, if_match: Versions) -> None: ...
    async def subscriptions(
        self, topic: str | None, limit: int, cursor: str | None
    ) -> Page[SubscriptionOut]: ...
    async def subscription(self, subscription_id: uuid.UUID) -> SubscriptionOut: ...
    async def subscribe(self, body: SubscriptionIn) -> SubscriptionOut: ...
    async def update_subscription(
        self, subscription_id: uuid.UUID, changes: SubscriptionPatch, if_match: Versions
    ) -> SubscriptionOut: ...
    async def unsubscribe(self, subscription_id: uuid.UUID, if_match: Versions) -> None: ...


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


# -- over HTTP ------------------------------------------------------------------------------

# A refusal of the service as the domain's error of the same meaning; what is not one of
# these (401, 403, 413, 503 once its retries are spent) is a ChronoqError naming its status.
_AS_DOMAIN: dict[type[ProblemError], type[errors.ChronoqError]] = {
    problems.ValidationError: errors.InvalidInputError,
    problems.BadRequestError: errors.InvalidInputError,
    problems.NotFoundError: errors.NotFoundError,
    problems.ConflictError: errors.ConflictError,
    problems.PreconditionFailedError: errors.PreconditionFailedError,
}


def domain_error(problem: ProblemError) -> errors.ChronoqError:
    """The domain's error for a refusal of the service, with the field it names."""
    kind = _AS_DOMAIN.get(type(problem))
    first = problem.errors[0] if problem.errors else None
    if kind is errors.InvalidInputError and first is not None:
        return errors.InvalidInputError(
            first.detail, pointer=first.pointer, parameter=first.parameter
        )
    if kind is not None:
        return kind(problem.detail)
    return errors.ChronoqError(f"{problem.status} {problem.title}: {problem.detail}")


def _versions(if_match: Versions) -> str | None:
    if not if_match:
        return None
    return ", ".join(f'"{v}"' for v in sorted(if_match))


def _limits_in(limits: FlowLimits) -> FlowKeyIn:
    return FlowKeyIn(
        rate=limits.rate,
        period_seconds=limits.period_seconds,
        burst=limits.burst,
        parallelism=limits.parallelism,
        ordering=limits.ordering.value,
        paused=limits.paused,
    )


def limits_of(found: FlowKeyOut) -> FlowLimits | None:
    """A key's limits as the domain holds them; None for a key never put."""
    if found.version is None:
        return None
    return FlowLimits(
        rate=found.rate,
        period_seconds=found.period_seconds or 1.0,
        burst=found.burst,
        parallelism=found.parallelism,
        ordering=Ordering(found.ordering),
        paused=found.paused,
    )


class HttpOperator:
    """A running service's API through the client; its refusals as the domain's errors."""

    def __init__(self, where: str, client: AsyncClient) -> None:
        self.where = where
        self._client = client

    async def list_schedules(
        self, where: ScheduleFilter, limit: int, cursor: str | None
    ) -> Page[ScheduleOut]:
        return await self._client.list_schedules(
            status=None if where.status is None else where.status.value,
            event_type=where.event_type,
            target_type=where.target_type,  # type: ignore[arg-type]
            labels=where.labels or None,
            name=where.name,
            name_prefix=where.name_prefix,
            failing=where.failing or None,
            due_before=where.due_before,
            flow_key=where.flow_key,
            sort=None if where.sort is ScheduleSort.CREATED else where.sort.value,  # type: ignore[arg-type]
            limit=limit,
            cursor=cursor,
        )

    async def get_schedule(self, schedule_id: uuid.UUID) -> ScheduleOut:
        return await self._client.get_schedule(schedule_id)

    async def occurrences(
        self, schedule_id: uuid.UUID, limit: int, cursor: str | None
    ) -> Page[OccurrenceOut]:
        return await self._client.list_occurrences(schedule_id, limit=limit, cursor=cursor)

    async def events(
        self, schedule_id: uuid.UUID, limit: int, cursor: str | None
    ) -> Page[ScheduleEventOut]:
        return await self._client.list_events(schedule_id, limit=limit, cursor=cursor)

    async def attempts(
        self, occurrence_id: uuid.UUID, limit: int, cursor: str | None
    ) -> Page[AttemptOut]:
        return await self._client.list_attempts(occurrence_id, limit=limit, cursor=cursor)

    async def pause(self, schedule_id: uuid.UUID) -> ScheduleOut:
        return await self._client.pause_schedule(schedule_id)

    async def resume(self, schedule_id: uuid.UUID) -> ScheduleOut:
        return await self._client.resume_schedule(schedule_id)

    async def cancel(self, schedule_id: uuid.UUID) -> ScheduleOut:
        return await self._client.cancel_schedule(schedule_id)

    async def trigger(self, schedule_id: uuid.UUID) -> OccurrenceOut:
        return await self._client.trigger_schedule(schedule_id)

    async def patch(
        self, schedule_id: uuid.UUID, changes: dict[str, Any], if_match: Versions
    ) -> ScheduleOut:
        return await self._client.patch_schedule(schedule_id, changes, if_match=_versions(if_match))

    async def backfill(
        self, schedule_id: uuid.UUID, start: datetime, end: datetime
    ) -> BackfillResult:
        return await self._client.backfill_schedule(schedule_id, start, end)

    async def dead_letters(
        self, where: DeadLetterFilter, limit: int, cursor: str | None
    ) -> Page[DeadLetterOut]:
        return await self._client.list_dead_letters(
            schedule_id=where.schedule_id,
            event_type=where.event_type,
            subscription_id=where.subscription_id,
            endpoint_id=where.endpoint_id,
            dead_lettered_after=where.dead_lettered_after,
            limit=limit,
            cursor=cursor,
        )

    async def dead_letter(self, occurrence_id: uuid.UUID) -> DeadLetterOut:
        return await self._client.get_dead_letter(occurrence_id)

    async def replay(self, occurrence_id: uuid.UUID) -> None:
        await self._client.replay_dead_letter(occurrence_id)

    async def replay_many(
        self, ids: Sequence[uuid.UUID] | None, where: DeadLetterFilter
    ) -> Replayed:
        return await self._client.replay_dead_letters(
            occurrence_ids=ids,
            schedule_id=where.schedule_id,
            event_type=where.event_type,
            subscription_id=where.subscription_id,
            endpoint_id=where.endpoint_id,
            dead_lettered_after=where.dead_lettered_after,
        )

    async def discard(self, occurrence_id: uuid.UUID) -> None:
        await self._client.discard_dead_letter(occurrence_id)

    async def flow_keys(self, limit: int, cursor: str | None) -> Page[FlowKeyOut]:
        return await self._client.list_flow_keys(limit=limit, cursor=cursor)

    async def flow_key(self, key: str) -> FlowKeyOut:
        return await self._client.get_flow_key(key)

    async def activity(
        self,
        window: Literal["1h", "24h"],
        *,
        tenant: str | None,
        schedule_id: uuid.UUID | None,
        flow_key: str | None,
        endpoint_id: uuid.UUID | None,
    ) -> ActivityOut:
        return await self._client.get_activity(
            window=window,
            tenant=tenant,
            schedule_id=schedule_id,
            flow_key=flow_key,
            endpoint_id=endpoint_id,
        )

    async def put_flow_key(
        self, key: str, limits: FlowLimits, if_match: Versions
    ) -> tuple[FlowKeyOut, bool]:
        found = await self._client.put_flow_key(
            key, _limits_in(limits), if_match=_versions(if_match)
        )
        return found, found.version == 1

    async def clear_flow_key_backoff(self, key: str) -> FlowKeyOut:
        return await self._client.clear_flow_key_backoff(key)

    async def tenants(self, limit: int, cursor: str | None) -> Page[TenantOut]:
        return await self._client.list_tenants(limit=limit, cursor=cursor)

    async def tenant(self, tenant: str) -> TenantOut:
        return await self._client.get_tenant(tenant)

    async def put_tenant(
        self, tenant: str, spec: TenantSpec, if_match: Versions = None
    ) -> tuple[TenantOut, bool]:
        quotas = spec.quotas
        wanted = QuotasIn(
            max_schedules=quotas.max_schedules,
            max_creates_per_minute=quotas.max_creates_per_minute,
            max_deliveries_per_second=quotas.max_deliveries_per_second,
            max_in_flight=quotas.max_in_flight,
        )
        body = TenantIn(
            display_name=spec.display_name,
            weight=spec.weight,
            paused=spec.paused,
            quotas=wanted,
            retention_seconds=spec.retention_seconds,
            events_target=spec.events_target,
        )
        found = await self._client.put_tenant(tenant, body, if_match=_versions(if_match))
        return found, found.version == 1

    async def delete_tenant(self, tenant: str) -> None:
        await self._client.delete_tenant(tenant)

    async def tenant_keys(self, tenant: str, limit: int, cursor: str | None) -> Page[TenantKeyOut]:
        return await self._client.list_tenant_keys(tenant, limit=limit, cursor=cursor)

    async def make_tenant_key(
        self, tenant: str, name: str, role: KeyRole, expires_at: datetime | None
    ) -> MadeKey:
        body: dict[str, Any] = {"name": name, "role": role.value}
        if expires_at is not None:
            body["expires_at"] = format_instant(expires_at)
        return await self._client.create_tenant_key(tenant, body)

    async def revoke_tenant_key(self, tenant: str, key_id: uuid.UUID) -> None:
        await self._client.revoke_tenant_key(tenant, key_id)

    async def tenant_events(
        self, tenant: str, limit: int, cursor: str | None
    ) -> Page[TenantEventOut]:
        return await self._client.list_tenant_events(tenant, limit=limit, cursor=cursor)

    async def endpoints(self, limit: int, cursor: str | None) -> Page[EndpointOut]:
        return await self._client.list_endpoints(limit=limit, cursor=cursor)

    async def endpoint(self, endpoint_id: uuid.UUID) -> EndpointOut:
        return await self._client.get_endpoint(endpoint_id)

    async def create_endpoint(self, body: EndpointIn) -> EndpointOut:
        return await self._client.create_endpoint(body)

    async def update_endpoint(
        self, endpoint_id: uuid.UUID, changes: EndpointPatch, if_match: Versions
    ) -> EndpointOut:
        return await self._client.patch_endpoint(endpoint_id, changes, if_match=_versions(if_match))

    async def delete_endpoint(self, endpoint_id: uuid.UUID, if_match: Versions) -> None:
        await self._client.delete_endpoint(endpoint_id, if_match=_versions(if_match))

    async def rotate_endpoint_secret(
        self, endpoint_id: uuid.UUID, overlap_seconds: int | None
    ) -> EndpointOut:
        return await self._client.rotate_endpoint_secret(
            endpoint_id, overlap_seconds=overlap_seconds
        )

    async def enable_endpoint(self, endpoint_id: uuid.UUID) -> EndpointOut:
        return await self._client.enable_endpoint(endpoint_id)

    async def endpoint_events(
        self, endpoint_id: uuid.UUID, limit: int, cursor: str | None
    ) -> Page[EndpointEventOut]:
        return await self._client.list_endpoint_events(endpoint_id, limit=limit, cursor=cursor)

    async def endpoint_attempts(
        self, endpoint_id: uuid.UUID, limit: int, cursor: str | None
    ) -> Page[EndpointAttemptOut]:
        return await self._client.list_endpoint_attempts(endpoint_id, limit=limit, cursor=cursor)

    async def topics(self, limit: int, cursor: str | None) -> Page[TopicOut]:
        return await self._client.list_topics(limit=limit, cursor=cursor)

    async def topic(self, name: str) -> TopicOut:
        return await self._client.get_topic(name)

    async def put_topic(
        self, name: str, description: str | None, if_match: Versions
    ) -> tuple[TopicOut, bool]:
        found = await self._client.put_topic(
            name, {"description": description}, if_match=_versions(if_match)
        )
        return found, found.version == 1

    async def delete_topic(self, name: str, if_match: Versions) -> None:
        await self._client.delete_topic(name, if_match=_versions(if_match))

    async def subscriptions(
        self, topic: str | None, limit: int, cursor: str | None
    ) -> Page[SubscriptionOut]:
        return await self._client.list_subscriptions(topic=topic, limit=limit, cursor=cursor)

    async def subscription(self, subscription_id: uuid.UUID) -> SubscriptionOut:
        return await self._client.get_subscription(subscription_id)

    async def subscribe(self, body: SubscriptionIn) -> SubscriptionOut:
        return await self._client.create_subscription(body)

    async def update_subscription(
        self, subscription_id: uuid.UUID, changes: SubscriptionPatch, if_match: Versions
    ) -> SubscriptionOut:
        return await self._client.patch_subscription(
            subscription_id, changes, if_match=_versions(if_match)
        )

    async def unsubscribe(self, subscription_id: uuid.UUID, if_match: Versions) -> None:
        await self._client.delete_subscription(subscription_id, if_match=_versions(if_match))
