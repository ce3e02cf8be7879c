"""Lanes: one delivery per schedule in flight, tick order, the window, short leases."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

from app.domain.destinations import destination_of
from app.domain.occurrence import Delivery, Origin
from app.domain.target import WebhookTarget
from app.worker.lanes import Lanes
from tests import factories

MIN_LEASE = 10.0
LONG = 100.0  # a lease deadline far enough ahead to start
SHORT = 5.0  # a lease deadline within MIN_LEASE of time 0

SCHEDULE_A = uuid.UUID("01900000-0000-7000-8000-00000000000a")
SCHEDULE_B = uuid.UUID("01900000-0000-7000-8000-00000000000b")
SCHEDULE_C = uuid.UUID("01900000-0000-7000-8000-00000000000c")

FIRST_TICK = datetime(2024, 3, 5, 10, 0, tzinfo=UTC)
TARGET = WebhookTarget(type="webhook", url="http://127.0.0.1:9/x")


def delivery(schedule_id: uuid.UUID, tick: int, occurrence_id: uuid.UUID | None = None) -> Delivery:
    """The schedule's delivery for its `tick`-th minute."""
    return factories.make_delivery(
        occurrence_id=occurrence_id or uuid.uuid4(),
        schedule_id=schedule_id,
        fire_at=FIRST_TICK + timedelta(minutes=tick),
        lease_token=uuid.uuid4(),
        target=TARGET,
        one_shot=False,
    )


def launch_order(lanes: Lanes, now: float = 0.0) -> list[Delivery]:
    """Start and finish deliveries one at a time until nothing more starts."""
    order: list[Delivery] = []
    while launched := lanes.start(now).launch:
        for started in launched:
            order.append(started)
            lanes.finished(started)
    return order


def test_a_schedule_has_at_most_one_delivery_in_flight() -> None:
    lanes = Lanes(limit=10, min_lease=MIN_LEASE)
    lanes.admit([delivery(SCHEDULE_A, tick) for tick in range(3)], deadline=LONG)

    first = lanes.start(0.0)
    again = lanes.start(0.0)

    assert len(first.launch) == 1
    assert again.launch == []
    assert lanes.in_flight == 1
    assert lanes.waiting == 2


def test_different_schedules_start_side_by_side() -> None:
    lanes = Lanes(limit=10, min_lease=MIN_LEASE)
    lanes.admit([delivery(SCHEDULE_A, 0), delivery(SCHEDULE_B, 0)], deadline=LONG)

    started = lanes.start(0.0)

    assert {d.schedule_id for d in started.launch} == {SCHEDULE_A, SCHEDULE_B}
    assert lanes.in_flight == 2


def _fanned(tick: int, endpoint: str) -> Delivery:
    """A topic occurrence's delivery to `endpoint`'s key (a fan-out's: it has a parent)."""
    return dataclasses.replace(
        delivery(SCHEDULE_A, tick),
        parent_id=uuid.uuid4(),
        flow_key=f"acme/~{endpoint}",
        origin=Origin.FANOUT,
    )


def test_a_topics_deliveries_to_each_subscriber_start_side_by_side() -> None:
    # One subscriber's delivery in flight (a slow receiver, say) holds back no other's.
    lanes = Lanes(limit=10, min_lease=MIN_LEASE)
    lanes.admit([_fanned(0, "one"), _fanned(0, "two"), _fanned(0, "three")], deadline=LONG)

    started = lanes.start(0.0)

    assert {d.flow_key for d in started.launch} == {"acme/~one", "acme/~two", "acme/~three"}


def test_a_topics_deliveries_to_one_subscriber_arrive_one_at_a_time_in_tick_order() -> None:
    lanes = Lanes(limit=10, min_lease=MIN_LEASE)
    later, sooner = _fanned(1, "one"), _fanned(0, "one")
    lanes.admit([later, sooner], deadline=LONG)

    assert lanes.start(0.0).launch == [sooner]
    assert lanes.start(0.0).launch == []
    lanes.finished(sooner)
    assert lanes.start(0.0).launch == [later]


