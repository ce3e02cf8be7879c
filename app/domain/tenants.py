"""Tenants: the unit of isolation (DESIGN section 14). Every schedule belongs to one, and
what belongs to a schedule (its occurrences, their attempts, its events, its dead letters)
belongs to it through the schedule; flow keys are named per tenant.

Invariant: no tenant's name for a flow key can reach another tenant's key. The store names
a key by its tenant and its name (`stored_key`, "tenant/name"): tenant ids and key names
hold no "/", so the stored form is unambiguous, and the engine that claims and limits keys
never needs to know about tenants to keep them apart.
"""

from __future__ import annotations

import functools
import math
import re
import uuid
from dataclasses import dataclass
from datetime import datetime

from app.domain.errors import InvalidInputError, NotFoundError
from app.domain.flow import KEY_PATTERN, FlowLimits
from app.domain.target import Target

DEFAULT_TENANT = "default"
# The request header naming the tenant an operator key acts in (absent: `default`).
TENANT_HEADER = "Chronoq-Tenant"
TENANT_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
TENANT_ALPHABET = "1-63 of a-z 0-9 _ -, starting with a letter or a digit"
MAX_TENANT = 63
MAX_DISPLAY_NAME = 200
# Between a tenant's id and a key's name in the stored form of a flow key.
_SEPARATOR = "/"
# What the name of an endpoint's key starts with (`endpoint_key`).
ENDPOINT_KEY_MARK = "~"
# The stored form's longest: a tenant id, the separator and a key's name.
STORED_KEY_LENGTH = MAX_TENANT + 1 + 128

assert KEY_PATTERN.fullmatch(_SEPARATOR) is None
assert TENANT_PATTERN.fullmatch(_SEPARATOR) is None
assert KEY_PATTERN.fullmatch(ENDPOINT_KEY_MARK) is None


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


def own_key(tenant: str) -> str:
    """The tenant's own flow key, which its rows of no flow key are stored under (but the
    default tenant's): its delivery quotas and pause are this key's limits, and every claim
    sees the tenant's work by key. No key a request names is it (a name is never empty)."""
    return f"{tenant}{_SEPARATOR}"


def stored_key_or_none(tenant: str, key: str | None) -> str | None:
    """A schedule's flow key as stored: its own, or its tenant's (`own_key`); None only for
    a schedule of the default tenant with none."""
    if key is not None:
        return stored_key(tenant, key)
    return None if tenant == DEFAULT_TENANT else own_key(tenant)


def key_name(stored: str) -> str:
    """A stored flow key's name within its tenant ("" for the tenant's own key)."""
    return stored.partition(_SEPARATOR)[2]


def key_name_or_none(stored: str | None) -> str | None:
    """The name a request sees: None for no key, for the tenant's own key and for an
    endpoint's (`endpoint_key`)."""
    if stored is None:
        return None
    name = key_name(stored)
    return None if not name or name.startswith(ENDPOINT_KEY_MARK) else name


def endpoint_key(tenant: str, endpoint_id: uuid.UUID) -> str:
    """The stored flow key of an endpoint's deliveries (DESIGN section 15): its name
    starts with `~`, which no key a request names holds."""
    return stored_key(tenant, f"{ENDPOINT_KEY_MARK}{endpoint_id}")


# Read for every claimed row of an endpoint: its keys are few, and each reads the same.
@functools.lru_cache(maxsize=4096)
def endpoint_in_key(stored: str | None) -> uuid.UUID | None:
    """The endpoint whose key `stored` is (None: no endpoint's)."""
    if stored is None:
        return None
    name = key_name(stored)
    if not name.startswith(ENDPOINT_KEY_MARK):
        return None
    try:
        return uuid.UUID(name.removeprefix(ENDPOINT_KEY_MARK))
    except ValueError:
        return None


def is_endpoint_key(stored: str | None) -> bool:
    return stored is not None and key_name(stored).startswith(ENDPOINT_KEY_MARK)


def tenant_of_key(stored: str) -> str:
    """The tenant a stored flow key belongs to."""
    return stored.partition(_SEPARATOR)[0]


def is_own_key(stored: str) -> bool:
    return stored.endswith(_SEPARATOR)


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


# A tenant's weight: its share of the starts when more is due than the fleet can start.
MIN_WEIGHT, MAX_WEIGHT, DEFAULT_WEIGHT = 1, 100, 1
# The longest retention a tenant may set (ten years), in seconds.
MAX_RETENTION_SECONDS = 10 * 365 * 86400


@dataclass(frozen=True, slots=True)
class Quotas:
    """A tenant's quotas (None: unlimited). Create quotas: `max_schedules` bounds its live
    (pending or paused) schedules; `max_creates_per_minute` its creates, a batch counting its
    items, as a token bucket of that many tokens refilled over a minute. Delivery quotas,
    fleet-wide: `max_deliveries_per_second` attempts started a second (a bucket as deep as
    a second's worth), `max_in_flight` attempts in flight at once; what they hold back
    waits, uncharged."""

    max_schedules: int | None = None
    max_creates_per_minute: int | None = None
    max_deliveries_per_second: int | None = None
    max_in_flight: int | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """What a tenant holds now: live schedules, pending occurrences, attempts in flight,
    occurrences due and not started (waiting), and dead letters."""

    schedules: int = 0
    pending_occurrences: int = 0
    in_flight: int = 0
    waiting: int = 0
    dead_letters: int = 0


@dataclass(frozen=True, slots=True)
class TenantSpec:
    """A tenant as a PUT gives it, whole."""

    display_name: str | None = None
    weight: int = DEFAULT_WEIGHT
    paused: bool = False
    quotas: Quotas = Quotas()
    # Overrides CHRONOQ_SCHEDULE_RETENTION for its ended schedules (None: that setting).
    retention_seconds: int | None = None
    # Where its operator events go (None: nowhere).
    events_target: Target | None = None

    def check(self, tenant: str) -> TenantSpec:
        """The spec itself, or an error naming the field the tenant cannot take: the default
        tenant's rows are claimed as a single-team installation's are, with nothing to hold
        them back, so it takes no pause and no delivery quota (a tenant made for the work
        that needs them does)."""
        if tenant != DEFAULT_TENANT:
            return self
        for pointer, value in (
            ("#/paused", self.paused or None),
            ("#/quotas/max_deliveries_per_second", self.quotas.max_deliveries_per_second),
            ("#/quotas/max_in_flight", self.quotas.max_in_flight),
        ):
            if value is not None:
                raise InvalidInputError(
                    "the default tenant is never paused and has no delivery quotas: "
                    "put the work that needs them in a tenant of its own",
                    pointer=pointer,
                )
        return self

    def delivery_limits(self) -> FlowLimits | None:
        """The limits of the tenant's own key (`own_key`), which hold back its deliveries,
        every key's of the tenant included; None: nothing holds them back."""
        rate = self.quotas.max_deliveries_per_second
        most = self.quotas.max_in_flight
        if rate is None and most is None and not self.paused:
            return None
        return FlowLimits(rate=rate, burst=rate, parallelism=most, paused=self.paused)


@dataclass(frozen=True, slots=True)
class Tenant:
    """A tenant as stored, with its usage when read for an answer."""

    id: str
    display_name: str | None
    version: int
    created_at: datetime
    updated_at: datetime
    quotas: Quotas = Quotas()
    weight: int = DEFAULT_WEIGHT
    paused: bool = False
    retention_seconds: int | None = None
    usage: Usage | None = None
    # Where its operator events go (None: nowhere; DESIGN section 15).
    events_target: Target | None = None


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
