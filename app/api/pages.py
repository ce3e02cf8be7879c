"""Each list of the API as a page: the services' rows read one past the limit, shown in the
answer's model, with the cursor of the last one shown when more follow. The routes answer
with these, and the operator commands on the database (app/cli/operator/database_backend.py)
print them, so both page alike under the same cursors."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import TypeVar

from app.api import pagination
from app.api.endpoint_schemas import EndpointAttemptOut, EndpointEventOut, EndpointOut
from app.api.flow_key_schemas import FlowKeyOut
from app.api.occurrence_schemas import AttemptOut, DeadLetterOut, OccurrenceOut
from app.api.schedule_schemas import ScheduleEventOut, ScheduleOut
from app.api.schemas import Page
from app.api.tenant_schemas import TenantEventOut, TenantKeyOut, TenantOut
from app.api.topic_schemas import SubscriptionOut, TopicOut
from app.domain.filters import DeadLetterFilter, ScheduleAfter, ScheduleFilter
from app.domain.ids import format_instant
from app.domain.occurrence import DeadLetter, OccurrenceStatus
from app.domain.schedule import Schedule
from app.domain.tenants import Caller
from app.service.dead_letters import DeadLetterService
from app.service.endpoints import EndpointService
from app.service.flow_keys import FlowKeyService
from app.service.occurrences import OccurrenceService
from app.service.schedules import ScheduleService
from app.service.tenant_keys import TenantKeyService
from app.service.tenants import TenantService
from app.service.topics import TopicService

R = TypeVar("R")
T = TypeVar("T")


def _page(
    found: Sequence[R], limit: int, shown: Callable[[R], T], key: Callable[[R], tuple[str, ...]]
) -> Page[T]:
    """`found` holds up to limit + 1 rows: the page, and one more when there is more."""
    page = found[:limit]
    more = pagination.encode(*key(page[-1])) if len(found) > limit else None
    return Page(items=[shown(row) for row in page], next_cursor=more)


async def schedules(
    service: ScheduleService, where: ScheduleFilter, limit: int, cursor: str | None
) -> Page[ScheduleOut]:
    """In the order `where.sort` names; the cursor says where the last page ended in it."""
    after = pagination.decode_schedule(cursor, where.sort)
    found = await service.list_schedules(where, limit=limit + 1, after=after)

    def key(s: Schedule) -> tuple[str, ...]:
        last = ScheduleAfter(
            where.sort, s.id, next_fire_at=s.next_fire_at, failures=s.consecutive_failures
        )
        return pagination.schedule_key(last)

    return _page(found, limit, ScheduleOut.of, key)


async def occurrences(
    service: ScheduleService,
    caller: Caller,
    schedule_id: uuid.UUID,
    limit: int,
    cursor: str | None,
    status: OccurrenceStatus | None = None,
) -> Page[OccurrenceOut]:
    found = await service.history(
        schedule_id,
        limit=limit + 1,
        after=pagination.decode_instant_id(cursor),
        status=status,
        caller=caller,
    )
    return _page(
        found, limit, OccurrenceOut.of, lambda o: (format_instant(o.fire_at), str(o.occurrence_id))
    )


async def events(
    service: ScheduleService,
    caller: Caller,
    schedule_id: uuid.UUID,
    limit: int,
    cursor: str | None,
) -> Page[ScheduleEventOut]:
    found = await service.events(
        schedule_id, limit=limit + 1, after=pagination.decode_id(cursor), caller=caller
    )
    return _page(found, limit, ScheduleEventOut.of, lambda e: (str(e.id),))


async def attempts(
    service: OccurrenceService,
    caller: Caller,
    occurrence_id: uuid.UUID,
    limit: int,
    cursor: str | None,
) -> Page[AttemptOut]:
    """Oldest first: a replay's attempts follow those of the occurrence's earlier life."""
    found = await service.attempts(
        occurrence_id,
        limit=limit + 1,
        after=pagination.decode_instant_id(cursor),
        tenant=caller.tenant,
    )
    return _page(found, limit, AttemptOut.of, lambda a: (format_instant(a.started_at), str(a.id)))


def _dead_letter_key(d: DeadLetter) -> tuple[str, str]:
    occurrence = d.occurrence
    assert occurrence.dead_lettered_at is not None
    return format_instant(occurrence.dead_lettered_at), str(occurrence.occurrence_id)


async def dead_letters(
    service: DeadLetterService, where: DeadLetterFilter, limit: int, cursor: str | None
) -> Page[DeadLetterOut]:
    found = await service.list_dead_letters(
        where, limit=limit + 1, after=pagination.decode_instant_id(cursor)
    )
    return _page(found, limit, DeadLetterOut.of_dead_letter, _dead_letter_key)


async def flow_keys(
    service: FlowKeyService, caller: Caller, limit: int, cursor: str | None
) -> Page[FlowKeyOut]:
    """The caller's tenant's keys in name order: those with limits and those only schedules
    name."""
    found = await service.list(
        after=pagination.decode_key(cursor), limit=limit + 1, tenant=caller.tenant
    )
    return _page(found, limit, FlowKeyOut.of, lambda k: (k.key,))


async def waiting_on_key(
    service: FlowKeyService, caller: Caller, key: str, limit: int, cursor: str | None
) -> Page[OccurrenceOut]:
    """The occurrences waiting on the key, in fire order."""
    found = await service.waiting(
        key,
        after=pagination.decode_instant_id(cursor),
        limit=limit + 1,
        tenant=caller.tenant,
    )
    return _page(
        found, limit, OccurrenceOut.of, lambda o: (format_instant(o.fire_at), str(o.occurrence_id))
    )


async def tenants(service: TenantService, limit: int, cursor: str | None) -> Page[TenantOut]:
    """Tenants in id order."""
    found = await service.list(after=pagination.decode_tenant(cursor), limit=limit + 1)
    return _page(found, limit, TenantOut.of, lambda t: (t.id,))


async def tenant_keys(
    service: TenantKeyService, tenant: str, limit: int, cursor: str | None
) -> Page[TenantKeyOut]:
    """A tenant's keys, oldest first."""
    found = await service.list(tenant, after=pagination.decode_id(cursor), limit=limit + 1)
    return _page(found, limit, TenantKeyOut.of, lambda k: (str(k.id),))