def test_a_schedules_deliveries_start_in_tick_order_when_two_claims_admit_them_in_reverse() -> None:
    lanes = Lanes(limit=10, min_lease=MIN_LEASE)
    later = [delivery(SCHEDULE_A, 3), delivery(SCHEDULE_A, 2)]
    earlier = [delivery(SCHEDULE_A, 1), delivery(SCHEDULE_A, 0)]

    lanes.admit(later, deadline=LONG)
    lanes.admit(earlier, deadline=LONG)

    assert [d.fire_at for d in launch_order(lanes)] == [
        FIRST_TICK + timedelta(minutes=tick) for tick in range(4)
    ]


def test_deliveries_with_the_same_fire_at_start_in_occurrence_id_order() -> None:
    lanes = Lanes(limit=10, min_lease=MIN_LEASE)
    low = delivery(SCHEDULE_A, 0, occurrence_id=uuid.UUID(int=1))
    high = delivery(SCHEDULE_A, 0, occurrence_id=uuid.UUID(int=2))

    lanes.admit([high], deadline=LONG)
    lanes.admit([low], deadline=LONG)

    assert launch_order(lanes) == [low, high]


def test_no_more_than_limit_deliveries_are_in_flight() -> None:
    lanes = Lanes(limit=2, min_lease=MIN_LEASE)
    lanes.admit(
        [delivery(schedule, 0) for schedule in (SCHEDULE_A, SCHEDULE_B, SCHEDULE_C)],
        deadline=LONG,
    )

    started = lanes.start(0.0)

    assert len(started.launch) == 2
    assert lanes.start(0.0).launch == []
    assert lanes.in_flight == 2
    assert lanes.waiting == 1


def test_a_finished_delivery_frees_its_place_in_the_window() -> None:
    lanes = Lanes(limit=2, min_lease=MIN_LEASE)
    deliveries = [delivery(schedule, 0) for schedule in (SCHEDULE_A, SCHEDULE_B, SCHEDULE_C)]
    lanes.admit(deliveries, deadline=LONG)
    first, _ = lanes.start(0.0).launch

    lanes.finished(first)
    started = lanes.start(0.0)

    assert started.launch == [deliveries[2]]
    assert lanes.in_flight == 2
    assert lanes.waiting == 0


def test_finished_lets_the_lanes_next_delivery_start() -> None:
    lanes = Lanes(limit=10, min_lease=MIN_LEASE)
    first, second = delivery(SCHEDULE_A, 0), delivery(SCHEDULE_A, 1)
    lanes.admit([first, second], deadline=LONG)
    assert lanes.start(0.0).launch == [first]

    lanes.finished(first)

    assert lanes.start(0.0).launch == [second]
    assert lanes.waiting == 0
    assert lanes.in_flight == 1


def test_a_delivery_admitted_while_its_schedule_is_in_flight_waits_for_finished() -> None:
    lanes = Lanes(limit=10, min_lease=MIN_LEASE)
    first, second = delivery(SCHEDULE_A, 0), delivery(SCHEDULE_A, 1)
    lanes.admit([first], deadline=LONG)
    assert lanes.start(0.0).launch == [first]

    lanes.admit([second], deadline=LONG)
    before = lanes.start(0.0)
    lanes.finished(first)
    after = lanes.start(0.0)

    assert before.launch == []
    assert after.launch == [second]


def test_a_head_with_a_short_lease_is_handed_back_with_its_whole_lane() -> None:
    lanes = Lanes(limit=1, min_lease=MIN_LEASE)
    short_head = delivery(SCHEDULE_A, 0)
    rest = delivery(SCHEDULE_A, 1)  # a later claim: a long lease, but behind the head
    other = delivery(SCHEDULE_B, 0)
    lanes.admit([short_head], deadline=SHORT)
    lanes.admit([rest, other], deadline=LONG)

    started = lanes.start(0.0)

    assert sorted(started.hand_back, key=lambda d: d.fire_at) == [short_head, rest]
    # The hand back takes no room in the window: the other schedule still starts.
    assert started.launch == [other]
    assert lanes.waiting == 0
    assert lanes.in_flight == 1


