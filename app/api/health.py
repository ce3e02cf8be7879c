"""Liveness and readiness."""

from __future__ import annotations

import logging

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app import metrics as app_metrics
from app.api.deps import StateDep
from app.api.schemas import Health
from app.store.database import redact_url
from app.store.migrations import is_at_head

log = logging.getLogger(__name__)

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> Health:
    """The process is up and serving."""
    return Health(status="ok")


@router.get("/readyz", responses={503: {"model": Health, "description": "Not ready"}})
async def readyz(state: StateDep) -> JSONResponse:
    """Ready to take traffic: database reachable and migrated, the broker connected when
    AMQP_URL is set, the delivery loop alive and its claims working. The API keeps accepting
    schedules meanwhile."""
    checks: dict[str, str] = {}
    database = state["database"]
    try:
        checks["database"] = "ok" if await is_at_head(database) else "not migrated to head"
    except Exception as exc:
        # The answer names the failure, never where the database lives; the log does.
        log.warning("readiness: database %s unreachable: %s", redact_url(database.url), exc)
        checks["database"] = f"unreachable: {type(exc).__name__}"
    broker = state["sinks"].broker
    if broker is not None:
        checks["broker"] = "ok" if broker.connected else "unreachable"
    dispatcher = state["dispatcher"]
    if dispatcher is not None:
        checks["worker"] = dispatcher.health()
    ready = all(value == "ok" for value in checks.values())
    body = Health(status="ready" if ready else "not ready", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text"}},
)
async def metrics() -> Response:
    """Prometheus metrics of this replica (text exposition format)."""
    # The installation's backlog, dead letters and schedules: read from the database at
    # most every few seconds, by one read at a time (app.metrics).
    await app_metrics.STORE.refresh()
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
