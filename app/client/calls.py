"""Each operation of the HTTP API as a `Call`: the request to send and how to read its
answer. The clients (app/client/clients.py) send them, synchronously or not; nothing here
does I/O.

Bodies are given as the API's own models or as plain mappings (sent as they are, so a
mapping can say what a model would refuse, and the service answers for it). Answers are
read into the models `openapi/openapi.json` describes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter

from app.api.activity_schemas import ActivityOut
from app.api.endpoint_schemas import (
    EndpointAttemptOut,
    EndpointEventOut,
    EndpointIn,
    EndpointOut,
    EndpointPatch,
)
from app.api.flow_key_schemas import FlowKeyIn, FlowKeyOut
from app.api.occurrence_schemas import (
    AttemptOut,
    DeadLetterOut,
    OccurrenceOut,
    ReplayAccepted,
    Replayed,
)
from app.api.schedule_schemas import BackfillResult, BatchCreated, ScheduleEventOut, ScheduleOut
from app.api.schemas import Health, Page
from app.api.tenant_schemas import (
    MadeKey,
    TenantEventOut,
    TenantIn,
    TenantKeyIn,
    TenantKeyOut,
    TenantOut,
)
from app.api.topic_schemas import (
    SubscriptionIn,
    SubscriptionOut,
    SubscriptionPatch,
    TopicIn,
    TopicOut,
)
from app.api.trigger_schemas import Preview, PreviewRequest
from app.domain.schedule import SchedulePatch, ScheduleSpec

T = TypeVar("T")

Id = uuid.UUID | str
Body = BaseModel | Mapping[str, Any]
Version = int | str | None  # a version number (ScheduleOut.version), an ETag as sent, or *


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request and the reading of its 2xx answer."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    params: tuple[tuple[str, str], ...] = ()
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def repeatable(self) -> bool:
        """Whether sending it again after an answer that may have been lost changes
        nothing more: reads, PUT and DELETE, and changes guarded by If-Match (a repeat is a
        412) or by an Idempotency-Key (a repeat is the first answer)."""
        if self.method in ("GET", "HEAD", "PUT", "DELETE"):
            return True
        return "If-Match" in self.headers or "Idempotency-Key" in self.headers

    def at(self, cursor: str | None) -> Call[T]:
        """The same list call for the page after `cursor`."""
        params = tuple((k, v) for k, v in self.params if k != "cursor")
        if cursor is not None:
            params += (("cursor", cursor),)
        return replace(self, params=params)


def _reader(kind: Any) -> Callable[[httpx.Response], Any]:
    adapter: TypeAdapter[Any] = TypeAdapter(kind)

    def read(response: httpx.Response) -> Any:
        return adapter.validate_json(response.content)

    return read


def _nothing(response: httpx.Response) -> None:
    return None


def _json(body: Body) -> Any:
    if isinstance(body, BaseModel):
        # exclude_unset: a patch says only what it changes (a null it sets is kept)
        return body.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return dict(body)


def _segment(value: Id) -> str:
    return quote(str(value), safe="")


def _if_match(version: Version) -> dict[str, str]:
    if version is None:
        return {}
    if isinstance(version, int):
        return {"If-Match": f'"{version}"'}
    return {"If-Match": version}


def _params(**values: Any) -> tuple[tuple[str, str], ...]:
    pairs: list[tuple[str, str]] = []
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, Mapping):  # labels: label=key:value, each
            pairs.extend(("label", f"{k}:{v}") for k, v in value.items())
        elif isinstance(value, bool):
            pairs.append((name, "true" if value else "false"))
        elif isinstance(value, datetime):
            pairs.append((name, value.isoformat()))
        else:
            pairs.append((name, str(value)))
    return tuple(pairs)


_SCHEDULE = _reader(ScheduleOut)
_OCCURRENCE = _reader(OccurrenceOut)
_FLOW_KEY = _reader(FlowKeyOut)
_TENANT = _reader(TenantOut)
_ENDPOINT = _reader(EndpointOut)
_TOPIC = _reader(TopicOut)
_SUBSCRIPTION = _reader(SubscriptionOut)

# -- the service ------------------------------------------------------------------------


def health() -> Call[Health]:
    """The process is up (GET /healthz)."""
    return Call("GET", "/healthz", _reader(Health))


# -- schedules --------------------------------------------------------------------------


def create_schedule(
    spec: ScheduleSpec | Body, *, idempotency_key: str | None = None
) -> Call[ScheduleOut]:
    """Create a schedule (POST /v1/schedules). It is sent with an `Idempotency-Key` (a new
    one unless given), so a repeat after a lost answer returns the schedule the first one
    made instead of making another."""
    key = str(uuid.uuid4()) if idempotency_key is None else idempotency_key
    headers = {"Idempotency-Key": key}
    return Call("POST", "/v1/schedules", _SCHEDULE, body=_json(spec), headers=headers)


def create_schedules(specs: Iterable[ScheduleSpec | Body]) -> Call[BatchCreated]:
    """Create up to 1,000 schedules at once, all or none (POST /v1/schedules/batch)."""
    body = {"items": [_json(spec) for spec in specs]}
    return Call("POST", "/v1/schedules/batch", _reader(BatchCreated), body=body)


def get_schedule(schedule_id: Id) -> Call[ScheduleOut]:
    """One schedule (GET /v1/schedules/{id})."""
    return Call("GET", f"/v1/schedules/{_segment(schedule_id)}", _SCHEDULE)


def list_schedules(
    *,
    status: str | None = None,
    event_type: str | None = None,
    target_type: Literal["webhook", "rabbitmq"] | None = None,
    labels: Mapping[str, str] | None = None,
    name: str | None = None,
    name_prefix: str | None = None,
    failing: bool | None = None,
    due_before: datetime | None = None,
    flow_key: str | None = None,
    sort: Literal["created", "next_fire_at", "failures"] | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[Page[ScheduleOut]]:
    """A page of schedules with the API's filters (GET /v1/schedules): newest first, or
    in the order `sort` names (a cursor belongs to the sort that issued it). `failing`:
    only schedules failing in a row or with a recent dead letter; `due_before`: only those
    with an occurrence due by then (an aware instant); `flow_key`: only those of the key."""
    params = _params(
        status=status,
        event_type=event_type,
        target_type=target_type,
        label=labels,
        name=name,
        name_prefix=name_prefix,
        failing=failing,
        due_before=due_before,
        flow_key=flow_key,
        sort=sort,
        limit=limit,
        cursor=cursor,
    )
    return Call("GET", "/v1/schedules", _reader(Page[ScheduleOut]), params=params)


def patch_schedule(
    schedule_id: Id, changes: SchedulePatch | Body, *, if_match: Version = None
) -> Call[ScheduleOut]:
    """Change some of a schedule's fields (PATCH /v1/schedules/{id})."""
    path = f"/v1/schedules/{_segment(schedule_id)}"
    return Call("PATCH", path, _SCHEDULE, body=_json(changes), headers=_if_match(if_match))