def test_a_handed_back_lane_is_never_launched_later() -> None:
    lanes = Lanes(limit=10, min_lease=MIN_LEASE)
    lanes.admit([delivery(SCHEDULE_A, 0), delivery(SCHEDULE_A, 1)], deadline=SHORT)
    handed_back = lanes.start(0.0).hand_back

    later = lanes.start(0.0)

    assert len(handed_back) == 2
    assert later.launch == []
    assert later.hand_back == []
    assert lanes.in_flight == 0


def test_a_lease_exactly_min_lease_away_may_still_start() -> None:
    lanes = Lanes(limit=10, min_lease=MIN_LEASE)
    lanes.admit([delivery(SCHEDULE_A, 0)], deadline=MIN_LEASE)

    started = lanes.start(0.0)

    assert len(started.launch) == 1
    assert started.hand_back == []


def test_expiring_returns_nothing_when_no_lease_is_short() -> None:
    lanes = Lanes(limit=10, min_lease=MIN_LEASE)
    lanes.admit([delivery(SCHEDULE_A, 0), delivery(SCHEDULE_B, 0)], deadline=LONG)

    assert lanes.expiring(0.0) == []
    assert lanes.waiting == 2


def test_expiring_returns_whole_lanes_holding_a_short_lease_and_leaves_the_others() -> None:
    lanes = Lanes(limit=10, min_lease=MIN_LEASE)
    head = delivery(SCHEDULE_A, 0)  # long lease, but its lane holds a short one
    behind = delivery(SCHEDULE_A, 1)
    other = delivery(SCHEDULE_B, 0)
    lanes.admit([head, other], deadline=LONG)
    lanes.admit([behind], deadline=SHORT)

    expiring = lanes.expiring(0.0)

    assert sorted(expiring, key=lambda d: d.fire_at) == [head, behind]
    assert lanes.waiting == 1
    assert lanes.expiring(0.0) == []
    assert lanes.start(0.0).launch == [other]


def test_expiring_takes_the_waiting_lane_of_a_schedule_in_flight() -> None:
    lanes = Lanes(limit=10, min_lease=MIN_LEASE)
    running = delivery(SCHEDULE_A, 0)
    lanes.admit([running], deadline=LONG)
    assert lanes.start(0.0).launch == [running]
    waiting = delivery(SCHEDULE_A, 1)
    lanes.admit([waiting], deadline=SHORT)

    expiring = lanes.expiring(0.0)
    lanes.finished(running)

    assert expiring == [waiting]
    assert lanes.waiting == 0
    assert lanes.start(0.0).launch == []
    assert lanes.in_flight == 0


def test_expiring_finds_leases_that_became_short_as_time_passed() -> None:
    lanes = Lanes(limit=10, min_lease=MIN_LEASE)
    soon, later = delivery(SCHEDULE_A, 0), delivery(SCHEDULE_B, 0)
    lanes.admit([soon], deadline=50.0)
    lanes.admit([later], deadline=LONG)

    assert lanes.expiring(0.0) == []
    assert lanes.expiring(45.0) == [soon]
    assert lanes.expiring(45.0) == []
    assert lanes.expiring(95.0) == [later]
    assert lanes.waiting == 0


def test_take_all_empties_every_lane_and_leaves_the_in_flight_ones_alone() -> None:
    lanes = Lanes(limit=10, min_lease=MIN_LEASE)
    running = delivery(SCHEDULE_A, 0)
    waiting = [delivery(SCHEDULE_A, 1), delivery(SCHEDULE_B, 0), delivery(SCHEDULE_C, 0)]
    lanes.admit([running], deadline=LONG)
    assert lanes.start(0.0).launch == [running]
    lanes.admit(waiting, deadline=LONG)

    taken = lanes.take_all()
    lanes.finished(running)

    assert sorted(taken, key=lambda d: (d.schedule_id, d.fire_at)) == waiting
    assert lanes.waiting == 0
    assert lanes.take_all() == []
    assert lanes.expiring(1000.0) == []
    assert lanes.start(0.0).launch == []
    assert lanes.in_flight == 0


