"""Liveness and readiness."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from app.api.deps import ReadinessDep
from app.api.schemas import Health
from app.telemetry import api_metrics, process_metrics, store_metrics

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> Health:
    """The process is up and serving."""
    return Health(status="ok")


@router.head("/healthz", response_class=Response, responses={200: {"description": "Up"}})
async def healthz_head() -> Response:
    """The process is up and serving: GET's status without its body, for probes and load
    balancers that check with HEAD."""
    return Response(status_code=200, media_type="application/json")


@router.get("/readyz", responses={503: {"model": Health, "description": "Not ready"}})
async def readyz(readiness: ReadinessDep) -> JSONResponse:
    """Ready to take traffic: database reachable and migrated, the broker connected when
    AMQP_URL is set, the delivery loop alive and its claims working. The API keeps accepting
    schedules meanwhile."""
    checks = await readiness.checks()
    api_metrics.observe_readiness(checks)
    ready = all(value == "ok" for value in checks.values())
    body = Health(status="ready" if ready else "not ready", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text"}},
)
async def metrics(readiness: ReadinessDep) -> Response:
    """Prometheus metrics of this replica (text exposition format)."""
    # The installation's backlog, dead letters and schedules: read from the database at
    # most every few seconds, by one read at a time (app.telemetry.store_metrics).
    await store_metrics.STORE.refresh()
    # Readiness as /readyz answers it now, so that an alert sees a replica taken out of
    # the balancer; a check that does not answer within the scrape's budget counts as failing.
    try:
        checks = await asyncio.wait_for(readiness.checks(), store_metrics.STORE_WAIT_SECONDS)
    except TimeoutError:
        checks = dict.fromkeys(api_metrics.readiness_checks(), "no answer in time")
    api_metrics.observe_readiness(checks)
    return Response(await process_metrics.DELIVERY.exposition(), media_type=CONTENT_TYPE_LATEST)
