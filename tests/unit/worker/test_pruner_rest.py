"""The retention loop's rest between batches grows with the batch, so pruning a slow
database never holds it more than a quarter of the time."""

import pytest

from app.worker.pruner import BATCH_PAUSE, REST_FACTOR, rest_after


def test_a_quick_batch_rests_the_floor() -> None:
    assert rest_after(0.001) == BATCH_PAUSE
    assert rest_after(0.0) == BATCH_PAUSE


@pytest.mark.parametrize("took", [0.05, 0.2, 1.5])
def test_a_slow_batch_rests_longer_than_it_took(took: float) -> None:
    rest = rest_after(took)
    assert rest == pytest.approx(took * REST_FACTOR)
    # the share of wall time spent deleting stays at or under a quarter
    assert took / (took + rest) <= 0.25 + 1e-9
