"""Tenants: the unit of isolation (DESIGN section 14). Every schedule belongs to one, and
what belongs to a schedule (its occurrences, their attempts, its events, its dead letters)
belongs to it through the schedule; flow keys are named per tenant.

Invariant: no tenant's name for a flow key can reach another tenant's key. The store names
a key by its tenant and its name (`stored_key`, "tenant/name"): tenant ids and key names
hold no "/", so the stored form is unambiguous, and the engine that claims and limits keys
never needs to know about tenants to keep them apart.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime

from app.domain.errors import InvalidInputError, NotFoundError
from app.domain.flow import KEY_PATTERN

DEFAULT_TENANT = "default"
# The request header naming the tenant an operator key acts in (absent: `default`).
TENANT_HEADER = "Chronoq-Tenant"
TENANT_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
TENANT_ALPHABET = "1-63 of a-z 0-9 _ -, starting with a letter or a digit"
MAX_TENANT = 63
MAX_DISPLAY_NAME = 200
# Between a tenant's id and a key's name in the stored form of a flow key.
_SEPARATOR = "/"
# The stored form's longest: a tenant id, the separator and a key's name.
STORED_KEY_LENGTH = MAX_TENANT + 1 + 128

assert KEY_PATTERN.fullmatch(_SEPARATOR) is None
assert TENANT_PATTERN.fullmatch(_SEPARATOR) is None


def check_tenant(tenant: str, *, pointer: str | None = None, parameter: str | None = None) -> str:
    """The tenant id itself, or an error naming where it came from."""
    if not TENANT_PATTERN.fullmatch(tenant):
        raise InvalidInputError(
            f"a tenant id is {TENANT_ALPHABET}", pointer=pointer, parameter=parameter
        )
    return tenant


def stored_key(tenant: str, key: str) -> str:
    """The flow key `key` of `tenant` as the store names it."""
    return f"{tenant}{_SEPARATOR}{key}"


def stored_key_or_none(tenant: str, key: str | None) -> str | None:
    return None if key is None else stored_key(tenant, key)


def key_name(stored: str) -> str:
    """A stored flow key's name within its tenant."""
    return stored.partition(_SEPARATOR)[2]


def key_name_or_none(stored: str | None) -> str | None:
    return None if stored is None else key_name(stored)


def key_prefix(tenant: str) -> str:
    """What every stored key of `tenant` starts with."""
    return f"{tenant}{_SEPARATOR}"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks, and in which tenant: every use case acts in `tenant` only, and another
    tenant's schedule, occurrence, dead letter or flow key is to it one that does not exist.
    `actor` is the API key's name, "cli" from the operator CLI's database backend, or None
    when the API is open; audit events name it."""

    tenant: str = DEFAULT_TENANT
    actor: str | None = None
    # True for a tenant's own key, which acts in that tenant only and manages no tenant.
    own: bool = False


# The largest value a quota takes: a bound that keeps its arithmetic exact and its column an
# integer on every database.
MAX_QUOTA = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Quotas:
    """A tenant's create quotas (None: unlimited). `max_schedules` bounds its live (pending
    or paused) schedules; `max_creates_per_minute` its creates, a batch counting its items,
    as a token bucket of that many tokens refilled over a minute."""

    max_schedules: int | None = None
    max_creates_per_minute: int | None = None

    @property
    def any(self) -> bool:
        return self.max_schedules is not None or self.max_creates_per_minute is not None


@dataclass(frozen=True, slots=True)
class Tenant:
    """A tenant as stored."""

    id: str
    display_name: str | None
    version: int
    created_at: datetime
    updated_at: datetime
    quotas: Quotas = Quotas()


def refilled(tokens: float | None, elapsed: float, per_minute: int) -> float:
    """A create bucket's tokens `elapsed` seconds after it held `tokens` (None: full)."""
    if tokens is None:
        return float(per_minute)
    return min(float(per_minute), tokens + max(0.0, elapsed) * per_minute / 60.0)


def wait_for(tokens: float, needed: int, per_minute: int) -> int:
    """Whole seconds until a bucket holding `tokens` holds `needed` (at most a minute's
    worth: a batch larger than the quota is refused whatever the wait)."""
    missing = min(float(needed), float(per_minute)) - tokens
    return max(1, math.ceil(missing * 60.0 / per_minute))


def missing_tenant(tenant: str) -> NotFoundError:
    return NotFoundError(f"tenant {tenant} does not exist")
