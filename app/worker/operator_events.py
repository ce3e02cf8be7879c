"""The sender of operator events (DESIGN section 15): every second, lease the events due,
send each to its tenant's `events_target` through the delivery sinks (signed as a delivery
to that target is), and remove it once a 2xx took it; retry it later otherwise, and give it
up after `MAX_EVENT_ATTEMPTS` or a permanent refusal, with an ERROR line and a count,
never an event about it. Every replica's loop runs one: the lease keeps an event to one
sender at a time, and one that dies with it leaves it for another once the lease ends.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

from app.domain.errors import StoreUnavailableError
from app.domain.occurrence import Delivered, Delivery, Permanent, Unsent
from app.domain.operator_events import MAX_EVENT_ATTEMPTS, event_backoff
from app.domain.target import EndpointTarget, Target
from app.settings import Settings
from app.sinks.registry import Sinks
from app.store.dialects import transaction_now
from app.store.engine.database import Connection, Database
from app.store.records.endpoint_targets import resolve_endpoints
from app.store.records.operator_events import (
    LeasedEvent,
    lease_operator_events,
    retry_later,
    told,
)
from app.telemetry import delivery_metrics

log = logging.getLogger(__name__)

# Events leased at once, how often the sender looks, and how long it holds what it leased
# (well past a send's timeout).
BATCH = 50
POLL_SECONDS = 1.0
STOP_GRACE = 5.0
# The schedule id an event's delivery names (an event belongs to no schedule).
NO_SCHEDULE = uuid.UUID(int=0)


class EventSender:
    def __init__(self, database: Database, sinks: Sinks, settings: Settings) -> None:
        self._db = database
        self._sinks = sinks
        self._settings = settings
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def _lease(self) -> float:
        return self._settings.dispatch_timeout * 2 + 5

    async def run_once(self) -> int:
        """Send what is due now; how many events were leased."""

        async def lease(conn: Connection) -> tuple[list[LeasedEvent], dict[uuid.UUID, Any]]:
            now = await transaction_now(conn)
            leased = await lease_operator_events(conn, limit=BATCH, lease=self._lease, now=now)
            endpoints = [
                e.target.endpoint_id for e in leased if isinstance(e.target, EndpointTarget)
            ]
            return leased, await resolve_endpoints(conn, endpoints, now)

        leased, endpoints = await self._db.run(lease)
        if not leased:
            return 0
        outcomes = await asyncio.gather(*(self._send(e, endpoints) for e in leased))
        done = [e.id for e, (ok, _) in zip(leased, outcomes, strict=True) if ok is not None]
        again = [
            (e.id, event_backoff(e.attempts), error)
            for e, (ok, error) in zip(leased, outcomes, strict=True)
            if ok is None
        ]

        async def settle(conn: Connection) -> None:
            await told(conn, done)
            await retry_later(conn, again, await transaction_now(conn))

        await self._db.run(settle)
        return len(leased)

    async def _send(
        self, event: LeasedEvent, endpoints: dict[uuid.UUID, Any]
    ) -> tuple[bool | None, str]:
        """(True: told; False: given up; None: to retry) and the error."""
        target: Target | Any | None = event.target
        if isinstance(target, EndpointTarget):
            target = endpoints.get(target.endpoint_id)
        if target is None:
            return self._given_up(
                event, "its tenant has no events target (or its endpoint is gone)"
            )
        delivery = Delivery(
            occurrence_id=event.id,
            schedule_id=NO_SCHEDULE,
            fire_at=event.created_at,
            attempt=event.attempts,
            max_attempts=MAX_EVENT_ATTEMPTS,
            lease_token=uuid.uuid4(),
            event_type=event.kind,
            body=event.body.encode(),
            target=target,
            one_shot=True,
            tenant=event.tenant,
        )
        try:
            async with asyncio.timeout(self._settings.dispatch_timeout):
                outcome = await self._sinks.deliver(delivery)
        except TimeoutError:
            outcome = None
        if isinstance(outcome, Delivered):
            delivery_metrics.OPERATOR_EVENTS.labels(event.kind, "sent").inc()
            return True, ""
        error = "timed out" if outcome is None else str(getattr(outcome, "error", outcome))
        if isinstance(outcome, Permanent) or (
            not isinstance(outcome, Unsent) and event.attempts >= MAX_EVENT_ATTEMPTS
        ):
            return self._given_up(event, error)
        delivery_metrics.OPERATOR_EVENTS.labels(event.kind, "retried").inc()
        return None, error

    def _given_up(self, event: LeasedEvent, error: str) -> tuple[bool, str]:
        delivery_metrics.OPERATOR_EVENTS.labels(event.kind, "given_up").inc()
        log.error(
            "operator event %s (%s) of tenant %s given up after %d attempts: %s",
            event.id,
            event.kind,
            event.tenant,
            event.attempts,
            error,
            extra={"event_id": str(event.id), "tenant": event.tenant, "kind": event.kind},
        )
        return False, error

    @asynccontextmanager
    async def started(self) -> AsyncIterator[EventSender]:
        self._stopping.clear()
        self._task = asyncio.create_task(self._run(), name="chronoq-operator-events")
        try:
            yield self
        finally:
            self._stopping.set()
            await asyncio.wait({self._task}, timeout=STOP_GRACE)
            if not self._task.done():
                self._task.cancel()  # what it leased is sent again once the lease ends
                with suppress(asyncio.CancelledError):
                    await self._task

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                full = await self.run_once() == BATCH
            except Exception as exc:
                full = False
                if isinstance(exc, StoreUnavailableError):
                    log.warning("operator events: %s", exc.detail)
                else:
                    log.exception("operator events failed; trying again")
            if not full:
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), POLL_SECONDS)
