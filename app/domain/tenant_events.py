"""A tenant's audit events (DESIGN section 14): each change of the tenant or of its keys,
who made it, and the tenant's version once it was made.

Invariant: a tenant's events outlive it. They name the tenant by its id and nothing holds
them to its row, so the trail of a removed tenant still ends with its `deleted`, and a
tenant made again under the same id carries on the same trail.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from app.domain.tenants import Tenant, TenantSpec


class TenantEventKind(StrEnum):
    """What a tenant's audit event records."""

    CREATED = "created"
    UPDATED = "updated"
    PAUSED = "paused"
    RESUMED = "resumed"
    DELETED = "deleted"
    KEY_CREATED = "key_created"
    KEY_REVOKED = "key_revoked"


# The events about one of the tenant's keys: they name it, and leave the version alone.
KEY_KINDS = frozenset({TenantEventKind.KEY_CREATED, TenantEventKind.KEY_REVOKED})

# The top-level fields of a PUT, in the order the API lists them: `updated` names those
# whose value changed in this order.
PUT_FIELDS = (
    "display_name",
    "weight",
    "paused",
    "quotas",
    "retention_seconds",
    "events_target",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantEvent:
    """One change of a tenant or of its keys. `version` is the tenant's once the change is
    made (None for a key's events and for `deleted`); `actor` the operator API key's name,
    "cli", or None when no keys are set (a tenant's own key changes no tenant); `fields`, for
    `updated`, the PUT's fields whose value changed; `key_id` and `key_name`, for a key's
    events, the key."""

    id: uuid.UUID
    tenant: str
    kind: TenantEventKind
    at: datetime
    actor: str | None
    version: int | None = None
    fields: list[str] | None = None
    key_id: uuid.UUID | None = None
    key_name: str | None = None


@dataclass(frozen=True, slots=True)
class TenantChange:
    """An event a PUT records: its kind, and for `updated` the fields it changed."""

    kind: TenantEventKind
    fields: list[str] | None = None


def put_changes(before: Tenant | None, spec: TenantSpec) -> list[TenantChange]:
    """What a PUT of `spec` records, in order, over the tenant as it was (None: it is new).
    A new tenant is `created`; one replaced is `updated` with the fields whose value
    changed, none for a PUT that changes nothing (it makes a version all the same, as a
    schedule's PATCH does). A flip of `paused` is `paused` or `resumed` besides, and a
    tenant made paused is `paused` from the start."""
    if before is None:
        changes = [TenantChange(TenantEventKind.CREATED)]
        was_paused = False
    else:
        changed = [name for name in PUT_FIELDS if getattr(before, name) != getattr(spec, name)]
        changes = [TenantChange(TenantEventKind.UPDATED, changed)]
        was_paused = before.paused
    if spec.paused != was_paused:
        flip = TenantEventKind.PAUSED if spec.paused else TenantEventKind.RESUMED
        changes.append(TenantChange(flip))
    return changes
