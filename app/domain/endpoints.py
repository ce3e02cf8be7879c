"""Endpoints: named, reusable webhook destinations of a tenant, each with its signing
secrets, its flow limits and its circuit breaker (DESIGN section 15).

Invariants:
- An endpoint's deliveries are limited by its own flow key, which no request can name
  (`endpoint_key`: the name holds `~`, outside a key name's alphabet), so its limits, its
  figures and its circuit are the endpoint's alone, under its tenant's limits.
- The circuit is a pure function of the attempts' outcomes in the order they settle and
  of the clock (`circuit_after`): the store applies it under the key's lock, so replicas
  agree on one state.
"""

from __future__ import annotations

import base64
import secrets
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from urllib.parse import urlsplit

from app.domain.errors import InvalidInputError, NotFoundError
from app.domain.flow import FlowLimits
from app.domain.target import EndpointTarget, Target
from app.domain.tenants import endpoint_key, stored_key_or_none

# A secret is live for this long after a rotation by default (a day), and at most a month.
DEFAULT_OVERLAP_SECONDS = 86_400
MAX_OVERLAP_SECONDS = 30 * 86_400
# Secrets an endpoint holds at once, expired ones aside: a rotation past it is refused.
MAX_LIVE_SECRETS = 10
MAX_DESCRIPTION = 1000
MAX_ENDPOINT_NAME = 200


def delivery_key(tenant: str, flow_key: str | None, target: Target) -> str | None:
    """The stored flow key a schedule's deliveries count against: its endpoint's, or its
    own (`stored_key_or_none`). A schedule that targets an endpoint names no key."""
    if isinstance(target, EndpointTarget):
        return endpoint_key(tenant, target.endpoint_id)
    return stored_key_or_none(tenant, flow_key)


def new_signing_secret() -> str:
    """A Standard Webhooks secret: `whsec_` and 32 random bytes in base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def missing_endpoint(endpoint_id: uuid.UUID | str) -> NotFoundError:
    return NotFoundError(f"endpoint {endpoint_id} not found")


class CircuitState(StrEnum):
    """Where an endpoint's circuit stands. Stored: closed (NULL), open, disabled; shown
    `half_open` while open with its cooldown over, when the next attempt is the probe."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"
    DISABLED = "disabled"


@dataclass(frozen=True, slots=True)
class CircuitSettings:
    """When a circuit opens, how long it waits before a probe, and when it gives up.
    `disable_after_seconds` None: never disabled."""

    failure_threshold: int = 10
    cooldown_seconds: float = 30.0
    max_cooldown_seconds: float = 600.0
    disable_after_seconds: float | None = 432_000.0


@dataclass(frozen=True, slots=True)
class Circuit:
    """A circuit as stored on its key's row: `state` is closed, open or disabled (never
    half_open, which is derived: `shown`); `opened_at` when the current outage began (its
    first opening), `cooldown` the wait after its last opening, `changed_at` the last
    change of state, `probe_at` when the next probe may start (the key's back-off)."""

    state: CircuitState = CircuitState.CLOSED
    failures: int = 0
    changed_at: datetime | None = None
    opened_at: datetime | None = None
    cooldown: float | None = None
    probe_at: datetime | None = None

    def shown(self, now: datetime) -> CircuitState:
        if self.state is CircuitState.OPEN and (self.probe_at is None or self.probe_at <= now):
            return CircuitState.HALF_OPEN
        return self.state


class CircuitEvent(StrEnum):
    """A change of a circuit's state: each is an audit event of its endpoint and an
    operator event of its tenant (`endpoint.<kind>`)."""

    OPENED = "opened"
    REOPENED = "reopened"
    RECOVERED = "recovered"
    DISABLED = "disabled"
    ENABLED = "enabled"


@dataclass(frozen=True, slots=True)
class CircuitChange:
    """A circuit after a run of outcomes, and what changed on the way."""

    circuit: Circuit
    events: tuple[CircuitEvent, ...] = ()


