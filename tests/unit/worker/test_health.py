"""Claim health: a blip is not a problem; failures that last are, until a claim succeeds."""

from __future__ import annotations

from app.worker.health import ClaimHealth

THRESHOLD = 3.0
SECRET = "connection to db.internal:5432 as chronoq:hunter2 refused"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_health() -> tuple[ClaimHealth, FakeClock]:
    clock = FakeClock()
    return ClaimHealth(THRESHOLD, clock=clock), clock


def test_a_new_loop_is_healthy() -> None:
    health, _ = make_health()

    assert health.problem() is None


def test_one_failure_then_a_success_is_healthy() -> None:
    health, clock = make_health()

    health.failed(ConnectionRefusedError(SECRET))
    clock.now += 1.0
    health.succeeded()
    clock.now += 10 * THRESHOLD

    assert health.problem() is None


def test_failures_within_the_threshold_are_not_a_problem() -> None:
    health, clock = make_health()

    health.failed(ConnectionRefusedError(SECRET))
    clock.now += THRESHOLD / 2
    health.failed(ConnectionRefusedError(SECRET))
    clock.now += THRESHOLD / 2

    assert health.problem() is None


def test_failures_lasting_longer_than_the_threshold_name_the_exception_type_only() -> None:
    health, clock = make_health()

    health.failed(ConnectionRefusedError(SECRET))
    clock.now += THRESHOLD / 2
    health.failed(ConnectionRefusedError(SECRET))
    clock.now += THRESHOLD

    problem = health.problem()

    assert problem is not None
    assert "ConnectionRefusedError" in problem
    assert "db.internal" not in problem
    assert "hunter2" not in problem


def test_the_problem_counts_from_the_first_failure_and_names_the_latest_kind() -> None:
    health, clock = make_health()

    health.failed(ConnectionRefusedError(SECRET))
    clock.now += THRESHOLD + 1.5
    health.failed(TimeoutError(SECRET))

    problem = health.problem()

    assert problem is not None
    assert "TimeoutError" in problem
    assert f"{THRESHOLD + 1.5:.1f}s" in problem


def test_a_success_after_a_lasting_failure_is_healthy_again() -> None:
    health, clock = make_health()
    health.failed(ConnectionRefusedError(SECRET))
    clock.now += THRESHOLD + 1.0
    assert health.problem() is not None

    health.succeeded()

    assert health.problem() is None


def test_failing_again_after_recovering_counts_from_the_new_failure() -> None:
    health, clock = make_health()
    health.failed(ConnectionRefusedError(SECRET))
    clock.now += THRESHOLD + 1.0
    health.succeeded()

    health.failed(ConnectionRefusedError(SECRET))
    clock.now += THRESHOLD / 2

    assert health.problem() is None
