"""Wire models of /v1/tenants: a tenant as put, and as read; its keys; its audit events."""

from __future__ import annotations

import uuid
from dataclasses import asdict
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from app.api.target_schemas import TargetOut, target_out
from app.domain.flow import MAX_PARALLELISM, MAX_RATE
from app.domain.limits import MAX_SHORT_STRING_BYTES, InputModel, Instant, one_line
from app.domain.target import Target
from app.domain.tenant_events import TenantEvent, TenantEventKind
from app.domain.tenant_keys import KEY_NAME_ALPHABET, KeyRole, TenantKey
from app.domain.tenants import (
    DEFAULT_WEIGHT,
    MAX_DISPLAY_NAME,
    MAX_QUOTA,
    MAX_RETENTION_SECONDS,
    MAX_WEIGHT,
    MIN_WEIGHT,
    Quotas,
    Tenant,
    TenantSpec,
    Usage,
)

_DISPLAY_NAME = "Free text, on one line: how people name the tenant; null: none"


_MAX_SCHEDULES = (
    "At most this many pending or paused schedules; a create past it is a 429 "
    "quota-exceeded problem. null: no limit"
)
_MAX_CREATES = (
    "At most this many schedule creates a minute (a batch counts its items), as a bucket "
    "refilled over the minute; past it a 429 quota-exceeded problem with Retry-After. null: "
    "no limit"
)


_MAX_DELIVERIES = (
    "At most this many attempts started a second over the whole tenant, fleet-wide (a token "
    "bucket a second deep); what it holds back waits, uncharged. null: no limit"
)
_MAX_IN_FLIGHT = (
    "At most this many attempts of the tenant in flight at once, fleet-wide; what it holds "
    "back waits, uncharged. null: no limit"
)
_WEIGHT = (
    f"{MIN_WEIGHT}-{MAX_WEIGHT}: its share of the starts when more is due than the fleet can "
    "start (a tenant alone gets them all)"
)
_PAUSED = (
    "true: none of its occurrences starts (they wait; nothing is skipped or dead-lettered); "
    "false releases them"
)
_EVENTS_TARGET = (
    "Where the tenant's operator events go, signed and at least once: endpoint.opened, "
    "endpoint.recovered, endpoint.disabled, schedule.auto_paused, occurrence.dead_lettered, "
    "quota.exceeded (a webhook, rabbitmq or endpoint target); null: nowhere"
)
_RETENTION = (
    "Seconds its ended schedules are kept, overriding CHRONOQ_SCHEDULE_RETENTION; 0 keeps "
    "them forever. null: that setting"
)


class QuotasIn(InputModel):
    """A tenant's quotas, whole: one left out is no limit."""

    max_schedules: int | None = Field(
        default=None, ge=1, le=MAX_QUOTA, description=_MAX_SCHEDULES, examples=[10000]
    )
    max_creates_per_minute: int | None = Field(
        default=None, ge=1, le=MAX_QUOTA, description=_MAX_CREATES, examples=[600]
    )
    max_deliveries_per_second: int | None = Field(
        default=None, ge=1, le=MAX_RATE, description=_MAX_DELIVERIES, examples=[200]
    )
    max_in_flight: int | None = Field(
        default=None, ge=1, le=MAX_PARALLELISM, description=_MAX_IN_FLIGHT, examples=[50]
    )

    def quotas(self) -> Quotas:
        return Quotas(
            self.max_schedules,
            self.max_creates_per_minute,
            self.max_deliveries_per_second,
            self.max_in_flight,
        )


class QuotasOut(BaseModel):
    """A tenant's quotas (null: no limit)."""

    max_schedules: int | None = Field(description=_MAX_SCHEDULES, examples=[10000])
    max_creates_per_minute: int | None = Field(description=_MAX_CREATES, examples=[600])
    max_deliveries_per_second: int | None = Field(description=_MAX_DELIVERIES, examples=[200])
    max_in_flight: int | None = Field(description=_MAX_IN_FLIGHT, examples=[50])