def circuit_after(
    circuit: Circuit, outcomes: list[bool], settings: CircuitSettings, now: datetime
) -> CircuitChange:
    """The circuit once `outcomes` (True: a 2xx) settle at `now`, in order.

    Closed: a success resets the count; a failure adds one, and the threshold opens it
    for the cooldown. Open: an outcome is an attempt that started before it opened or is
    the probe; a success closes it (the receiver answers again), a failure once the
    cooldown is over (the probe's) reopens it for twice the cooldown, up to the maximum,
    or disables it when the outage has lasted `disable_after_seconds`. Disabled: outcomes
    change nothing but the count, until an operator enables it."""
    events: list[CircuitEvent] = []
    state, failures = circuit.state, circuit.failures
    changed_at, opened_at = circuit.changed_at, circuit.opened_at
    cooldown, probe_at = circuit.cooldown, circuit.probe_at
    for success in outcomes:
        if state is CircuitState.DISABLED:
            failures = 0 if success else failures + 1
            continue
        if success:
            failures = 0
            if state is CircuitState.OPEN:
                state, changed_at, opened_at, cooldown, probe_at = (
                    CircuitState.CLOSED,
                    now,
                    None,
                    None,
                    None,
                )
                events.append(CircuitEvent.RECOVERED)
            continue
        failures += 1
        if state is CircuitState.CLOSED:
            if failures >= settings.failure_threshold:
                state, changed_at, opened_at = CircuitState.OPEN, now, now
                cooldown = settings.cooldown_seconds
                probe_at = now + timedelta(seconds=cooldown)
                events.append(CircuitEvent.OPENED)
            continue
        # Open: a failure before the probe is one that started before the circuit opened.
        if probe_at is not None and probe_at > now:
            continue
        outage = (now - opened_at).total_seconds() if opened_at is not None else 0.0
        limit = settings.disable_after_seconds
        if limit is not None and outage >= limit:
            state, changed_at, probe_at = CircuitState.DISABLED, now, None
            events.append(CircuitEvent.DISABLED)
            continue
        cooldown = min((cooldown or settings.cooldown_seconds) * 2, settings.max_cooldown_seconds)
        cooldown = max(cooldown, settings.cooldown_seconds)
        changed_at, probe_at = now, now + timedelta(seconds=cooldown)
        events.append(CircuitEvent.REOPENED)
    return CircuitChange(
        Circuit(state, failures, changed_at, opened_at, cooldown, probe_at), tuple(events)
    )


def enabled(circuit: Circuit, now: datetime) -> CircuitChange:
    """An operator's enable: closed, its count reset; nothing when it was closed."""
    if circuit.state is CircuitState.CLOSED and circuit.failures == 0:
        return CircuitChange(circuit)
    event = (CircuitEvent.ENABLED,) if circuit.state is not CircuitState.CLOSED else ()
    return CircuitChange(Circuit(changed_at=now), event)


@dataclass(frozen=True, slots=True)
class SecretInfo:
    """One of an endpoint's signing secrets as answers show it: never the secret."""

    id: uuid.UUID
    created_at: datetime
    expires_at: datetime | None
    hint: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EndpointSpec:
    """An endpoint as a create gives it (a PATCH gives some of these)."""

    name: str | None = None
    url: str
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)
    timeout_seconds: float = 10.0
    description: str | None = None
    flow: FlowLimits | None = None
    circuit: CircuitSettings = CircuitSettings()

    def check(self) -> EndpointSpec:
        """The spec itself, or an error naming the field that does not fit the others
        (a PATCH may change one of two bounds, or the URL beside the headers)."""
        if "@" in urlsplit(self.url).netloc:
            for name in self.headers:
                if name.lower() == "authorization":
                    raise InvalidInputError(
                        "a url with userinfo (user:password@) sends its own Authorization "
                        "header: give the credentials in the url or in this header, not both",
                        pointer=f"#/headers/{name}",
                    )
        if self.circuit.max_cooldown_seconds < self.circuit.cooldown_seconds:
            raise InvalidInputError(
                "max_cooldown_seconds is less than cooldown_seconds",
                pointer="#/circuit/max_cooldown_seconds",
            )
        return self


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """An endpoint as read: what it was given, its secrets (never their values), its
    circuit, and its key's live figures."""

    id: uuid.UUID
    tenant: str
    spec: EndpointSpec
    version: int
    created_at: datetime
    updated_at: datetime
    circuit: Circuit
    state: CircuitState
    secrets: tuple[SecretInfo, ...] = ()
    in_flight: int = 0
    waiting: int = 0
    backoff_until: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EndpointEvent:
    """One change of an endpoint: a write (`actor` its key's name), a rotation, or its
    circuit's change of state (`actor` "system"); `detail` what it carries."""

    id: uuid.UUID
    endpoint_id: uuid.UUID
    kind: str
    at: datetime
    actor: str | None
    detail: dict[str, object] | None = None


@dataclass(frozen=True, slots=True)
class CircuitChanged:
    """An endpoint whose circuit a settle moved: what happened, with the failures in a
    row and the cooldown it then waits (None: closed or disabled)."""

    endpoint_id: uuid.UUID
    tenant: str
    event: CircuitEvent
    failures: int
    cooldown: float | None