def test_a_start_given_most_launches_no_more_than_that_within_the_window() -> None:
    lanes = Lanes(limit=3, min_lease=MIN_LEASE)
    lanes.admit([delivery(s, 0) for s in (SCHEDULE_A, SCHEDULE_B, SCHEDULE_C)], deadline=LONG)

    assert len(lanes.start(0.0, most=0).launch) == 0
    assert len(lanes.start(0.0, most=1).launch) == 1
    assert len(lanes.start(0.0, most=5).launch) == 2  # the window of 3 still holds
    assert lanes.in_flight == 3
    assert lanes.waiting == 0


def test_first_attempts_start_before_retries_and_replays_admitted_earlier() -> None:
    lanes = Lanes(limit=2, min_lease=MIN_LEASE)
    replays = [
        factories.make_delivery(schedule_id=uuid.uuid4(), occurrence_id=uuid.uuid4())
        for _ in range(4)
    ]
    first = dataclasses.replace(delivery(SCHEDULE_A, 0), first=True)
    lanes.admit(replays, LONG)
    lanes.admit([first], LONG)

    started = lanes.start(0.0).launch
    assert started[0] is first
    assert started[1] in replays
    # Once no first attempt waits, the others go on in the order they came.
    for done in started:
        lanes.finished(done)
    assert lanes.start(0.0).launch == replays[1:3]


def replays(count: int) -> list[Delivery]:
    """Deliveries that are not first attempts, each of its own schedule."""
    return [
        factories.make_delivery(schedule_id=uuid.uuid4(), occurrence_id=uuid.uuid4())
        for _ in range(count)
    ]


def test_a_reserve_keeps_room_in_the_window_for_first_attempts() -> None:
    lanes = Lanes(limit=4, min_lease=MIN_LEASE)
    lanes.admit(replays(6), LONG)

    started = lanes.start(0.0, reserve=1).launch
    assert len(started) == 3  # one slot of the window stays free
    assert lanes.start(0.0, reserve=1).launch == []

    first = dataclasses.replace(delivery(SCHEDULE_A, 0), first=True)
    lanes.admit([first], LONG)
    assert lanes.start(0.0, reserve=1).launch == [first]
    assert lanes.in_flight == 4


def test_a_reserve_is_kept_within_most_as_well() -> None:
    lanes = Lanes(limit=10, min_lease=MIN_LEASE)
    lanes.admit(replays(6), LONG)

    assert len(lanes.start(0.0, most=3, reserve=2).launch) == 1
    first = dataclasses.replace(delivery(SCHEDULE_A, 0), first=True)
    second = dataclasses.replace(delivery(SCHEDULE_B, 0), first=True)
    lanes.admit([first, second], LONG)
    assert lanes.start(0.0, most=2, reserve=2).launch == [first, second]


def test_retries_still_start_beside_a_reserve_when_nothing_is_in_flight() -> None:
    lanes = Lanes(limit=4, min_lease=MIN_LEASE)
    again = replays(2)
    lanes.admit(again, LONG)

    assert lanes.start(0.0, reserve=3).launch == again[:1]


def test_without_a_reserve_retries_fill_the_whole_window() -> None:
    lanes = Lanes(limit=4, min_lease=MIN_LEASE)
    lanes.admit(replays(6), LONG)

    assert len(lanes.start(0.0).launch) == 4
    assert lanes.waiting == 2


def test_only_unstarted_heads_leave_beyond_the_window_and_only_up_to_the_spare() -> None:
    lanes = Lanes(limit=1, min_lease=MIN_LEASE)
    marked = delivery(SCHEDULE_A, 0)
    unstarted = [delivery(SCHEDULE_B, 0), delivery(SCHEDULE_C, 0)]
    lanes.admit([marked], deadline=LONG)
    lanes.admit(unstarted, deadline=LONG, unstarted={d.occurrence_id for d in unstarted})

    first = lanes.start(0.0, spare=1)

    assert first.launch == [marked, unstarted[0]]
    assert first.unstarted == {unstarted[0].occurrence_id}
    assert lanes.start(0.0, spare=1).launch == [], "one beyond the window at most"
    assert lanes.start(0.0).launch == [], "none beyond the window without a spare"


