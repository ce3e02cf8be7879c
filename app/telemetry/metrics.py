"""Prometheus metrics of a replica, served at GET /metrics.

The metrics live in the process's default registry, created once on import: a process
runs one replica. Each area declares its series in a module of its own: the delivery
loop's (`delivery_metrics`), the database's and retention's (`store_metrics`), the API's
(`api_metrics`). This module imports them all, so that a process rendering its registry
here (`exposition`) serves every series, whichever its own code counts: the API process
(through `process_metrics`, which adds its delivery processes' metrics) and a delivery
process alike.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from prometheus_client import Info, disable_created_metrics, generate_latest
from prometheus_client.registry import REGISTRY

from app.telemetry import api_metrics, delivery_metrics, store_metrics  # noqa: F401 (their series register on import)

# Counters and histograms would each carry a `_created` series (the instant the process
# made them): one more series per label set that no dashboard reads. The switch is read when
# the registry is rendered, so it holds for the series the modules above made.
disable_created_metrics()  # type: ignore[no-untyped-call]


def _version() -> str:
    try:
        return version("chronoq")
    except PackageNotFoundError:
        return "unknown"


BUILD = Info("chronoq_build", "The version this replica runs (value 1)")
BUILD.info({"version": _version()})


def exposition() -> bytes:
    """This process's metrics in the text format."""
    return generate_latest(REGISTRY)