async def tenant_events(
    service: TenantService, tenant: str, limit: int, cursor: str | None
) -> Page[TenantEventOut]:
    """A tenant's audit events, oldest first."""
    found = await service.events(tenant, after=pagination.decode_id(cursor), limit=limit + 1)
    return _page(found, limit, TenantEventOut.of, lambda e: (str(e.id),))


async def endpoints(
    service: EndpointService, caller: Caller, limit: int, cursor: str | None
) -> Page[EndpointOut]:
    """A tenant's endpoints, oldest first."""
    found = await service.page(caller, after=pagination.decode_id(cursor), limit=limit + 1)
    return _page(found, limit, EndpointOut.of, lambda e: (str(e.id),))


async def endpoint_events(
    service: EndpointService, endpoint_id: uuid.UUID, caller: Caller, limit: int, cursor: str | None
) -> Page[EndpointEventOut]:
    """An endpoint's events, oldest first."""
    found = await service.events(
        endpoint_id, caller, after=pagination.decode_id(cursor), limit=limit + 1
    )
    return _page(found, limit, EndpointEventOut.of, lambda e: (str(e.id),))


async def endpoint_attempts(
    service: EndpointService, endpoint_id: uuid.UUID, caller: Caller, limit: int, cursor: str | None
) -> Page[EndpointAttemptOut]:
    """The attempts that went to an endpoint, newest first."""
    found = await service.attempts(
        endpoint_id, caller, before=pagination.decode_instant_id(cursor), limit=limit + 1
    )
    return _page(
        found,
        limit,
        lambda pair: EndpointAttemptOut.of_endpoint(*pair),
        lambda pair: (format_instant(pair[1].started_at), str(pair[1].id)),
    )


async def topics(
    service: TopicService, caller: Caller, limit: int, cursor: str | None
) -> Page[TopicOut]:
    """A tenant's topics in name order (names share the flow keys' alphabet)."""
    found = await service.page(caller, after=pagination.decode_key(cursor), limit=limit + 1)
    return _page(found, limit, TopicOut.of, lambda t: (t.name,))


async def subscriptions(
    service: TopicService, caller: Caller, topic: str | None, limit: int, cursor: str | None
) -> Page[SubscriptionOut]:
    """A tenant's subscriptions (of one topic), oldest first."""
    found = await service.subscriptions(
        caller, topic=topic, after=pagination.decode_id(cursor), limit=limit + 1
    )
    return _page(found, limit, SubscriptionOut.of, lambda s: (str(s.id),))
