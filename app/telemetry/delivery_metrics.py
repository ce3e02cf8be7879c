"""The delivery loop's series: claims, attempts and how they settled, what is in flight,
late or held back, endpoints' circuits, operator events and schedules paused by their dead
letters.

`tenant_label` replaces the series that may carry a `tenant` label (`DELIVERED`,
`DEAD_LETTERED`, `FLOW_HELD`, `CIRCUITS`): they are read from this module when counted
(`delivery_metrics.DELIVERED`), never imported by name.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.registry import REGISTRY

CLAIMED = Counter(
    "chronoq_occurrences_claimed_total", "Occurrences leased by this replica's claims"
)
ATTEMPTS = Counter(
    "chronoq_delivery_attempts_total",
    "Delivery attempts by how they settled (delivered, retry, dead_lettered), target type and"
    " failure reason (4xx, 429, 5xx, 3xx, connect, timeout, denied, broker, other; none for a"
    " delivered attempt)",
    ["outcome", "target_type", "reason"],
)
# Deprecated: the attempts counter under its old name, for dashboards of the previous release;
# removed in the next one. It counts attempts, not deliveries.
DELIVERIES = Counter(
    "chronoq_deliveries_total",
    "Deprecated, removed in the next release: chronoq_delivery_attempts_total without its"
    " reason label (it counts attempts)",
    ["outcome", "target_type"],
)


def _delivered(tenant: bool) -> Counter:
    return Counter(
        "chronoq_occurrences_delivered_total",
        "Occurrences delivered (by the attempt that delivered each), by target type"
        + (" and tenant" if tenant else ""),
        ["target_type", *(["tenant"] if tenant else [])],
    )


def _dead_lettered(tenant: bool) -> Counter:
    return Counter(
        "chronoq_occurrences_dead_lettered_total",
        "Occurrences dead-lettered by their last attempt (budget spent or a permanent failure),"
        " by target type and the failure reason of that attempt"
        + (", and tenant" if tenant else ""),
        ["target_type", "reason", *(["tenant"] if tenant else [])],
    )


def _flow_held(tenant: bool) -> Counter:
    return Counter(
        "chronoq_flow_keys_held_total",
        "Due flow keys a claim of this replica held back, by reason: paused, backoff (a "
        "destination's Retry-After; both counted as a claim shelves the key's rows), rate, "
        "parallelism, order (a fifo key's head retrying or in flight)"
        + ("; and tenant (a tenant's pause and delivery quotas count here too)" if tenant else ""),
        ["reason", *(["tenant"] if tenant else [])],
    )


def _circuits(tenant: bool) -> Counter:
    return Counter(
        "chronoq_endpoint_circuit_changes_total",
        "Endpoints' circuit breakers this replica's settles moved, by what happened (opened, "
        "reopened: a failed probe, recovered, disabled)" + (" and tenant" if tenant else ""),
        ["event", *(["tenant"] if tenant else [])],
    )


# Whether the series of deliveries, dead letters, what waits and what is held back carry a
# `tenant` label (CHRONOQ_METRICS_TENANT_LABEL; off by default: a label per tenant is a
# series per tenant). `tenant_label` sets it at start.
TENANT_LABEL = False
DELIVERED = _delivered(False)
DEAD_LETTERED = _dead_lettered(False)
FLOW_HELD = _flow_held(False)
CIRCUITS = _circuits(False)


def tenant_label(enabled: bool) -> None:
    """Give the tenant-labelled series their `tenant` label, or take it away (their counts
    start again)."""
    global TENANT_LABEL, DELIVERED, DEAD_LETTERED, FLOW_HELD, CIRCUITS
    if enabled == TENANT_LABEL:
        return
    for collector in (DELIVERED, DEAD_LETTERED, FLOW_HELD, CIRCUITS):
        REGISTRY.unregister(collector)
    TENANT_LABEL = enabled
    DELIVERED = _delivered(enabled)
    DEAD_LETTERED = _dead_lettered(enabled)
    FLOW_HELD = _flow_held(enabled)
    CIRCUITS = _circuits(enabled)


def with_tenant(tenant: str, *labels: str) -> tuple[str, ...]:
    """`labels`, with the tenant's last when the series carry it."""
    return (*labels, tenant) if TENANT_LABEL else labels


OPERATOR_EVENTS = Counter(
    "chronoq_operator_events_total",
    "Operator events this replica tried to tell tenants' events targets, by kind and how it "
    "went: sent, retried (told again later), given_up",
    ["kind", "outcome"],
)
AUTO_PAUSED = Counter(
    "chronoq_schedules_auto_paused_total",
    "Schedules this replica paused because they reached pause_after_failures dead letters in a row",
)
DURATION = Histogram(
    "chronoq_delivery_duration_seconds",
    "How long one delivery attempt took, by target type",
    ["target_type"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
LATENESS = Histogram(
    "chronoq_delivery_lateness_seconds",
    "Delivered minus due (the occurrence's nominal instant), for delivered occurrences, by"
    " origin (schedule, trigger, catchup, backfill: a backfill of old ticks is late by"
    " design) and target type",
    ["origin", "target_type"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600),
)
IN_FLIGHT = Gauge("chronoq_deliveries_in_flight", "Deliveries running now")
# Deprecated: chronoq_occurrences_dead_lettered_total without labels; removed in the next release.
DEAD_LETTERS = Counter(
    "chronoq_dead_letters_total",
    "Deprecated, removed in the next release: chronoq_occurrences_dead_lettered_total"
    " without its labels",
)
HANDED_BACK = Counter(
    "chronoq_occurrences_handed_back_total",
    "Claimed occurrences released unstarted because their lease ran short",
)
UNSENT = Counter(
    "chronoq_occurrences_unsent_total",
    "Due occurrences handed back uncharged because this replica could not send them (out of "
    "file descriptors, memory or buffers, or no sink for the target type)",
)
LOOP_CYCLES = Counter("chronoq_loop_cycles_total", "Claims the delivery loop started")
LOOP_ERRORS = Counter(
    "chronoq_loop_errors_total", "Claims and settles that failed and were retried"
)
