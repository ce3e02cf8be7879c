"""Readiness of this replica: the database reachable and migrated, the broker connected
when one is configured, the delivery loop alive and its claims working.

The loop's checks come from where it runs: this process (`InProcessLoop`: the loop's health,
and the broker connection it delivers through) or its delivery processes
(`app.process.delivery_link.DeliveryLink`, which asks them)."""

from __future__ import annotations

import logging
from typing import Protocol

from app.store.engine.database import Database, redact_url
from app.store.engine.migrations import is_at_head

log = logging.getLogger(__name__)


class Broker(Protocol):
    @property
    def connected(self) -> bool: ...


class DeliveryLoop(Protocol):
    async def checks(self) -> dict[str, str]:
        """`worker`: "ok", or why the loop is not delivering; `broker`, where one is
        configured: "ok" or "unreachable"."""
        ...


class Health(Protocol):
    def health(self) -> str: ...


def broker_check(broker: Broker) -> str:
    return "ok" if broker.connected else "unreachable"


class InProcessLoop:
    """The replica's delivery loop on this process's own event loop, with the broker it
    delivers through (None when AMQP_URL is not set)."""

    def __init__(self, loop: Health, broker: Broker | None) -> None:
        self._loop = loop
        self._broker = broker

    async def checks(self) -> dict[str, str]:
        checks = {} if self._broker is None else {"broker": broker_check(self._broker)}
        checks["worker"] = self._loop.health()
        return checks


class ReplicaReadiness:
    """The checks of one replica. `broker`: the broker connection of a replica without a
    loop of its own (API-only), None otherwise; `worker`: its loop, None when it has none."""

    def __init__(
        self, database: Database, broker: Broker | None, worker: DeliveryLoop | None
    ) -> None:
        self._database = database
        self._broker = broker
        self._worker = worker

    async def checks(self) -> dict[str, str]:
        checks: dict[str, str] = {}
        database = self._database
        try:
            checks["database"] = "ok" if await is_at_head(database) else "not migrated to head"
        except Exception as exc:
            # The answer names the failure, never where the database lives; the log does.
            log.warning("readiness: database %s unreachable: %s", redact_url(database.url), exc)
            checks["database"] = f"unreachable: {type(exc).__name__}"
        if self._broker is not None:
            checks["broker"] = broker_check(self._broker)
        if self._worker is not None:
            checks.update(await self._worker.checks())
        return checks
