"""The operator commands' backend over HTTP: a running service (`--url`, with an API key: the
key's name is the actor) through the client, which answers in the API's own shapes. Its
refusals are raised as the domain's errors (`domain_error`, which app/cli/operator/run.py
applies), so a command refuses alike on either backend.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

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
from app.cli.operator.backends import Versions
from app.client import AsyncClient, ProblemError
from app.client import errors as problems
from app.domain import errors
from app.domain.filters import DeadLetterFilter, ScheduleFilter, ScheduleSort
from app.domain.flow import FlowLimits
from app.domain.ids import format_instant
from app.domain.tenant_keys import KeyRole
from app.domain.tenants import TenantSpec

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
