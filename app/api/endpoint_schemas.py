"""Wire models of /v1/endpoints: an endpoint as created and changed, and as read with its
secrets (never their values but in the answer that made one), its circuit and its live
figures; its events."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.api.flow_key_schemas import FlowLimitsIn
from app.api.occurrence_schemas import AttemptOut
from app.domain.endpoints import (
    DEFAULT_OVERLAP_SECONDS,
    MAX_DESCRIPTION,
    MAX_OVERLAP_SECONDS,
    CircuitSettings,
    Endpoint,
    EndpointEvent,
    EndpointSpec,
    SecretInfo,
)
from app.domain.errors import InvalidInputError
from app.domain.flow import FlowLimits
from app.domain.limits import (
    MAX_HEADER_VALUE_BYTES,
    MAX_HEADERS,
    MAX_TIMEOUT_SECONDS,
    InputModel,
    Name,
    one_line,
    without_null,
)
from app.domain.occurrence import Attempt
from app.domain.secrets import redacted_headers, redacted_url
from app.domain.target import URL_PATTERN, CheckedHeaders, CheckedUrl, WebhookRequest

_NAME = "A name unique in the tenant, on one line; null: none"
_DESCRIPTION = f"Free text about the endpoint (up to {MAX_DESCRIPTION} characters); null: none"
_FLOW = (
    "The flow limits of all its deliveries, fleet-wide (rate, burst, parallelism, ordering, "
    "as a flow key's); null: none"
)
_CIRCUIT = "When its circuit breaker opens, how long it waits to probe, and when it disables"
_THRESHOLD = "Failed attempts in a row (a 2xx resets the count) that open the circuit"
_COOLDOWN = "Seconds the circuit stays open before one attempt probes the endpoint"
_MAX_COOLDOWN = "The longest cooldown: each failed probe doubles it up to this"
_DISABLE_AFTER = (
    "Seconds of outage (from the first opening) after which a failed probe disables the "
    "endpoint until POST /v1/endpoints/{id}/enable; null: never"
)
MAX_COOLDOWN_SECONDS = 7 * 86_400
MAX_DISABLE_AFTER_SECONDS = 365 * 86_400


class CircuitIn(InputModel):
    """An endpoint's circuit breaker, whole: a field left out is at its default."""

    failure_threshold: int = Field(default=10, ge=1, le=1000, description=_THRESHOLD)
    cooldown_seconds: float = Field(
        default=30.0, ge=1, le=MAX_COOLDOWN_SECONDS, description=_COOLDOWN
    )
    max_cooldown_seconds: float = Field(
        default=600.0, ge=1, le=MAX_COOLDOWN_SECONDS, description=_MAX_COOLDOWN
    )
    disable_after_seconds: float | None = Field(
        default=432_000.0, ge=60, le=MAX_DISABLE_AFTER_SECONDS, description=_DISABLE_AFTER
    )

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"failure_threshold": 5, "cooldown_seconds": 30}],
        }
    )

    def settings(self) -> CircuitSettings:
        return CircuitSettings(
            failure_threshold=self.failure_threshold,
            cooldown_seconds=self.cooldown_seconds,
            max_cooldown_seconds=self.max_cooldown_seconds,
            disable_after_seconds=self.disable_after_seconds,
        )


Description = Annotated[str, one_line()]


def _limits(flow: FlowLimitsIn | None) -> FlowLimits | None:
    """An endpoint's flow limits; incoherent ones are a 422 naming the field in `flow`."""
    if flow is None:
        return None
    try:
        return flow.limits()
    except InvalidInputError as exc:
        pointer = "#/flow" + (exc.pointer or "#")[1:]
        raise InvalidInputError(exc.detail, pointer=pointer) from None


class EndpointIn(WebhookRequest):
    """A new endpoint: where its deliveries go and how, its limits and its circuit."""

    name: Name | None = Field(default=None, description=_NAME, examples=["billing-eu"])
    description: Description | None = Field(
        default=None, max_length=MAX_DESCRIPTION, description=_DESCRIPTION
    )
    flow: FlowLimitsIn | None = Field(default=None, description=_FLOW)
    circuit: CircuitIn = Field(default_factory=CircuitIn, description=_CIRCUIT)

    def spec(self) -> EndpointSpec:
        return EndpointSpec(
            name=self.name,
            url=self.url,
            method=self.method,
            headers=dict(self.headers),
            timeout_seconds=self.timeout_seconds,
            description=self.description,
            flow=_limits(self.flow),
            circuit=self.circuit.settings(),
        ).check()


# PATCH fields that may be left out but never set to null.
_NOT_NULLABLE = ("url", "method", "headers", "timeout_seconds", "circuit")


