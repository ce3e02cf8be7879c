"""The database's series: what retention deleted, the pools' connections, and the
installation's numbers.

Pools are read when scraped, so watching them costs nothing between scrapes. The
installation's numbers (backlog, dead letters, schedules) come from the database through
`STORE`, which caches them (see `_StoreCollector`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Protocol

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

if TYPE_CHECKING:
    from app.store.records.backlog import Backlog

# The metrics' lines keep the metrics' logger name.
log = logging.getLogger("app.telemetry.metrics")

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
