"""Prometheus metrics of a replica, served at GET /metrics.

The metrics live in the process's default registry, created once on import: a process
runs one replica. Pools are read when scraped, so watching them costs nothing between
scrapes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

CLAIMED = Counter(
    "chronoq_occurrences_claimed_total", "Occurrences leased by this replica's claims"
)
DELIVERIES = Counter(
    "chronoq_deliveries_total",
    "Delivery attempts by how they settled (delivered, retry, dead_lettered) and target type",
    ["outcome", "target_type"],
)
DURATION = Histogram(
    "chronoq_delivery_duration_seconds",
    "How long one delivery attempt took, by target type",
    ["target_type"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
LATENESS = Histogram(
    "chronoq_delivery_lateness_seconds",
    "Delivered minus due (the occurrence's nominal instant), for delivered occurrences",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600),
)
IN_FLIGHT = Gauge("chronoq_deliveries_in_flight", "Deliveries running now")
DEAD_LETTERS = Counter(
    "chronoq_dead_letters_total", "Occurrences this replica dead-lettered (budget spent)"
)
HANDED_BACK = Counter(
    "chronoq_occurrences_handed_back_total",
    "Claimed occurrences released unstarted because their lease ran short",
)
LOOP_CYCLES = Counter("chronoq_loop_cycles_total", "Claims the delivery loop started")
LOOP_ERRORS = Counter(
    "chronoq_loop_errors_total", "Claims and settles that failed and were retried"
)
PRUNED = Counter("chronoq_occurrences_pruned_total", "Finished occurrences deleted by retention")


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