class EndpointPatch(InputModel):
    """A partial change of an endpoint; absent fields stay as they are. A new URL,
    headers or flow apply to every attempt claimed after it."""

    model_config = ConfigDict(frozen=True, json_schema_extra=without_null(_NOT_NULLABLE))

    name: Name | None = Field(default=None, description=_NAME)
    url: Annotated[str, CheckedUrl] | None = Field(
        default=None,
        max_length=2048,
        json_schema_extra={"minLength": 1, "pattern": URL_PATTERN},
        description="The absolute http:// or https:// URL called",
    )
    method: Literal["POST", "PUT", "PATCH"] | None = Field(
        default=None, description="The HTTP method of each delivery"
    )
    headers: Annotated[dict[str, str], CheckedHeaders] | None = Field(
        default=None,
        json_schema_extra={"maxProperties": MAX_HEADERS},
        description="Extra request headers, replacing them all (values up to "
        f"{MAX_HEADER_VALUE_BYTES} bytes); a secret one sent back as *** keeps its value",
    )
    timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TIMEOUT_SECONDS,
        description="Seconds an attempt may take before it counts as failed",
    )
    description: Description | None = Field(
        default=None, max_length=MAX_DESCRIPTION, description=_DESCRIPTION
    )
    flow: FlowLimitsIn | None = Field(default=None, description=_FLOW + "; replaces them")
    circuit: CircuitIn | None = Field(default=None, description=_CIRCUIT + "; replaces it")

    def changes(self) -> dict[str, Any]:
        """The fields sent, as `EndpointSpec` holds them (null where null means none)."""
        sent = self.model_fields_set
        for name in _NOT_NULLABLE:
            if name in sent and getattr(self, name) is None:
                raise InvalidInputError(f"{name} cannot be null", pointer=f"#/{name}")
        changes: dict[str, Any] = {}
        for name in ("name", "url", "method", "headers", "timeout_seconds", "description"):
            if name in sent:
                changes[name] = getattr(self, name)
        if "flow" in sent:
            changes["flow"] = _limits(self.flow)
        if "circuit" in sent:
            assert self.circuit is not None
            changes["circuit"] = self.circuit.settings()
        return changes


class RotateIn(InputModel):
    """A rotation of an endpoint's signing secret."""

    overlap_seconds: int = Field(
        default=DEFAULT_OVERLAP_SECONDS,
        ge=0,
        le=MAX_OVERLAP_SECONDS,
        description="Seconds the secrets live now keep signing beside the new one (0: they "
        "stop at once)",
    )


class SecretOut(BaseModel):
    """One of an endpoint's live signing secrets."""

    id: uuid.UUID = Field(description="The secret's id")
    hint: str = Field(description="whsec_… and its last 4 characters, to tell secrets apart")
    secret: str | None = Field(
        default=None,
        description="The secret itself, in the answer that made it only (the create, a "
        "rotation); null elsewhere",
    )
    created_at: datetime = Field(description="When it was made")
    expires_at: datetime | None = Field(
        description="When it stops signing (a rotation set it); null: the newest"
    )

    @classmethod
    def of(cls, info: SecretInfo, shown: dict[uuid.UUID, str] | None = None) -> SecretOut:
        return cls(
            id=info.id,
            hint=info.hint,
            secret=(shown or {}).get(info.id),
            created_at=info.created_at,
            expires_at=info.expires_at,
        )


class FlowOut(BaseModel):
    """An endpoint's flow limits."""

    rate: int | None = Field(description="Attempts a period, on average; null: no rate limit")
    period_seconds: float = Field(description="The period of rate, in seconds")
    burst: int | None = Field(description="The token bucket's capacity; null: rate")
    parallelism: int | None = Field(description="Attempts in flight at once; null: no limit")
    ordering: Literal["none", "fifo"] = Field(description="fifo: in due order, one at a time")

    @classmethod
    def of(cls, limits: FlowLimits | None) -> FlowOut | None:
        if limits is None:
            return None
        return cls(
            rate=limits.rate,
            period_seconds=limits.period_seconds,
            burst=limits.burst,
            parallelism=limits.parallelism,
            ordering=limits.ordering.value,
        )


class CircuitOut(BaseModel):
    """An endpoint's circuit breaker settings."""

    failure_threshold: int = Field(description=_THRESHOLD)
    cooldown_seconds: float = Field(description=_COOLDOWN)
    max_cooldown_seconds: float = Field(description=_MAX_COOLDOWN)
    disable_after_seconds: float | None = Field(description=_DISABLE_AFTER)