class UsageOut(BaseModel):
    """What the tenant holds now; each count stops at 100000 (at least that many)."""

    schedules: int = Field(description="Its pending or paused schedules", examples=[1200])
    pending_occurrences: int = Field(
        description="Its occurrences not ended (due, later, in flight or held)", examples=[1210]
    )
    in_flight: int = Field(description="Its attempts in flight now", examples=[4])
    waiting: int = Field(
        description="Its occurrences due and not started (held back, or not yet claimed)",
        examples=[0],
    )
    dead_letters: int = Field(description="Its dead-lettered occurrences", examples=[3])


class TenantIn(InputModel):
    """A tenant, whole: what a PUT leaves out is at its default."""

    display_name: Annotated[
        str | None,
        Field(max_length=MAX_DISPLAY_NAME, description=_DISPLAY_NAME, examples=["Billing team"]),
        one_line(max_bytes=MAX_SHORT_STRING_BYTES),
    ] = None
    weight: int = Field(
        default=DEFAULT_WEIGHT, ge=MIN_WEIGHT, le=MAX_WEIGHT, description=_WEIGHT, examples=[1]
    )
    paused: bool = Field(default=False, description=_PAUSED, examples=[False])
    quotas: QuotasIn | None = Field(default=None, description="Its quotas; null or left out: none")
    retention_seconds: int | None = Field(
        default=None, ge=0, le=MAX_RETENTION_SECONDS, description=_RETENTION, examples=[604800]
    )
    events_target: Target | None = Field(default=None, description=_EVENTS_TARGET)

    def spec(self) -> TenantSpec:
        return TenantSpec(
            display_name=self.display_name,
            weight=self.weight,
            paused=self.paused,
            quotas=Quotas() if self.quotas is None else self.quotas.quotas(),
            retention_seconds=self.retention_seconds,
            events_target=self.events_target,
        )


class TenantOut(BaseModel):
    """A tenant: the unit of isolation that schedules, their occurrences, dead letters and
    flow keys belong to."""

    id: str = Field(
        description="The tenant's id, as `Chronoq-Tenant` names it", examples=["billing"]
    )
    display_name: str | None = Field(description=_DISPLAY_NAME, examples=["Billing team"])
    version: int = Field(
        description="Grows with every PUT; the tenant's ETag, for If-Match", examples=[1]
    )
    weight: int = Field(description=_WEIGHT, examples=[1])
    paused: bool = Field(description=_PAUSED, examples=[False])
    quotas: QuotasOut = Field(description="Its quotas")
    retention_seconds: int | None = Field(description=_RETENTION, examples=[604800])
    events_target: TargetOut | None = Field(
        default=None, description=_EVENTS_TARGET + "; its secrets redacted"
    )
    usage: UsageOut = Field(description="What it holds now")
    created_at: datetime = Field(description="When it was made", examples=["2026-12-06T09:00:00Z"])
    updated_at: datetime = Field(
        description="When it last changed", examples=["2026-12-06T09:00:00Z"]
    )

    @classmethod
    def of(cls, tenant: Tenant) -> TenantOut:
        return cls(
            id=tenant.id,
            display_name=tenant.display_name,
            version=tenant.version,
            weight=tenant.weight,
            paused=tenant.paused,
            quotas=QuotasOut(
                max_schedules=tenant.quotas.max_schedules,
                max_creates_per_minute=tenant.quotas.max_creates_per_minute,
                max_deliveries_per_second=tenant.quotas.max_deliveries_per_second,
                max_in_flight=tenant.quotas.max_in_flight,
            ),
            retention_seconds=tenant.retention_seconds,
            events_target=(
                None if tenant.events_target is None else target_out(tenant.events_target)
            ),
            usage=UsageOut(**asdict(tenant.usage or Usage())),
            created_at=tenant.created_at,
            updated_at=tenant.updated_at,
        )


