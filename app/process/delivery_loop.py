"""A replica's delivery loop with what it owns: its database pools, its queue, retention.

One wiring for the two places a loop runs: on the API's event loop (`app.main`, the ASGI
app on its own) and in a delivery process of its own (`app.process.delivery`, under
`chronoq serve`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from app.process.databases import open_database
from app.settings import Settings
from app.sinks.registry import Sinks
from app.store.engine.wakeups import Wakeups
from app.store.loop.queue import DeliveryQueue
from app.telemetry import delivery_metrics, store_metrics, tracing
from app.worker.activity import ActivityRollup
from app.worker.dispatcher import Dispatcher
from app.worker.operator_events import EventSender
from app.worker.pruner import Pruner


@asynccontextmanager
async def delivery_loop(config: Settings, sinks: Sinks, hub: Wakeups) -> AsyncIterator[Dispatcher]:
    """Run the loop (and retention and the charts' roll-up beside it) for the duration of
    the block, hearing `hub`'s announcements; stop them gracefully on exit."""
    tracing.start()  # before the loop reads it: this process's, when traces are on
    async with AsyncExitStack() as stack:
        # The loop's own pool: its claims and settles never queue behind API requests for a
        # connection, and skip the per-checkout ping.
        database = open_database(config, "worker")
        stack.push_async_callback(database.close)
        delivery_metrics.tenant_label(config.metrics_tenant_label)
        store_metrics.POOLS.watch("worker", database)
        stack.callback(store_metrics.POOLS.forget, "worker")
        starts = None
        if database.dialect.backend.multi_replica:
            # SQLite has one writer per process: its starts share the loop's pool.
            starts = open_database(config, "starts")
            stack.push_async_callback(starts.close)
        queue = DeliveryQueue(database, hub, starts=starts)
        dispatcher = Dispatcher(database, sinks, config, wakeups=hub, queue=queue)
        await stack.enter_async_context(dispatcher.started())
        # Retention runs beside the loop; an advisory lock keeps it to one replica at a
        # time, and API-only replicas leave it to the workers.
        await stack.enter_async_context(Pruner(database, config).started())
        # The charts' figures, rolled up from the attempt log by one replica at a time.
        await stack.enter_async_context(ActivityRollup(database, config).started())
        # Operator events: sent by every replica's loop, each event leased to one.
        await stack.enter_async_context(EventSender(database, sinks, config).started())
        yield dispatcher
