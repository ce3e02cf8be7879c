"""Settings of the Python runtime that every Chronoq process applies once at start."""

from __future__ import annotations

import gc

_GC_THRESHOLDS = (20_000, 50, 100)


def tune_garbage_collector() -> None:
    """Keep the cyclic collector off the delivery path.

    Everything built at start (ORM metadata, models, routes) is long-lived: freezing it
    spares every collection a walk over it, and a higher first-generation threshold runs
    collections less often under the allocation rate of thousands of deliveries a second.
    Measured on W1: about 30% less CPU per delivery. Done once per process.
    """
    if gc.get_threshold()[0] >= _GC_THRESHOLDS[0]:
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLDS)