def _schedule_action(schedule_id: Id, verb: str, if_match: Version) -> Call[ScheduleOut]:
    path = f"/v1/schedules/{_segment(schedule_id)}/{verb}"
    return Call("POST", path, _SCHEDULE, headers=_if_match(if_match))


def pause_schedule(schedule_id: Id, *, if_match: Version = None) -> Call[ScheduleOut]:
    """Pause a schedule: nothing fires until it is resumed (POST .../pause)."""
    return _schedule_action(schedule_id, "pause", if_match)


def resume_schedule(schedule_id: Id, *, if_match: Version = None) -> Call[ScheduleOut]:
    """Resume a paused schedule at its next future tick (POST .../resume)."""
    return _schedule_action(schedule_id, "resume", if_match)


def cancel_schedule(schedule_id: Id, *, if_match: Version = None) -> Call[ScheduleOut]:
    """Cancel a schedule and its pending occurrences (DELETE /v1/schedules/{id})."""
    path = f"/v1/schedules/{_segment(schedule_id)}"
    return Call("DELETE", path, _SCHEDULE, headers=_if_match(if_match))


def trigger_schedule(schedule_id: Id, *, if_match: Version = None) -> Call[OccurrenceOut]:
    """Fire a schedule now, beside its ticks (POST .../trigger); the occurrence made."""
    path = f"/v1/schedules/{_segment(schedule_id)}/trigger"
    return Call("POST", path, _OCCURRENCE, headers=_if_match(if_match))


