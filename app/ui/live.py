"""The console header's live numbers, read from what GET /metrics serves: this process's
registry with its delivery processes' (where `chronoq serve` runs the loop in processes of its
own, as on PostgreSQL, they are where deliveries happen).

Prometheus counters only grow; a rate needs an earlier reading. The console keeps a short
history of its own readings (one per page view at most every few seconds) and reports each
figure over the window it can vouch for: the last minute (or hour) when it holds a reading
that old, otherwise since this replica started, and it says which.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from app.telemetry import metrics

RATE_WINDOW = 60.0
DEAD_LETTER_WINDOW = 3600.0
MIN_READING_GAP = 2.0

DELIVERIES = "chronoq_deliveries_total"
LATENESS = "chronoq_delivery_lateness_seconds"
IN_FLIGHT = "chronoq_deliveries_in_flight"
DEAD_LETTERS = "chronoq_dead_letters_total"
# The backlog gauge: installation-wide, read from the database (cached a few seconds).
PENDING_DUE = "chronoq_backlog_due"


@dataclass(frozen=True, slots=True)
class Reading:
    at: float
    delivered: float
    dead_letters: float
    lateness: tuple[tuple[float, float], ...]  # (upper bound, cumulative count), ascending


@dataclass(frozen=True, slots=True)
class Figure:
    value: str
    window: str  # "last 60 s", "since start (4 min)", ... ("" when it is a reading of now)


@dataclass(frozen=True, slots=True)
class Numbers:
    delivered_per_second: Figure
    lag_p99: Figure
    in_flight: Figure
    pending_due: Figure | None  # None: not read yet (no database reading so far)
    dead_letters: Figure


Samples = dict[str, list[tuple[dict[str, str], float]]]


def _samples(families: Iterable[Any]) -> Samples:
    found: Samples = {}
    for family in families:
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


async def _served() -> Samples:
    """The samples GET /metrics answers with: this process's and its delivery processes'
    (each of theirs labelled with its `process`, summed here as one replica's)."""
    text = (await metrics.DELIVERY.exposition()).decode()
    return _samples(text_string_to_metric_families(text))


def _total(samples: Iterable[tuple[dict[str, str], float]], **match: str) -> float:
    return sum(
        value
        for labels, value in samples
        if all(labels.get(key) == wanted for key, wanted in match.items())
    )


def _span(seconds: float) -> str:
    if seconds < 120:
        return f"{max(seconds, 0):.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _quantile(buckets: tuple[tuple[float, float], ...], q: float) -> float | None:
    """The upper bound of the bucket holding the q-quantile (None: no observations)."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    for bound, count in buckets:
        if count >= rank:
            return bound
    return math.inf


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "> 1 h"
    if value < 1:
        return f"≤ {value * 1000:.0f} ms"
    return f"≤ {value:g} s"


class LiveNumbers:
    """This replica's figures for the header; `read()` takes a reading and reports."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`registry`: read that registry alone (None: what GET /metrics serves)."""
        self._registry = registry
        self._clock = clock
        self._started = clock()
        self._readings: deque[Reading] = deque()

    async def _take(self) -> tuple[Reading, Samples]:
        if self._registry is None:
            samples = await _served()
        else:
            samples = _samples(self._registry.collect())
        # Summed over the histogram's label sets (origin, target type): one distribution.
        counts: dict[float, float] = {}
        for labels, value in samples.get(LATENESS + "_bucket", []):
            bound = float(labels["le"])
            counts[bound] = counts.get(bound, 0.0) + value
        buckets = sorted(counts.items())
        reading = Reading(
            at=self._clock(),
            delivered=_total(samples.get(DELIVERIES, []), outcome="delivered"),
            dead_letters=_total(samples.get(DEAD_LETTERS, [])),
            lateness=tuple(buckets),
        )
        return reading, samples

    def _keep(self, reading: Reading) -> None:
        if not self._readings or reading.at - self._readings[-1].at >= MIN_READING_GAP:
            self._readings.append(reading)
        # One reading older than the longest window is kept: it is where that window starts.
        while len(self._readings) > 1 and reading.at - self._readings[1].at >= DEAD_LETTER_WINDOW:
            self._readings.popleft()

    def _since(self, now: Reading, window: float) -> tuple[Reading | None, str]:
        """The newest reading at least `window` old, or None (since start) and its label."""
        earlier = [r for r in self._readings if now.at - r.at >= window]
        if earlier:
            return earlier[-1], f"last {_span(now.at - earlier[-1].at)}"
        return None, f"since start ({_span(now.at - self._started)})"

    async def read(self) -> Numbers:
        # The same refresh GET /metrics does first: the backlog gauges are read from the
        # database at most every few seconds, whoever asks.
        await metrics.STORE.refresh()
        now, samples = await self._take()
        self._keep(now)
        base, rate_window = self._since(now, RATE_WINDOW)
        if base is None:
            elapsed = max(now.at - self._started, 1e-9)
            rate = now.delivered / elapsed
            lateness = now.lateness
        else:
            rate = (now.delivered - base.delivered) / (now.at - base.at)
            earlier = dict(base.lateness)
            lateness = tuple(
                (bound, count - earlier.get(bound, 0.0)) for bound, count in now.lateness
            )
        dead_base, dead_window = self._since(now, DEAD_LETTER_WINDOW)
        dead = now.dead_letters - (dead_base.dead_letters if dead_base else 0.0)
        pending: Figure | None = None
        # Installation-wide: this process's reading alone (a delivery process's would be the
        # same number again).
        own = [
            (labels, value)
            for labels, value in samples.get(PENDING_DUE, [])
            if "process" not in labels
        ]
        if own:
            pending = Figure(f"{_total(own):.0f}", "all replicas")
        return Numbers(
            delivered_per_second=Figure(f"{rate:.1f}", rate_window),
            lag_p99=Figure(_seconds(_quantile(lateness, 0.99)), rate_window),
            in_flight=Figure(f"{_total(samples.get(IN_FLIGHT, [])):.0f}", ""),
            pending_due=pending,
            dead_letters=Figure(f"{dead:.0f}", dead_window),
        )
