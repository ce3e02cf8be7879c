"""The console header's figures. Deliveries, lateness and dead letters are the fleet's, read
from the attempt log as the charts read it (`GET /v1/activity`, rolled up every
`activity_interval` by one replica at a time), each with the window it covers; what is in
flight is this replica's, read from what GET /metrics serves (its delivery processes'
included); what is due is the installation's, read from the database.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from app.domain.activity import Activity, quantile
from app.telemetry import process_metrics, store_metrics
from app.ui.charts import format_lateness

# The delivery rate is over the last few minutes the roll-up holds.
RATE_MINUTES = 5

IN_FLIGHT = "chronoq_deliveries_in_flight"
# The backlog gauge: installation-wide, read from the database (cached a few seconds).
PENDING_DUE = "chronoq_backlog_due"


@dataclass(frozen=True, slots=True)
class Figure:
    value: str
    window: str  # "last 5 min", "last hour", "this replica", ... ("" when it is a reading of now)


@dataclass(frozen=True, slots=True)
class Numbers:
    delivered_per_second: Figure
    lag_p99: Figure
    in_flight: Figure
    pending_due: Figure | None  # None: not read yet (no database reading so far)
    dead_letters: Figure
    current_to: datetime | None = None  # when the fleet's figures were rolled up to


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
    text = (await process_metrics.DELIVERY.exposition()).decode()
    return _samples(text_string_to_metric_families(text))


def _total(samples: Iterable[tuple[dict[str, str], float]]) -> float:
    return sum(value for _, value in samples)


def _rate(per_second: float) -> str:
    if per_second == 0:
        return "0"
    if per_second < 0.01:
        return "< 0.01"
    return f"{per_second:.2f}" if per_second < 10 else f"{per_second:.1f}"


def _fleet(fleet: Activity | None) -> tuple[Figure, Figure, Figure]:
    """Delivered per second over the last `RATE_MINUTES` minutes rolled up, and the hour's
    lateness p99 and dead letters."""
    if fleet is None or fleet.current_to is None:
        none = Figure("-", "not rolled up yet")
        return none, none, none
    upto = fleet.current_to
    recent = [m for m in fleet.minutes if m.at <= upto][-RATE_MINUTES:]
    seconds = (upto - recent[0].at).total_seconds() if recent else 0.0
    delivered = sum(m.delivered for m in recent)
    rate = delivered / seconds if seconds > 0 else 0.0
    total = fleet.total
    return (
        Figure(_rate(rate), f"last {len(recent)} min"),
        Figure(format_lateness(quantile(total.lateness, 0.99)), "last hour"),
        Figure(f"{total.dead_lettered}", "last hour"),
    )


class LiveNumbers:
    """The header's figures; `read()` reads them."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        """`registry`: read that registry alone for what is in flight (None: what GET
        /metrics serves)."""
        self._registry = registry

    async def read(self, fleet: Activity | None) -> Numbers:
        """The figures, the fleet's from `fleet` (the last hour's activity; None: not
        read)."""
        # The same refresh GET /metrics does first: the backlog gauges are read from the
        # database at most every few seconds, whoever asks.
        await store_metrics.STORE.refresh()
        if self._registry is None:
            samples = await _served()
        else:
            samples = _samples(self._registry.collect())
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
        rate, lag, dead = _fleet(fleet)
        return Numbers(
            delivered_per_second=rate,
            lag_p99=lag,
            in_flight=Figure(f"{_total(samples.get(IN_FLIGHT, [])):.0f}", "this replica"),
            pending_due=pending,
            dead_letters=dead,
            current_to=None if fleet is None else fleet.current_to,
        )
