"""An endpoint's circuit breaker as its key's row holds it (`flow_keys.circuit` and the
columns beside it), and its settings as the endpoint's row holds them."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.endpoints import Circuit, CircuitSettings, CircuitState
from app.store.schema.tables import endpoints

_e = endpoints.c


def settings_of(row: Any) -> CircuitSettings:
    return CircuitSettings(
        failure_threshold=row.failure_threshold,
        cooldown_seconds=row.cooldown_seconds,
        max_cooldown_seconds=row.max_cooldown_seconds,
        disable_after_seconds=row.disable_after_seconds,
    )


def circuit_of(row: Any) -> Circuit:
    """A key row's circuit (a row that no circuit ever touched is closed)."""
    if row is None:
        return Circuit()
    return Circuit(
        state=CircuitState(row.circuit) if row.circuit else CircuitState.CLOSED,
        failures=row.failures_in_a_row or 0,
        changed_at=row.circuit_changed_at,
        opened_at=row.circuit_opened_at,
        cooldown=row.circuit_cooldown,
        probe_at=row.backoff_until if row.circuit == CircuitState.OPEN else None,
    )


def circuit_values(circuit: Circuit) -> dict[str, Any]:
    """The key row's columns for `circuit` (its back-off and pause included)."""
    values: dict[str, Any] = {
        "circuit": None if circuit.state is CircuitState.CLOSED else circuit.state.value,
        "failures_in_a_row": circuit.failures,
        "circuit_changed_at": circuit.changed_at,
        "circuit_opened_at": circuit.opened_at,
        "circuit_cooldown": circuit.cooldown,
        "paused": circuit.state is CircuitState.DISABLED,
    }
    if circuit.state is CircuitState.OPEN:
        values["backoff_until"] = circuit.probe_at
    return values


async def endpoint_settings(
    conn: AsyncConnection, ids: Iterable[uuid.UUID]
) -> dict[uuid.UUID, CircuitSettings]:
    """The circuit settings of the endpoints of `ids` that exist."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    columns = (
        _e.id,
        _e.failure_threshold,
        _e.cooldown_seconds,
        _e.max_cooldown_seconds,
        _e.disable_after_seconds,
    )
    rows = await conn.execute(sa.select(*columns).where(_e.id.in_(wanted)))
    return {row.id: settings_of(row) for row in rows}