def test_a_started_head_waits_for_the_window_even_with_a_spare() -> None:
    lanes = Lanes(limit=1, min_lease=MIN_LEASE)
    lanes.admit([delivery(SCHEDULE_A, 0), delivery(SCHEDULE_B, 0)], deadline=LONG)

    assert len(lanes.start(0.0, spare=5).launch) == 1
    assert lanes.in_flight == 1


# -- destinations --------------------------------------------------------------------------

SLOW_TARGET = WebhookTarget(type="webhook", url="http://127.0.0.1:7/tarpit")
FAST_TARGET = WebhookTarget(type="webhook", url="http://127.0.0.1:8/fast")


def to(target: WebhookTarget, count: int, *, first: bool = True) -> list[Delivery]:
    """First attempts (or others) to `target`, each of its own schedule."""
    return [
        factories.make_delivery(
            schedule_id=uuid.uuid4(), occurrence_id=uuid.uuid4(), target=target, first=first
        )
        for _ in range(count)
    ]


def send(lanes: Lanes, now: float) -> list[Delivery]:
    """Start what may start and send it at once, as the loop does with a free permit."""
    launched = lanes.start(now).launch
    for delivery in launched:
        lanes.sending(delivery, now)
    return launched


def answered(lanes: Lanes, deliveries: list[Delivery], now: float) -> None:
    for done in deliveries:
        lanes.finished(done, now)


def test_a_destination_not_known_to_answer_leaves_the_spare_slots_free_for_others() -> None:
    lanes = Lanes(limit=8, min_lease=MIN_LEASE, spare_slots=2)
    lanes.admit(to(SLOW_TARGET, 20), LONG)

    held = send(lanes, 0.0)
    assert len(held) == 6, "two slots stay free of a destination that has not answered"
    assert send(lanes, 0.0) == []

    stream = to(FAST_TARGET, 1)
    lanes.admit(stream, LONG)
    assert send(lanes, 0.5) == stream, "another destination starts at once"


def test_alone_a_destination_that_answers_quickly_may_use_every_slot() -> None:
    lanes = Lanes(limit=8, min_lease=MIN_LEASE, spare_slots=2)
    lanes.admit(to(FAST_TARGET, 20), LONG)

    first = send(lanes, 0.0)
    assert len(first) == 6
    answered(lanes, first[:1], 0.01)

    assert len(send(lanes, 0.01)) == 3, "answered quickly: the whole window"
    assert lanes.in_flight == 8


def test_a_destination_whose_attempt_runs_past_slow_after_gives_up_the_spare_slots() -> None:
    lanes = Lanes(limit=8, min_lease=MIN_LEASE, spare_slots=2, slow_after=1.0)
    lanes.admit(to(FAST_TARGET, 20), LONG)
    first = send(lanes, 0.0)
    answered(lanes, first[:2], 0.01)
    assert len(send(lanes, 0.01)) == 4
    assert lanes.saturated(0.01) == [], "it answers: nothing to pass over"

    # Nothing of it answered for over a second: it is slow now, and over its share.
    answered(lanes, first[2:3], 1.5)
    assert send(lanes, 1.5) == []
    assert lanes.saturated(1.5) == [destination_of(FAST_TARGET)]


def test_destinations_take_turns_at_the_free_slots() -> None:
    lanes = Lanes(limit=4, min_lease=MIN_LEASE)
    slow, fast = to(SLOW_TARGET, 10), to(FAST_TARGET, 10)
    lanes.admit(slow, LONG)
    lanes.admit(fast, LONG)

    launched = send(lanes, 0.0)

    assert launched == [slow[0], fast[0], slow[1], fast[1]], "in turn, each in its own order"


