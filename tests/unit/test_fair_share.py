"""Fair shares between tenants (app.domain.fair_share): by weight, never more than asked,
work-conserving, and the lanes' order at each tenant's pace."""

from __future__ import annotations

import pytest

from app.domain.fair_share import interleave, shares, take_shares


@pytest.mark.parametrize(
    ("demand", "weights", "room", "expected"),
    [
        ({"a": 100, "b": 100}, {"a": 3}, 20, {"a": 15, "b": 5}),
        ({"a": 100, "b": 100}, {}, 7, {"a": 4, "b": 3}),
        ({"a": 2, "b": 100}, {"a": 3}, 20, {"a": 2, "b": 18}),  # a leaves what it cannot use
        ({"a": 100}, {"a": 1}, 20, {"a": 20}),  # alone: everything
        ({"a": 0, "b": 5}, {}, 20, {"a": 0, "b": 5}),
        ({"a": 5, "b": 5}, {}, 0, {"a": 0, "b": 0}),
        ({"a": 100, "b": 100, "c": 100}, {"a": 100}, 10, {"a": 10, "b": 0, "c": 0}),
        ({"a": 1, "b": 1, "c": 100}, {}, 10, {"a": 1, "b": 1, "c": 8}),
    ],
)
def test_shares_follow_weights_and_give_away_what_is_not_wanted(
    demand: dict[str, int], weights: dict[str, int], room: int, expected: dict[str, int]
) -> None:
    assert shares(demand, weights, room) == expected


def test_shares_never_exceed_the_room_or_what_was_asked() -> None:
    for room in range(0, 50):
        for a in range(0, 12):
            given = shares({"a": a, "b": 7, "c": 30}, {"b": 2, "c": 5}, room)
            assert sum(given.values()) == min(room, a + 7 + 30)
            assert given["a"] <= a
            assert given["b"] <= 7
            assert given["c"] <= 30


def test_take_shares_takes_each_tenants_first_rows_within_its_cap() -> None:
    rows = [("a", n) for n in range(10)] + [("b", n) for n in range(10)]
    taken = take_shares(rows, lambda r: r[0], {}, 8, caps={"a": 2})
    assert taken == [("a", 0), ("a", 1), *[("b", n) for n in range(6)]]


def test_interleave_paces_each_tenant_by_its_weight_in_its_own_order() -> None:
    rows = [("a", n) for n in range(6)] + [("b", n) for n in range(2)]
    ordered = interleave(rows, lambda r: r[0], {"a": 3})
    assert ordered == [
        ("a", 0), ("a", 1), ("a", 2), ("b", 0), ("a", 3), ("a", 4), ("a", 5), ("b", 1),
    ]  # fmt: skip
    alone = [("a", 2), ("a", 1)]
    assert interleave(alone, lambda r: r[0], {}) == alone


@pytest.mark.parametrize("room", [1, 2, 3, 5])
def test_claims_of_a_start_or_two_follow_the_weights_over_a_few_claims(room: int) -> None:
    credit: dict[str, float] = {}
    total = {"heavy": 0, "light": 0}
    for _ in range(40):
        # Light named first: without the credit it would win every tie.
        given = shares({"light": 100, "heavy": 100}, {"heavy": 3}, room, credit)
        for tenant, count in given.items():
            total[tenant] += count
        assert all(abs(c) <= 1.0 for c in credit.values())
    assert total["heavy"] + total["light"] == 40 * room
    assert 2.7 <= total["heavy"] / total["light"] <= 3.3, total


def test_a_tenant_that_got_what_it_asked_for_carries_no_credit() -> None:
    credit = {"gone": 0.8}
    shares({"a": 1, "b": 100}, {}, 10, credit)
    assert set(credit) <= {"b"}, "a got its one; gone asked for nothing"
