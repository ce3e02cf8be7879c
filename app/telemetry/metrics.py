"""Prometheus metrics of a replica, served at GET /metrics.

The metrics live in the process's default registry, created once on import: a process
runs one replica. Pools are read when scraped, so watching them costs nothing between
scrapes. The installation's numbers (backlog, dead letters, schedules) come from the
database through `STORE`, which caches them (see `_StoreCollector`). Where the replica's
delivery loop runs in processes of its own (`chronoq serve`), `DELIVERY` adds their metrics to
the API process's answer, each of their series labelled with its `process`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Protocol

from prometheus_client import (
    Counter,
    Gauge,
    Histogram,
    Info,
    Metric,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import REGISTRY, Collector

if TYPE_CHECKING:
    from app.store.records.backlog import Backlog

log = logging.getLogger(__name__)

# Counters and histograms would each carry a `_created` series (the instant the process
# made them): one more series per label set that no dashboard reads.
disable_created_metrics()  # type: ignore[no-untyped-call]


def _version() -> str:
    try:
        return version("chronoq")
    except PackageNotFoundError:
        return "unknown"


BUILD = Info("chronoq_build", "The version this replica runs (value 1)")
BUILD.info({"version": _version()})

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
PRUNED = Counter("chronoq_occurrences_pruned_total", "Finished occurrences deleted by retention")
SCHEDULES_PRUNED = Counter(
    "chronoq_schedules_pruned_total",
    "Ended schedules deleted by retention, each with its occurrences, attempts and events",
)
HISTORY_PARTITIONS_DROPPED = Counter(
    "chronoq_history_partitions_dropped_total",
    "Days of history (attempts, schedule events) dropped by retention, a partition each"
    " (PostgreSQL)",
    ["table"],
)
HISTORY_ROWS_SWEPT = Counter(
    "chronoq_history_rows_swept_total",
    "History rows kept past their day, deleted once their occurrence or schedule went (PostgreSQL)",
    ["table"],
)
HTTP_CONNECTIONS = Gauge(
    "chronoq_http_connections", "Client connections this replica holds (CHRONOQ_MAX_CONNECTIONS)"
)
HTTP_CONNECTIONS_CLOSED = Counter(
    "chronoq_http_connections_closed_total",
    "Client connections this replica closed by itself: over_cap (every connection was busy "
    "with a request), evicted (to make room at the cap: the one that had waited longest for a "
    "request head), head_timeout (no complete request head in CHRONOQ_REQUEST_HEAD_TIMEOUT)",
    ["reason"],
)


READY = Gauge(
    "chronoq_ready",
    "Each readiness check of this replica as /readyz last answered it (1 ok, 0 failing):"
    " database, broker (with AMQP_URL), worker (with a delivery loop)",
    ["check"],
)


_READY_CHECKS: set[str] = set()


def observe_readiness(checks: dict[str, str]) -> None:
    for name, value in checks.items():
        _READY_CHECKS.add(name)
        READY.labels(name).set(1.0 if value == "ok" else 0.0)


def readiness_checks() -> list[str]:
    """The checks a readiness answer has reported so far."""
    return sorted(_READY_CHECKS)


class _Pool(Protocol):
    def pool_in_use(self) -> int: ...

    def pool_size(self) -> int: ...


class _PoolCollector(Collector):
    """Connections in use in each watched pool, read at scrape time."""

    def __init__(self) -> None:
        self._pools: dict[str, _Pool] = {}

    def watch(self, name: str, pool: _Pool) -> None:
        self._pools[name] = pool

    def forget(self, name: str) -> None:
        self._pools.pop(name, None)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        in_use = GaugeMetricFamily(
            "chronoq_db_pool_in_use", "Database connections checked out, by pool", labels=["pool"]
        )
        size = GaugeMetricFamily(
            "chronoq_db_pool_size", "Database connections the pool keeps, by pool", labels=["pool"]
        )
        for name, pool in sorted(self._pools.items()):
            in_use.add_metric([name], pool.pool_in_use())
            size.add_metric([name], pool.pool_size())
        yield in_use
        yield size

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())


POOLS = _PoolCollector()
REGISTRY.register(POOLS)


STORE_READ_ERRORS = Counter(
    "chronoq_store_metrics_errors_total",
    "Reads of the backlog, dead letter and schedule numbers that failed (the last values"
    " read are served meanwhile)",
)
# How long the numbers read from the database are served before they are read again.
STORE_CACHE_SECONDS = 5.0
# How long a scrape waits for a read in flight before it is answered with the last values
# (the read goes on, for the next scrape): well inside Prometheus's 10 s scrape timeout.
STORE_WAIT_SECONDS = 2.0


class _StoreCollector(Collector):
    """The installation's numbers from the database, cached for `STORE_CACHE_SECONDS`.

    `collect` is synchronous (the registry calls it while rendering), so the /metrics
    handler awaits `refresh` first; concurrent scrapes share one read in flight, so a
    replica runs at most one of these queries at a time however many scrapers it has. A
    failed read keeps the last values (and counts the failure): /metrics never fails
    because the database does, and a failure is cached like a success, so an unreachable
    database is not asked again on every scrape.
    """

    def __init__(self) -> None:
        self._read: Callable[[], Awaitable[Backlog]] | None = None
        self._last: Backlog | None = None
        self._read_at = -float("inf")
        self._reading: asyncio.Task[None] | None = None

    def watch(self, read: Callable[[], Awaitable[Backlog]]) -> None:
        self._read = read

    def forget(self) -> None:
        self._read = None
        self._last = None
        self._read_at = -float("inf")
        self._reading = None

    async def refresh(self) -> None:
        if self._read is None or time.monotonic() - self._read_at < STORE_CACHE_SECONDS:
            return
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._load(self._read))
        # A scrape that gives up (client gone, or the read is slow) leaves the read running
        # for the others.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._reading), STORE_WAIT_SECONDS)

    async def _load(self, read: Callable[[], Awaitable[Backlog]]) -> None:
        try:
            self._last = await read()
        except Exception as exc:
            STORE_READ_ERRORS.inc()
            log.warning("metrics: reading the backlog failed: %s", exc)
        finally:
            self._read_at = time.monotonic()
            self._reading = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        last = self._last
        if last is None:
            return
        yield GaugeMetricFamily(
            "chronoq_backlog_due",
            "Pending occurrences due now and not held, unclaimed or claimed (installation-wide)",
            value=last.due,
        )
        yield GaugeMetricFamily(
            "chronoq_backlog_oldest_age_seconds",
            "How long the oldest due pending occurrence has been due (0 when none is)",
            value=last.oldest_due_seconds,
        )
        yield GaugeMetricFamily(
            "chronoq_flow_waiting",
            "Occurrences of flow keys due now and not started: waiting for their keys' limits "
            "(installation-wide; no per-key label)",
            value=last.keyed_due,
        )
        if last.waiting_by_tenant is not None:
            waiting = GaugeMetricFamily(
                "chronoq_tenant_waiting",
                "Occurrences due now and not started, by tenant (with "
                "CHRONOQ_METRICS_TENANT_LABEL)",
                labels=["tenant"],
            )
            for tenant, count in sorted(last.waiting_by_tenant.items()):
                waiting.add_metric([tenant], count)
            yield waiting
        yield GaugeMetricFamily(
            "chronoq_dead_letters_outstanding",
            "Dead-lettered occurrences waiting to be replayed or discarded (installation-wide)",
            value=last.dead_letters,
        )
        by_status = GaugeMetricFamily(
            "chronoq_schedules", "Schedules by status (installation-wide)", labels=["status"]
        )
        for status, count in last.schedules.items():
            by_status.add_metric([status], count)
        yield by_status

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())


STORE = _StoreCollector()
REGISTRY.register(STORE)


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


class _DeliveryProcesses:
    """The metrics of the replica's delivery processes, merged into this process's.

    `read` returns each delivery process's exposition text (None for one that did not
    answer: its series are then missing from that scrape, as a restarted replica's counters
    start again). Every series of delivery process K is labelled `process="delivery"` (with
    one process) or `process="delivery-K"`, so none can collide with this process's
    series of the same name (the `process_*` and `python_*` ones, the counters registered in
    both); a family both expose is written once, with the series of both.
    """

    def __init__(self) -> None:
        self._read: Callable[[], Awaitable[list[str | None]]] | None = None

    def watch(self, read: Callable[[], Awaitable[list[str | None]]]) -> None:
        self._read = read

    def forget(self) -> None:
        self._read = None

    async def exposition(self) -> bytes:
        """This process's metrics in the text format, with the delivery processes'."""
        own = generate_latest(REGISTRY)
        if self._read is None:
            return own
        texts = await self._read()
        families = {family.name: family for family in text_string_to_metric_families(own.decode())}
        for index, text in enumerate(texts, start=1):
            if text is None:
                continue
            process = "delivery" if len(texts) == 1 else f"delivery-{index}"
            for family in text_string_to_metric_families(text):
                samples = [
                    sample._replace(labels={**sample.labels, "process": process})
                    for sample in family.samples
                ]
                mine = families.get(family.name)
                if mine is None:
                    family.samples = samples
                    families[family.name] = family
                elif mine.type == family.type:
                    mine.samples.extend(samples)
        return generate_latest(_Families(list(families.values())))


DELIVERY = _DeliveryProcesses()


HTTP_DURATION = Histogram(
    "chronoq_http_request_duration_seconds",
    "HTTP requests by method, route template (`unmatched` for a path no route has) and status",
    ["method", "route", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
