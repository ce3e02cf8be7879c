"""Composition root: builds the app, and in its lifespan the database, sinks and loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.routing import APIRoute

from app.api import (
    activity,
    auth,
    dead_letters,
    docs,
    endpoints,
    flow_keys,
    health,
    occurrences,
    problems,
    schedules,
    tenants,
    topics,
    triggers,
)
from app.api.access_log import AccessLogMiddleware, AccessPrincipal
from app.api.auth import ApiKeyMiddleware, KeyRing
from app.api.body_limits import BodyLimitMiddleware
from app.api.deps import State, in_tenant
from app.api.hosts import AllowedHostsMiddleware, use_relative_redirects
from app.api.query import declared_query_only
from app.process import startup
from app.process.databases import open_database
from app.process.delivery_link import DeliveryLink
from app.process.delivery_loop import delivery_loop
from app.process.readiness import InProcessLoop, ReplicaReadiness
from app.process.runtime import tune_garbage_collector
from app.service.activity import ActivityService
from app.service.addresses import HostResolver
from app.service.dead_letters import DeadLetterService
from app.service.endpoints import EndpointService
from app.service.flow_keys import FlowKeyService
from app.service.occurrences import OccurrenceService
from app.service.schedules import ScheduleService
from app.service.tenant_keys import TenantKeyService
from app.service.tenants import TenantService
from app.service.topics import TopicService
from app.settings import Settings, load_settings
from app.sinks import open_sinks
from app.store.engine.migrations import upgrade_to_head
from app.store.engine.wakeups import Wakeups
from app.store.records.backlog import backlog
from app.telemetry import delivery_metrics, logs, process_metrics, store_metrics, tracing
from app.telemetry.http_metrics import HttpMetricsMiddleware
from app.ui import console


def _operation_id(route: APIRoute) -> str:
    return route.name


class _Chronoq(FastAPI):
    def openapi(self) -> dict[str, Any]:
        """FastAPI's document, with the problems every operation can answer with."""
        if self.openapi_schema is None:
            self.openapi_schema = problems.document(auth.document(super().openapi()))
        return self.openapi_schema


def create_app(
    settings: Settings | None = None,
    wakeups: Wakeups | None = None,
    *,
    resolver: HostResolver | None = None,
) -> FastAPI:
    """The ASGI app; settings are read from the environment when not given. `wakeups`
    lets a caller's own delivery loop hear this app's announcements, and `resolver`
    stands in for DNS when webhook hosts are checked at create (tests)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[State]:
        config = settings or load_settings()
        api_keys = config.api_key_entries()
        logs.configure(
            config.log_level,
            config.log_format,
            secrets=[k.key for k in api_keys],
            access_log=config.access_log,
        )
        if tracer is not None:
            tracer.hide(k.key for k in api_keys)
        async with AsyncExitStack() as stack:
            database = open_database(config, "api")
            stack.push_async_callback(database.close)
            store_metrics.POOLS.watch("api", database)
            stack.callback(store_metrics.POOLS.forget, "api")
            delivery_metrics.tenant_label(config.metrics_tenant_label)
            store_metrics.STORE.watch(
                partial(backlog, database, by_tenant=config.metrics_tenant_label)
            )
            stack.callback(store_metrics.STORE.forget)
            if config.auto_migrate:
                await upgrade_to_head(database)
            else:
                await startup.say_if_not_migrated(database)
            tune_garbage_collector()
            hub = wakeups or Wakeups()
            worker: InProcessLoop | DeliveryLink | None = None
            broker = None
            if config.delivery_sockets:
                # `chronoq serve` runs this replica's loop in processes of their own, with
                # the sinks: their checks are the loop's and the broker's.
                worker = DeliveryLink(config.delivery_sockets.split(","))
                await worker.open()
                stack.push_async_callback(worker.close)
                process_metrics.DELIVERY.watch(worker.metrics)
                stack.callback(process_metrics.DELIVERY.forget)
            else:
                sinks = await stack.enter_async_context(open_sinks(config))
                if config.worker_enabled:
                    dispatcher = await stack.enter_async_context(delivery_loop(config, sinks, hub))
                    worker = InProcessLoop(dispatcher, sinks.broker)
                else:
                    broker = sinks.broker  # an API-only replica still says whether it is up
            yield State(
                settings=config,
                schedules=ScheduleService(database, config, wakeups=hub, resolver=resolver),
                dead_letters=DeadLetterService(database, hub),
                occurrences=OccurrenceService(database),
                flow_keys=FlowKeyService(database),
                tenants=TenantService(database, config, resolver),
                tenant_keys=TenantKeyService(database),
                endpoints=EndpointService(database, config, resolver),
                topics=TopicService(database),
                activity=ActivityService(database),
                readiness=ReplicaReadiness(database, broker=broker, worker=worker),
                keys=KeyRing(api_keys),
            )

    # Traces on (app.telemetry.tracing): FastAPI's own server span for each request, on our tracer.
    # Off, FastAPI is built exactly as it is without them.
    tracer = tracing.start()
    traced: dict[str, Any] = {} if tracer is None else {"telemetry": tracer.telemetry()}
    app = _Chronoq(
        title="Chronoq",
        version="0.1.0",
        summary="Durable message scheduler: schedules in, occurrences delivered at least once.",
        lifespan=lifespan,
        generate_unique_id_function=_operation_id,
        # A /v1 query parameter the operation does not declare is a 422, never ignored.
        dependencies=[Depends(declared_query_only)],
        # FastAPI's own pages load their assets from CDNs; docs.install serves them here.
        docs_url=None,
        redoc_url=None,
        **traced,
    )
    problems.install(app)
    # Innermost: it sees the route the router chose (the key check hands on a copy of the
    # request's scope); requests refused before routing are not timed.
    app.add_middleware(HttpMetricsMiddleware)
    # Bodies are counted as they arrive: an oversized or stalled one is never buffered.
    app.add_middleware(BodyLimitMiddleware)
    # The name of the key the check below found, for the access log.
    app.add_middleware(AccessPrincipal)
    # Every route, present and future, is behind the key check: none opts in.
    app.add_middleware(ApiKeyMiddleware)
    # A request naming a host this service does not answer to (DNS rebinding) reaches
    # nothing else.
    app.add_middleware(AllowedHostsMiddleware)
    # Outermost: every request is logged, those refused before routing too.
    app.add_middleware(AccessLogMiddleware)
    # Redirects never repeat the Host a request came with.
    use_relative_redirects(app.router)
    app.include_router(health.router)
    # Every route of these reaches the database, so any of them can find it unreachable; and
    # each acts in the tenant the request names (a 404 when it does not exist).
    for router in (
        schedules.router,
        dead_letters.router,
        occurrences.router,
        flow_keys.router,
        tenants.router,
        endpoints.router,
        topics.topics_router,
        topics.subscriptions_router,
        activity.router,
    ):
        app.include_router(router, responses=problems.responses(503), dependencies=[in_tenant])
    app.include_router(triggers.router, dependencies=[in_tenant])
    docs.install(app)
    app.include_router(console.default_router())
    app.mount("/ui/static", console.static_files(), name="console-static")
    return app


# Run as `uvicorn app.main:app`, uvicorn gave its loggers handlers of its own before importing
# this module, and writes its first lines before the lifespan configures logging: taken here,
# they never write in uvicorn's format (a JSON log stays JSON); the lifespan's handler writes
# them from then on.
logs.adopt_server_loggers()
app = create_app()