def backfill_schedule(
    schedule_id: Id, start: datetime, end: datetime, *, if_match: Version = None
) -> Call[BackfillResult]:
    """Fire the ticks of [start, end] a schedule has not fired (POST .../backfill)."""
    path = f"/v1/schedules/{_segment(schedule_id)}/backfill"
    body = {"from": start.isoformat(), "to": end.isoformat()}
    return Call("POST", path, _reader(BackfillResult), body=body, headers=_if_match(if_match))


def list_occurrences(
    schedule_id: Id,
    *,
    status: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[Page[OccurrenceOut]]:
    """A page of a schedule's occurrences, latest first (GET .../occurrences)."""
    path = f"/v1/schedules/{_segment(schedule_id)}/occurrences"
    params = _params(status=status, limit=limit, cursor=cursor)
    return Call("GET", path, _reader(Page[OccurrenceOut]), params=params)


def list_events(
    schedule_id: Id, *, limit: int | None = None, cursor: str | None = None
) -> Call[Page[ScheduleEventOut]]:
    """A page of a schedule's audit events, oldest first (GET .../events)."""
    path = f"/v1/schedules/{_segment(schedule_id)}/events"
    params = _params(limit=limit, cursor=cursor)
    return Call("GET", path, _reader(Page[ScheduleEventOut]), params=params)


# -- occurrences ------------------------------------------------------------------------


def get_occurrence(occurrence_id: Id) -> Call[OccurrenceOut]:
    """One occurrence (GET /v1/occurrences/{id})."""
    return Call("GET", f"/v1/occurrences/{_segment(occurrence_id)}", _OCCURRENCE)


def list_attempts(
    occurrence_id: Id, *, limit: int | None = None, cursor: str | None = None
) -> Call[Page[AttemptOut]]:
    """A page of an occurrence's delivery attempts, oldest first (GET .../attempts)."""
    path = f"/v1/occurrences/{_segment(occurrence_id)}/attempts"
    params = _params(limit=limit, cursor=cursor)
    return Call("GET", path, _reader(Page[AttemptOut]), params=params)


# -- dead letters -----------------------------------------------------------------------


def list_dead_letters(
    *,
    schedule_id: Id | None = None,
    event_type: str | None = None,
    subscription_id: Id | None = None,
    endpoint_id: Id | None = None,
    dead_lettered_after: datetime | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[Page[DeadLetterOut]]:
    """A page of dead letters, most recently dead-lettered first (GET /v1/dead-letters).
    `subscription_id`: only the deliveries to that subscription (a topic's fan-out);
    `endpoint_id`: only what went to that endpoint, its deliveries and its schedules';
    `dead_lettered_after`: only those dead-lettered after that (aware) instant."""
    params = _params(
        schedule_id=schedule_id,
        event_type=event_type,
        subscription_id=subscription_id,
        endpoint_id=endpoint_id,
        dead_lettered_after=dead_lettered_after,
        limit=limit,
        cursor=cursor,
    )
    return Call("GET", "/v1/dead-letters", _reader(Page[DeadLetterOut]), params=params)


def get_dead_letter(occurrence_id: Id) -> Call[DeadLetterOut]:
    """One dead letter (GET /v1/dead-letters/{id})."""
    path = f"/v1/dead-letters/{_segment(occurrence_id)}"
    return Call("GET", path, _reader(DeadLetterOut))


def replay_dead_letter(occurrence_id: Id) -> Call[ReplayAccepted]:
    """Deliver a dead letter again: same occurrence id, attempts reset, due now."""
    path = f"/v1/dead-letters/{_segment(occurrence_id)}/replay"
    return Call("POST", path, _reader(ReplayAccepted))


def replay_dead_letters(
    *,
    occurrence_ids: Iterable[Id] | None = None,
    schedule_id: Id | None = None,
    event_type: str | None = None,
    subscription_id: Id | None = None,
    endpoint_id: Id | None = None,
    dead_lettered_after: datetime | None = None,
) -> Call[Replayed]:
    """Replay many dead letters: those listed, or those the filters match together (a
    schedule's, an event type's, a subscription's deliveries, what went to an endpoint,
    what was dead-lettered after an instant) (POST /v1/dead-letters/replay)."""
    body: dict[str, Any] = {}
    if occurrence_ids is not None:
        body["occurrence_ids"] = [str(i) for i in occurrence_ids]
    if schedule_id is not None:
        body["schedule_id"] = str(schedule_id)
    if event_type is not None:
        body["event_type"] = event_type
    if subscription_id is not None:
        body["subscription_id"] = str(subscription_id)
    if endpoint_id is not None:
        body["endpoint_id"] = str(endpoint_id)
    if dead_lettered_after is not None:
        body["dead_lettered_after"] = dead_lettered_after.isoformat()
    return Call("POST", "/v1/dead-letters/replay", _reader(Replayed), body=body)


def discard_dead_letter(occurrence_id: Id) -> Call[None]:
    """Delete a dead letter for good (DELETE /v1/dead-letters/{id})."""
    return Call("DELETE", f"/v1/dead-letters/{_segment(occurrence_id)}", _nothing)


# -- flow keys --------------------------------------------------------------------------


def get_activity(
    *,
    window: Literal["1h", "24h"] | None = None,
    tenant: str | None = None,
    schedule_id: uuid.UUID | str | None = None,
    flow_key: str | None = None,
    endpoint_id: uuid.UUID | str | None = None,
) -> Call[ActivityOut]:
    """Deliveries, failures, dead letters and lateness minute by minute over the last hour
    or day, of the fleet or of at most one subject (GET /v1/activity)."""
    params = _params(
        window=window,
        tenant=tenant,
        schedule_id=schedule_id,
        flow_key=flow_key,
        endpoint_id=endpoint_id,
    )
    return Call("GET", "/v1/activity", _reader(ActivityOut), params=params)


def list_flow_keys(
    *, limit: int | None = None, cursor: str | None = None
) -> Call[Page[FlowKeyOut]]:
    """A page of the flow keys that have limits, by name (GET /v1/flow-keys)."""
    params = _params(limit=limit, cursor=cursor)
    return Call("GET", "/v1/flow-keys", _reader(Page[FlowKeyOut]), params=params)


def get_flow_key(key: str) -> Call[FlowKeyOut]:
    """A key's limits and live figures; a key never put has null limits."""
    return Call("GET", f"/v1/flow-keys/{_segment(key)}", _FLOW_KEY)


def list_waiting_occurrences(
    key: str, *, limit: int | None = None, cursor: str | None = None
) -> Call[Page[OccurrenceOut]]:
    """A page of the occurrences waiting on a key, in fire order
    (GET /v1/flow-keys/{key}/occurrences)."""
    path = f"/v1/flow-keys/{_segment(key)}/occurrences"
    params = _params(limit=limit, cursor=cursor)
    return Call("GET", path, _reader(Page[OccurrenceOut]), params=params)


def put_flow_key(
    key: str, limits: FlowKeyIn | Body, *, if_match: Version = None
) -> Call[FlowKeyOut]:
    """Set a key's limits, whole (PUT /v1/flow-keys/{key})."""
    path = f"/v1/flow-keys/{_segment(key)}"
    return Call("PUT", path, _FLOW_KEY, body=_json(limits), headers=_if_match(if_match))


def clear_flow_key_backoff(key: str) -> Call[FlowKeyOut]:
    """End a destination's back-off of a key (POST /v1/flow-keys/{key}/clear-backoff)."""
    return Call("POST", f"/v1/flow-keys/{_segment(key)}/clear-backoff", _FLOW_KEY)


def delete_flow_key(key: str, *, if_match: Version = None) -> Call[None]:
    """Remove a key's limits and back-off (DELETE /v1/flow-keys/{key})."""
    path = f"/v1/flow-keys/{_segment(key)}"
    return Call("DELETE", path, _nothing, headers=_if_match(if_match))


# -- tenants ----------------------------------------------------------------------------


def list_tenants(*, limit: int | None = None, cursor: str | None = None) -> Call[Page[TenantOut]]:
    """A page of the tenants, by id (GET /v1/tenants)."""
    params = _params(limit=limit, cursor=cursor)
    return Call("GET", "/v1/tenants", _reader(Page[TenantOut]), params=params)


def get_tenant(tenant: str) -> Call[TenantOut]:
    """One tenant (GET /v1/tenants/{tenant})."""
    return Call("GET", f"/v1/tenants/{_segment(tenant)}", _TENANT)


def put_tenant(tenant: str, body: TenantIn | Body, *, if_match: Version = None) -> Call[TenantOut]:
    """Create or replace a tenant, whole (PUT /v1/tenants/{tenant})."""
    path = f"/v1/tenants/{_segment(tenant)}"
    return Call("PUT", path, _TENANT, body=_json(body), headers=_if_match(if_match))


def delete_tenant(tenant: str, *, if_match: Version = None) -> Call[None]:
    """Remove a tenant with its ended schedules and flow keys (DELETE /v1/tenants/{tenant});
    refused while it has live schedules."""
    path = f"/v1/tenants/{_segment(tenant)}"
    return Call("DELETE", path, _nothing, headers=_if_match(if_match))


def create_tenant_key(tenant: str, body: TenantKeyIn | Body) -> Call[MadeKey]:
    """Make a key that acts in the tenant only (POST /v1/tenants/{tenant}/keys): the answer's
    `key` is shown this once."""
    path = f"/v1/tenants/{_segment(tenant)}/keys"
    return Call("POST", path, _reader(MadeKey), body=_json(body))


def list_tenant_keys(
    tenant: str, *, limit: int | None = None, cursor: str | None = None
) -> Call[Page[TenantKeyOut]]:
    """A page of a tenant's keys, oldest first, never their secret."""
    params = _params(limit=limit, cursor=cursor)
    path = f"/v1/tenants/{_segment(tenant)}/keys"
    return Call("GET", path, _reader(Page[TenantKeyOut]), params=params)


def revoke_tenant_key(tenant: str, key_id: Id) -> Call[None]:
    """Revoke a tenant's key (DELETE /v1/tenants/{tenant}/keys/{key_id})."""
    path = f"/v1/tenants/{_segment(tenant)}/keys/{_segment(key_id)}"
    return Call("DELETE", path, _nothing)


def list_tenant_events(
    tenant: str, *, limit: int | None = None, cursor: str | None = None
) -> Call[Page[TenantEventOut]]:
    """A page of a tenant's audit events, oldest first: the changes of the tenant and of its
    keys, a removed tenant's too (GET /v1/tenants/{tenant}/events)."""
    params = _params(limit=limit, cursor=cursor)
    path = f"/v1/tenants/{_segment(tenant)}/events"
    return Call("GET", path, _reader(Page[TenantEventOut]), params=params)


# -- endpoints --------------------------------------------------------------------------


def create_endpoint(body: EndpointIn | Body) -> Call[EndpointOut]:
    """Make an endpoint, a reusable webhook destination of the tenant (POST
    /v1/endpoints). Its generated signing secret is in this answer only
    (`signing_secrets[-1].secret`). It is sent once: the API takes no Idempotency-Key here,
    so a repeat after a lost answer could make a second endpoint."""
    return Call("POST", "/v1/endpoints", _ENDPOINT, body=_json(body))


def list_endpoints(
    *, limit: int | None = None, cursor: str | None = None
) -> Call[Page[EndpointOut]]:
    """A page of the tenant's endpoints, oldest first, with their state and live figures
    (GET /v1/endpoints); never a secret's value."""
    params = _params(limit=limit, cursor=cursor)
    return Call("GET", "/v1/endpoints", _reader(Page[EndpointOut]), params=params)


def get_endpoint(endpoint_id: Id) -> Call[EndpointOut]:
    """One endpoint, its circuit's state and its live figures (GET /v1/endpoints/{id})."""
    return Call("GET", f"/v1/endpoints/{_segment(endpoint_id)}", _ENDPOINT)


def patch_endpoint(
    endpoint_id: Id, changes: EndpointPatch | Body, *, if_match: Version = None
) -> Call[EndpointOut]:
    """Change some of an endpoint's fields (PATCH /v1/endpoints/{id}); `flow` and
    `circuit` are replaced whole when sent."""
    path = f"/v1/endpoints/{_segment(endpoint_id)}"
    return Call("PATCH", path, _ENDPOINT, body=_json(changes), headers=_if_match(if_match))


def delete_endpoint(endpoint_id: Id, *, if_match: Version = None) -> Call[None]:
    """Remove an endpoint and its secrets (DELETE /v1/endpoints/{id}); refused (409) while a
    pending or paused schedule targets it."""
    path = f"/v1/endpoints/{_segment(endpoint_id)}"
    return Call("DELETE", path, _nothing, headers=_if_match(if_match))


def rotate_endpoint_secret(
    endpoint_id: Id, *, overlap_seconds: int | None = None
) -> Call[EndpointOut]:
    """A new signing secret, its value in this answer only: the newest of
    `signing_secrets` (POST .../secrets/rotate). The live ones go on signing for
    `overlap_seconds` (None: the service's default, a day). Sent once, as a repeat would
    make another secret."""
    path = f"/v1/endpoints/{_segment(endpoint_id)}/secrets/rotate"
    body = {} if overlap_seconds is None else {"overlap_seconds": overlap_seconds}
    return Call("POST", path, _ENDPOINT, body=body)


def enable_endpoint(endpoint_id: Id) -> Call[EndpointOut]:
    """Close an endpoint's circuit, whatever its state, a disabled one's too (POST
    .../enable)."""
    return Call("POST", f"/v1/endpoints/{_segment(endpoint_id)}/enable", _ENDPOINT)


def list_endpoint_events(
    endpoint_id: Id, *, limit: int | None = None, cursor: str | None = None
) -> Call[Page[EndpointEventOut]]:
    """A page of an endpoint's events, oldest first: its writes, rotations and its
    circuit's changes of state, a removed endpoint's too (GET .../events)."""
    path = f"/v1/endpoints/{_segment(endpoint_id)}/events"
    params = _params(limit=limit, cursor=cursor)
    return Call("GET", path, _reader(Page[EndpointEventOut]), params=params)


def list_endpoint_attempts(
    endpoint_id: Id, *, limit: int | None = None, cursor: str | None = None
) -> Call[Page[EndpointAttemptOut]]:
    """A page of the attempts that went to an endpoint, newest first, each with its
    occurrence: how the receiver answered lately (GET .../attempts)."""
    path = f"/v1/endpoints/{_segment(endpoint_id)}/attempts"
    params = _params(limit=limit, cursor=cursor)
    return Call("GET", path, _reader(Page[EndpointAttemptOut]), params=params)


# -- topics and subscriptions -----------------------------------------------------------


def put_topic(
    topic: str, body: TopicIn | Body | None = None, *, if_match: Version = None
) -> Call[TopicOut]:
    """Create or replace a topic, whole (PUT /v1/topics/{topic}); None: no description.
    A topic's version is 1 when the call made it."""
    path = f"/v1/topics/{_segment(topic)}"
    sent = {} if body is None else _json(body)
    return Call("PUT", path, _TOPIC, body=sent, headers=_if_match(if_match))


def list_topics(*, limit: int | None = None, cursor: str | None = None) -> Call[Page[TopicOut]]:
    """A page of the tenant's topics in name order, each with how many subscriptions it
    has (GET /v1/topics)."""
    params = _params(limit=limit, cursor=cursor)
    return Call("GET", "/v1/topics", _reader(Page[TopicOut]), params=params)


def get_topic(topic: str) -> Call[TopicOut]:
    """One topic (GET /v1/topics/{topic})."""
    return Call("GET", f"/v1/topics/{_segment(topic)}", _TOPIC)


def delete_topic(topic: str, *, if_match: Version = None) -> Call[None]:
    """Remove a topic and its subscriptions (DELETE /v1/topics/{topic}); refused (409) while
    a pending or paused schedule targets it."""
    path = f"/v1/topics/{_segment(topic)}"
    return Call("DELETE", path, _nothing, headers=_if_match(if_match))


def create_subscription(body: SubscriptionIn | Body) -> Call[SubscriptionOut]:
    """Subscribe an endpoint to a topic, with the event types (globs) and payload fields it
    takes (POST /v1/subscriptions); a topic or an endpoint the tenant does not have is a 422
    naming `topic` or `endpoint_id`. Sent once: the API takes no Idempotency-Key here, so a
    repeat after a lost answer could make a second subscription."""
    return Call("POST", "/v1/subscriptions", _SUBSCRIPTION, body=_json(body))


def list_subscriptions(
    *, topic: str | None = None, limit: int | None = None, cursor: str | None = None
) -> Call[Page[SubscriptionOut]]:
    """A page of the tenant's subscriptions (only `topic`'s, when given), oldest first
    (GET /v1/subscriptions)."""
    params = _params(topic=topic, limit=limit, cursor=cursor)
    return Call("GET", "/v1/subscriptions", _reader(Page[SubscriptionOut]), params=params)


def get_subscription(subscription_id: Id) -> Call[SubscriptionOut]:
    """One subscription (GET /v1/subscriptions/{id})."""
    return Call("GET", f"/v1/subscriptions/{_segment(subscription_id)}", _SUBSCRIPTION)


def patch_subscription(
    subscription_id: Id, changes: SubscriptionPatch | Body, *, if_match: Version = None
) -> Call[SubscriptionOut]:
    """Change some of a subscription's fields (PATCH /v1/subscriptions/{id}): `event_types`
    and `match` are replaced whole when sent (null: every event type, any payload). It
    applies to the occurrences that fan out after it."""
    path = f"/v1/subscriptions/{_segment(subscription_id)}"
    return Call("PATCH", path, _SUBSCRIPTION, body=_json(changes), headers=_if_match(if_match))


def delete_subscription(subscription_id: Id, *, if_match: Version = None) -> Call[None]:
    """Unsubscribe (DELETE /v1/subscriptions/{id}): occurrences that fan out after it make
    no delivery to it; the deliveries made already go on."""
    path = f"/v1/subscriptions/{_segment(subscription_id)}"
    return Call("DELETE", path, _nothing, headers=_if_match(if_match))


# -- triggers ---------------------------------------------------------------------------


def preview_trigger(request: PreviewRequest | Body) -> Call[Preview]:
    """When a trigger would fire next (POST /v1/triggers/preview)."""
    return Call("POST", "/v1/triggers/preview", _reader(Preview), body=_json(request))