class EndpointOut(BaseModel):
    """An endpoint, its circuit's state and its live figures. Secrets are redacted as a
    webhook target's are: URL passwords and secret query values and headers show as ***."""

    id: uuid.UUID = Field(description="The endpoint's id: a schedule targets it by this")
    name: str | None = Field(description=_NAME)
    url: str = Field(description="The URL called, its password and secret query values as ***")
    method: Literal["POST", "PUT", "PATCH"] = Field(description="The HTTP method")
    headers: dict[str, str] = Field(description="Extra headers, the secret ones as ***")
    timeout_seconds: float = Field(description="Seconds an attempt may take")
    description: str | None = Field(description=_DESCRIPTION)
    flow: FlowOut | None = Field(description=_FLOW)
    circuit: CircuitOut = Field(description=_CIRCUIT)
    state: Literal["closed", "open", "half_open", "disabled"] = Field(
        description="closed: deliveries flow; open: none starts, they wait uncharged; "
        "half_open: the cooldown is over and the next attempt probes; disabled: none starts "
        "until enabled"
    )
    state_changed_at: datetime | None = Field(
        description="When the circuit last changed state; null: never"
    )
    consecutive_failures: int = Field(description="Failed attempts in a row")
    next_probe_at: datetime | None = Field(
        description="While open: when the probe may start; null otherwise"
    )
    in_flight: int = Field(description="Its attempts in flight now, fleet-wide")
    waiting: int = Field(description="Its deliveries due now and not started (held back)")
    signing_secrets: list[SecretOut] = Field(
        description="Its live secrets, oldest first: each delivery carries one signature per "
        "secret (webhook-signature)"
    )
    version: int = Field(description="Grows with every change; the ETag, for If-Match")
    created_at: datetime = Field(description="When it was made")
    updated_at: datetime = Field(description="When it last changed")

    @classmethod
    def of(cls, found: Endpoint, shown: dict[uuid.UUID, str] | None = None) -> EndpointOut:
        spec, circuit = found.spec, found.circuit
        return cls(
            id=found.id,
            name=spec.name,
            url=redacted_url(spec.url),
            method=spec.method,
            headers=redacted_headers(spec.headers),
            timeout_seconds=spec.timeout_seconds,
            description=spec.description,
            flow=FlowOut.of(spec.flow),
            circuit=CircuitOut(
                failure_threshold=spec.circuit.failure_threshold,
                cooldown_seconds=spec.circuit.cooldown_seconds,
                max_cooldown_seconds=spec.circuit.max_cooldown_seconds,
                disable_after_seconds=spec.circuit.disable_after_seconds,
            ),
            state=found.state.value,
            state_changed_at=circuit.changed_at,
            consecutive_failures=circuit.failures,
            next_probe_at=circuit.probe_at if found.state.value == "open" else None,
            in_flight=found.in_flight,
            waiting=found.waiting,
            signing_secrets=[SecretOut.of(info, shown) for info in found.secrets],
            version=found.version,
            created_at=found.created_at,
            updated_at=found.updated_at,
        )


class EndpointEventOut(BaseModel):
    """One change of an endpoint."""

    id: uuid.UUID = Field(description="The event's id; events sort by it")
    endpoint_id: uuid.UUID = Field(description="The endpoint")
    kind: Literal[
        "created",
        "updated",
        "deleted",
        "secret_rotated",
        "opened",
        "reopened",
        "recovered",
        "disabled",
        "enabled",
    ] = Field(
        description="What happened: a write, a rotation, or a change of the circuit "
        "(opened, reopened after a failed probe, recovered, disabled, enabled)"
    )
    at: datetime = Field(description="When")
    actor: str | None = Field(
        description="The API key's name, cli, system (the circuit), or null when no keys are set"
    )
    detail: dict[str, Any] | None = Field(
        description="updated: the fields changed; secret_rotated: the overlap; the circuit's: "
        "failures in a row and the cooldown"
    )

    @classmethod
    def of(cls, event: EndpointEvent) -> EndpointEventOut:
        return cls(
            id=event.id,
            endpoint_id=event.endpoint_id,
            kind=event.kind,
            at=event.at,
            actor=event.actor,
            detail=event.detail,
        )


class EndpointAttemptOut(AttemptOut):
    """One attempt that went to the endpoint."""

    occurrence_id: uuid.UUID = Field(description="The occurrence (the delivery) it attempted")

    @classmethod
    def of_endpoint(cls, occurrence_id: uuid.UUID, attempt: Attempt) -> EndpointAttemptOut:
        return cls(**AttemptOut.of(attempt).model_dump(), occurrence_id=occurrence_id)
