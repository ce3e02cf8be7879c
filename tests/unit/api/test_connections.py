"""The descriptor budget `chronoq serve` checks before it starts, without starting it."""

from __future__ import annotations

import resource

import pytest

from app.api import connections
from app.settings import Settings, SettingsError


def limits(monkeypatch: pytest.MonkeyPatch, soft: int, hard: int) -> list[tuple[int, int]]:
    """Pretend the process may open `soft` files (`hard` at most); returns the limits set."""
    set_to: list[tuple[int, int]] = []
    current = [(soft, hard)]

    def setrlimit(which: int, value: tuple[int, int]) -> None:
        assert which == resource.RLIMIT_NOFILE
        set_to.append(value)
        current[0] = value

    monkeypatch.setattr(resource, "getrlimit", lambda which: current[0])
    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    return set_to


def test_the_budget_counts_connections_deliveries_pools_and_the_rest() -> None:
    budget = connections.descriptor_budget(Settings(max_connections=100, concurrency=10))

    assert (budget.connections, budget.deliveries) == (100, 10)
    assert (
        budget.total == 100 + 10 + connections.DATABASE_DESCRIPTORS + connections.OTHER_DESCRIPTORS
    )


def test_the_soft_limit_is_raised_to_the_hard_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    set_to = limits(monkeypatch, 256, 4096)

    connections.ensure_descriptors(Settings(concurrency=64))

    assert set_to == [(4096, 4096)]


def test_a_cap_above_what_the_limit_leaves_is_refused_saying_how_far_to_lower_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits(monkeypatch, 1024, 1024)

    with pytest.raises(SettingsError, match="lower CHRONOQ_MAX_CONNECTIONS to at most 672"):
        connections.ensure_descriptors(Settings(max_connections=1024, concurrency=64))
    assert connections.ensure_descriptors(Settings(max_connections=672, concurrency=64)) is None


def test_a_default_cap_above_what_the_limit_leaves_is_lowered_to_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits(monkeypatch, 1024, 1024)

    # Not set by the operator: `make run` under a tight ulimit still serves.
    assert connections.ensure_descriptors(Settings(concurrency=64)) == 672


def test_a_limit_below_what_deliveries_and_pools_need_asks_to_raise_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits(monkeypatch, 300, 300)

    with pytest.raises(SettingsError, match=r"^CHRONOQ_MAX_CONNECTIONS=.*: raise the limit$"):
        connections.ensure_descriptors(Settings(max_connections=1, concurrency=64))
