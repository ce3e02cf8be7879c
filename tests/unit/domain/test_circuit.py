"""The circuit as a function of the outcomes a settle records (`circuit_after`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.domain.endpoints import (
    Circuit,
    CircuitEvent,
    CircuitSettings,
    CircuitState,
    circuit_after,
    enabled,
)

NOW = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
SETTINGS = CircuitSettings(
    failure_threshold=3, cooldown_seconds=10, max_cooldown_seconds=25, disable_after_seconds=60
)


def test_a_2xx_resets_the_count_and_the_threshold_opens_it() -> None:
    after = circuit_after(Circuit(), [False, False, True, False, False], SETTINGS, NOW)
    assert (after.circuit.state, after.circuit.failures, after.events) == (
        CircuitState.CLOSED,
        2,
        (),
    )
    opened = circuit_after(after.circuit, [False], SETTINGS, NOW)
    assert opened.events == (CircuitEvent.OPENED,)
    assert opened.circuit.probe_at == NOW + timedelta(seconds=10)
    assert opened.circuit.shown(NOW) is CircuitState.OPEN
    assert opened.circuit.shown(NOW + timedelta(seconds=10)) is CircuitState.HALF_OPEN


def test_failures_of_attempts_started_before_it_opened_do_not_reopen_it() -> None:
    opened = circuit_after(Circuit(), [False] * 3, SETTINGS, NOW).circuit
    later = circuit_after(opened, [False] * 5, SETTINGS, NOW + timedelta(seconds=5))
    assert (later.circuit.probe_at, later.events) == (opened.probe_at, ())


def test_failed_probes_double_the_cooldown_up_to_the_maximum_then_disable() -> None:
    circuit = circuit_after(Circuit(), [False] * 3, SETTINGS, NOW).circuit
    at, seen = NOW, []
    for _ in range(3):
        at += timedelta(seconds=circuit.cooldown or 0)
        change = circuit_after(circuit, [False], SETTINGS, at)
        circuit = change.circuit
        seen.append((change.events, circuit.cooldown))
    assert seen == [
        ((CircuitEvent.REOPENED,), 20),
        ((CircuitEvent.REOPENED,), 25),
        ((CircuitEvent.REOPENED,), 25),
    ]
    at += timedelta(seconds=25)  # 80 s after it first opened: past disable_after
    disabled = circuit_after(circuit, [False], SETTINGS, at)
    assert disabled.events == (CircuitEvent.DISABLED,)
    assert disabled.circuit.state is CircuitState.DISABLED
    still = circuit_after(disabled.circuit, [True], SETTINGS, at)
    assert (still.circuit.state, still.events) == (CircuitState.DISABLED, ())
    assert enabled(still.circuit, at).circuit == Circuit(changed_at=at)


def test_a_successful_probe_closes_it_and_a_circuit_never_disabled_when_unset() -> None:
    never = CircuitSettings(failure_threshold=1, cooldown_seconds=10, disable_after_seconds=None)
    circuit = circuit_after(Circuit(), [False], never, NOW).circuit
    far = NOW + timedelta(days=365)
    reopened = circuit_after(circuit, [False], never, far)
    assert reopened.events == (CircuitEvent.REOPENED,)
    closed = circuit_after(reopened.circuit, [True], never, far + timedelta(hours=1))
    assert closed.events == (CircuitEvent.RECOVERED,)
    assert closed.circuit == Circuit(changed_at=far + timedelta(hours=1))