def test_over_its_share_a_destination_waits_while_one_under_its_share_has_work() -> None:
    lanes = Lanes(limit=8, min_lease=MIN_LEASE, spare_slots=2)
    lanes.admit(to(SLOW_TARGET, 20), LONG)
    assert len(send(lanes, 0.0)) == 6
    stream = to(FAST_TARGET, 3)
    lanes.admit(stream, LONG)

    launched = send(lanes, 0.1)

    # The tarpit holds 6, over its share of 4: the two free slots go to the stream.
    assert launched == stream[:2]
    assert lanes.saturated(0.1) == [destination_of(SLOW_TARGET)]


def test_destinations_of_tenants_weighted_3_and_1_hold_the_slots_3_to_1() -> None:
    weights = {"heavy": 3}
    lanes = Lanes(limit=8, min_lease=MIN_LEASE, weight_of=lambda t: weights.get(t, 1))
    heavy = [dataclasses.replace(d, tenant="heavy") for d in to(FAST_TARGET, 20)]
    light = [dataclasses.replace(d, tenant="light") for d in to(SLOW_TARGET, 20)]
    lanes.admit(heavy, LONG)
    lanes.admit(light, LONG)
    launched = send(lanes, 0.0)
    assert len(launched) == 8
    assert sum(d.tenant == "heavy" for d in launched) == 6

    # A slot each destination frees goes back to it while it is within its share.
    for done in (launched[0], next(d for d in launched if d.tenant == "light")):
        answered(lanes, [done], 0.01)
        (again,) = send(lanes, 0.01)
        assert again.tenant == done.tenant


def test_within_a_destination_a_tenants_backlog_never_stands_before_anothers_tick() -> None:
    lanes = Lanes(limit=2, min_lease=MIN_LEASE)
    burst = [dataclasses.replace(d, tenant="burst") for d in to(FAST_TARGET, 30)]
    lanes.admit(burst, LONG)
    running = send(lanes, 0.0)
    tick = [dataclasses.replace(d, tenant="stream") for d in to(FAST_TARGET, 1)]
    lanes.admit(tick, LONG)  # claimed after the whole burst, to the same destination

    # Turn by turn with the burst (weights 1 and 1): the tick has one of the next two slots,
    # not the 29th.
    answered(lanes, running, 0.01)
    sent = send(lanes, 0.01)
    assert tick[0] in sent
    answered(lanes, sent, 0.02)
    order = [*running, *[d for d in sent if d.tenant == "burst"], *launch_order(lanes, 0.02)]
    assert order == burst, "the burst goes on in its own order"


def test_first_attempts_of_any_destination_start_before_retries_of_another() -> None:
    lanes = Lanes(limit=2, min_lease=MIN_LEASE)
    retries = to(SLOW_TARGET, 2, first=False)
    firsts = to(FAST_TARGET, 2)
    lanes.admit(retries, LONG)
    lanes.admit(firsts, LONG)

    assert send(lanes, 0.0) == firsts


def test_a_destination_with_nothing_here_is_forgotten_but_its_answers_are_kept() -> None:
    lanes = Lanes(limit=8, min_lease=MIN_LEASE, spare_slots=2)
    first = to(FAST_TARGET, 1)
    lanes.admit(first, LONG)
    answered(lanes, send(lanes, 0.0), 0.01)
    assert lanes.saturated(0.01) == []

    lanes.admit(to(FAST_TARGET, 20), LONG)
    assert len(send(lanes, 0.02)) == 8, "known to answer: the whole window at once"


def test_a_wait_for_a_send_permit_is_not_charged_to_the_destination() -> None:
    lanes = Lanes(limit=8, min_lease=MIN_LEASE, spare_slots=2)
    lanes.admit(to(FAST_TARGET, 20), LONG)
    answered(lanes, send(lanes, 0.0), 0.01)
    # Launched, but waiting for a permit (or a start mark) on this replica for seconds.
    waiting = lanes.start(0.01).launch
    assert len(waiting) == 8

    assert lanes.saturated(5.0) == [], "this replica's own wait made its destination slow"
    lanes.sending(waiting[0], 5.0)
    assert lanes.saturated(5.5) == []