class TenantKeyIn(InputModel):
    """A tenant key to make."""

    name: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description=f"The key's name ({KEY_NAME_ALPHABET}), unique in its tenant; audit "
        "events name the key as tenant/name",
        examples=["deploy-bot"],
    )
    role: Literal["write", "read"] = Field(
        description="write: every operation of the tenant; read: only reads",
        examples=["write"],
    )
    expires_at: Instant | None = Field(
        default=None,
        description="When the key stops working (in the future); null: never",
        examples=["2027-06-01T00:00:00Z"],
    )


class TenantKeyOut(BaseModel):
    """A tenant key, without its secret."""

    id: uuid.UUID = Field(description="The key's id, to revoke it by")
    tenant: str = Field(description="The tenant it acts in", examples=["billing"])
    name: str = Field(description="Its name", examples=["deploy-bot"])
    role: KeyRole = Field(description="write or read", examples=["write"])
    prefix: str = Field(
        description="The key's first characters, to tell it apart", examples=["cq_3Fa9k2Lx"]
    )
    created_at: datetime = Field(description="When it was made")
    expires_at: datetime | None = Field(description="When it stops working; null: never")
    revoked_at: datetime | None = Field(description="When it was revoked; null: it is not")
    last_used_at: datetime | None = Field(
        description="When a request last presented it (to the minute); null: never"
    )

    @classmethod
    def of(cls, key: TenantKey) -> TenantKeyOut:
        return cls(
            id=key.id,
            tenant=key.tenant,
            name=key.name,
            role=key.role,
            prefix=key.prefix,
            created_at=key.created_at,
            expires_at=key.expires_at,
            revoked_at=key.revoked_at,
            last_used_at=key.last_used_at,
        )


class MadeKey(TenantKeyOut):
    """A tenant key just made, with the key itself: shown in this answer only."""

    key: str = Field(
        description="The key, for Authorization: Bearer <key>: store it now, no answer "
        "shows it again"
    )

    @classmethod
    def made(cls, key: TenantKey, secret: str) -> MadeKey:
        return cls(**TenantKeyOut.of(key).model_dump(), key=secret)


class TenantEventOut(BaseModel):
    """One change of a tenant or of its keys, in the tenant's audit trail (kept when the
    tenant is removed)."""

    id: uuid.UUID = Field(
        description="The event's id: a UUIDv7, so the trail sorts oldest first by it",
        examples=["01938f2e-7c3a-7d1e-8a4b-3c2d1e0f9a8b"],
    )
    tenant: str = Field(description="The tenant it is about", examples=["billing"])
    kind: TenantEventKind = Field(
        description="What happened: created, updated (a PUT; `fields` names what changed), "
        "paused and resumed (a PUT that flipped `paused`, after its updated), deleted, "
        "key_created, key_revoked",
        examples=["updated"],
    )
    at: datetime = Field(description="When", examples=["2026-12-07T10:00:00Z"])
    actor: str | None = Field(
        description="Who: the operator API key's name, 'cli' (operator CLI on the database), "
        "or null when no keys are set (a tenant's own key changes no tenant)",
        examples=["deploy-bot"],
    )
    version: int | None = Field(
        description="The tenant's version once the change was made; null for a key's "
        "events and for deleted",
        examples=[2],
    )
    fields: list[str] | None = Field(
        description="For updated: the PUT's top-level fields whose value changed (empty "
        "when none did); null for the other kinds",
        examples=[["weight", "quotas"]],
    )
    key_id: uuid.UUID | None = Field(
        description="For key_created and key_revoked: the key's id; null for the other kinds",
        examples=["01938f2e-7b00-7f6a-9c1d-2e3f4a5b6c7d"],
    )
    key_name: str | None = Field(
        description="For key_created and key_revoked: the key's name (kept when the key is "
        "gone); null for the other kinds",
        examples=["deploy-bot"],
    )

    @classmethod
    def of(cls, e: TenantEvent) -> TenantEventOut:
        return cls(
            id=e.id,
            tenant=e.tenant,
            kind=e.kind,
            at=e.at,
            actor=e.actor,
            version=e.version,
            fields=e.fields,
            key_id=e.key_id,
            key_name=e.key_name,
        )
