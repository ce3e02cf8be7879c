"""Readiness of this replica: the database reachable and migrated, the broker connected
when one is configured, the delivery loop alive and its claims working."""

from __future__ import annotations

import logging
from typing import Protocol

from app.store.database import Database, redact_url
from app.store.migrations import is_at_head

log = logging.getLogger(__name__)


class Broker(Protocol):
    @property
    def connected(self) -> bool: ...


class DeliveryLoop(Protocol):
    async def health(self) -> str:
        """ "ok", or why the loop is not delivering."""
        ...


class Health(Protocol):
    def health(self) -> str: ...


class InProcessLoop:
    """The replica's delivery loop on this process's own event loop."""

    def __init__(self, loop: Health) -> None:
        self._loop = loop

    async def health(self) -> str:
        return self._loop.health()


class ReplicaReadiness:
    """The checks of one replica; `broker` and `worker` are None where it has none."""

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
            checks["broker"] = "ok" if self._broker.connected else "unreachable"
        if self._worker is not None:
            checks["worker"] = await self._worker.health()
        return checks
