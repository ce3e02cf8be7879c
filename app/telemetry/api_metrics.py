"""The API's series: the client connections it holds, its requests' timings (taken by
`http_metrics.HttpMetricsMiddleware`), and each readiness check as /readyz last answered it.

Declared apart from the middleware, which imports Starlette: every process registers these
series (`metrics` imports every area's), a delivery process too, and that one loads no web
framework.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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

HTTP_DURATION = Histogram(
    "chronoq_http_request_duration_seconds",
    "HTTP requests by method, route template (`unmatched` for a path no route has) and status",
    ["method", "route", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
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
