"""Pacing: the window a claim may fill, the wait for room, and the pause after each claim."""

from __future__ import annotations

import asyncio

from app.worker.alarm import WAKE_MARGIN
from app.worker.pacing import AHEAD_BATCHES, AHEAD_PAUSE, MAX_CLAIMS, MAX_ERROR_BACKOFF, Pacing

POLL = 0.05
# How long "at once" may take on a machine whose every core is busy.
SLACK = 2.0


def pacing(**overrides: float) -> Pacing:
    values = {"concurrency": 8, "batch_size": 10, "poll_interval": POLL, "min_cycle_delay": 0.0}
    values.update(overrides)
    return Pacing(**values)  # type: ignore[arg-type]


def test_a_claim_ahead_asks_for_several_batches() -> None:
    paced = pacing()
    assert paced.batch(0.0) == 10
    assert paced.batch(0.5) == 10 * AHEAD_BATCHES


def test_a_claim_fills_the_window_of_concurrency_plus_two_batches() -> None:
    paced = pacing()
    assert paced.room(10, 0) == 8 + 2 * 10
    assert paced.room(10, 18) == 10  # a batch's worth is free: claim it
    assert paced.room(30, 0) == 8 + 2 * 30


def test_no_claim_until_a_batch_worth_of_the_window_is_free() -> None:
    paced = pacing()
    assert paced.room(10, 19) == 0  # nine free: wait, rather than claim nine
    assert paced.room(10, 40) == 0  # over-full (a claim ahead's larger batch)


def test_at_most_two_claims_at_once_or_one_when_alone() -> None:
    paced = pacing()
    assert paced.may_claim(MAX_CLAIMS - 1)
    assert not paced.may_claim(MAX_CLAIMS)
    assert paced.may_claim(0, alone=True)
    assert not paced.may_claim(1, alone=True)


def test_a_backlog_is_claimed_again_at_once() -> None:
    paced = pacing(min_cycle_delay=0.005)
    assert paced.claimed(found=10, limit=10, ahead=0.0, due_in=None) == 0.005
    assert paced.claimed(found=3, limit=10, ahead=0.0, due_in=None) == 0.005  # not ahead
    assert paced.claimed(found=30, limit=30, ahead=0.5, due_in=None) == 0.005
    assert paced.next_pause == 0.005


def test_a_window_claimed_ahead_in_full_pauses_up_to_the_poll_interval() -> None:
    assert pacing(poll_interval=1.0).claimed(3, 30, 0.5, None) == AHEAD_PAUSE
    assert pacing(poll_interval=POLL).claimed(3, 30, 0.5, None) == POLL


def test_a_claim_stopped_short_by_its_limit_is_a_backlog() -> None:
    # Fewer than asked, with more due (room kept for keyed rows, a key's room filled).
    assert pacing(min_cycle_delay=0.005).claimed(3, 30, 0.5, None, more=True) == 0.005


def test_a_window_claimed_ahead_wakes_when_a_held_key_may_start_again() -> None:
    paced = pacing(poll_interval=1.0)
    assert paced.claimed(3, 30, 0.5, 0.05) == 0.05 + WAKE_MARGIN
    assert paced.claimed(3, 30, 0.5, 5.0) == AHEAD_PAUSE


def test_an_empty_claim_sleeps_until_the_next_due_instant_or_a_poll() -> None:
    paced = pacing(poll_interval=1.0)
    assert paced.claimed(0, 10, 0.0, None) == 1.0
    assert paced.claimed(0, 10, 0.0, 0.3) == 0.3 + WAKE_MARGIN
    # Beyond the window, it wakes in time to claim the instant ahead.
    assert abs(paced.claimed(0, 30, 0.5, 0.8) - (0.3 + WAKE_MARGIN)) < 1e-9
    # Within the window (a lease that ends sooner), at the instant itself.
    assert paced.claimed(0, 30, 0.5, 0.2) == 0.2 + WAKE_MARGIN
    assert paced.claimed(0, 10, 0.0, 5.0) == 1.0


def test_failed_claims_back_off_exponentially_up_to_the_bound_and_reset_on_success() -> None:
    paced = pacing(poll_interval=0.1)
    pauses = [paced.failed() for _ in range(12)]
    assert pauses[:3] == [0.2, 0.4, 0.8]
    assert pauses == sorted(pauses)
    assert max(pauses) == MAX_ERROR_BACKOFF
    paced.claimed(0, 10, 0.0, None)
    assert paced.failed() == 0.2


async def test_the_wait_for_room_ends_at_a_signal() -> None:
    paced = pacing(poll_interval=SLACK * 5)
    waiting = asyncio.create_task(paced.wait_for_room(asyncio.Event()))
    await asyncio.sleep(0)
    paced.claim_ended()
    async with asyncio.timeout(SLACK):
        await waiting


async def test_a_finished_delivery_signals_room_only_once_a_batch_fits() -> None:
    paced = pacing(poll_interval=SLACK * 5)  # capacity 28, refill at 10
    waiting = asyncio.create_task(paced.wait_for_room(asyncio.Event()))
    await asyncio.sleep(0)
    paced.freed(19)  # nine free: no signal
    await asyncio.sleep(0.05)
    assert not waiting.done()
    paced.freed(18)
    async with asyncio.timeout(SLACK):
        await waiting


async def test_the_wait_for_room_ends_when_the_loop_stops_or_after_a_poll() -> None:
    stopping = asyncio.Event()
    paced = pacing(poll_interval=SLACK * 5)
    waiting = asyncio.create_task(paced.wait_for_room(stopping))
    await asyncio.sleep(0)
    stopping.set()
    async with asyncio.timeout(SLACK):
        await waiting

    loop = asyncio.get_running_loop()
    began = loop.time()
    await pacing(poll_interval=0.1).wait_for_room(asyncio.Event())  # no signal at all
    assert loop.time() - began >= 0.1 - 0.01
