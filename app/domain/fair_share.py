"""Fair dispatch between tenants (DESIGN section 14): when more is due than a claim may
start, the tenants with due work share its room in proportion to their weights, and what one
of them cannot use goes to the others (work-conserving: a tenant alone gets it all).

Invariants:
- `shares` never gives a tenant more than it asked for, nor more in all than the room, and
  gives the whole room whenever the tenants asked for that much;
- between tenants that all want more than their share, the shares follow the weights to
  within one start each (largest remainders), whatever the room;
- `interleave` orders a claim's rows so that each tenant's come at its weight's pace, and in
  their own order within the tenant: a replica's queue of claimed work never holds one
  tenant's backlog ahead of another's due work.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from app.domain.tenants import DEFAULT_WEIGHT

_T = TypeVar("_T")


# The most a tenant's carried credit may reach either way (`shares`): a start or so.
MAX_CREDIT = 1.0


def shares(
    demand: Mapping[str, int],
    weights: Mapping[str, int],
    room: int,
    credit: dict[str, float] | None = None,
) -> dict[str, int]:
    """How many of `room` starts each tenant of `demand` (what it could start) gets: its
    weight's share (`weights`, DEFAULT_WEIGHT for one not named), never more than its
    demand, what it leaves going to the rest by their weights.

    `credit` (kept by the caller from one claim to the next, and updated here) is what each
    tenant was owed (positive) or given beyond its share (negative) by the rounding of the
    claims before: the starts the floors leave go to the largest remainder plus credit, so
    that claims of a start or two still follow the weights over a few claims (deficit round
    robin). A tenant that got all it asked for, or asked for nothing, owes and is owed
    nothing."""
    given = dict.fromkeys(demand, 0)
    owed = credit if credit is not None else {}
    # In the order `demand` names them, which breaks ties between equal remainders.
    wanting = [tenant for tenant, want in demand.items() if want > 0]
    left = max(0, room)
    entitled: dict[str, float] = {}
    while left > 0 and wanting:
        total = sum(weights.get(tenant, DEFAULT_WEIGHT) for tenant in wanting)
        exact = {tenant: left * weights.get(tenant, DEFAULT_WEIGHT) / total for tenant in wanting}
        if not entitled:
            entitled = dict(exact)
        round_ = {
            tenant: min(math.floor(exact[tenant]), demand[tenant] - given[tenant])
            for tenant in wanting
        }
        # The starts the floors leave go by largest remainder.
        spare = left - sum(round_.values())
        by_remainder = sorted(
            wanting,
            key=lambda tenant: exact[tenant] - math.floor(exact[tenant]) + owed.get(tenant, 0.0),
            reverse=True,
        )
        for tenant in by_remainder:
            if spare <= 0:
                break
            if round_[tenant] < demand[tenant] - given[tenant]:
                round_[tenant] += 1
                spare -= 1
        handed = sum(round_.values())
        for tenant, count in round_.items():
            given[tenant] += count
        left -= handed
        wanting = [tenant for tenant in wanting if given[tenant] < demand[tenant]]
        if handed == 0:
            break
    if credit is not None:
        for tenant in list(credit):
            if tenant not in demand:
                del credit[tenant]
        for tenant, want in demand.items():
            if want <= given[tenant] or tenant not in entitled:
                credit.pop(tenant, None)
            else:
                carried = credit.get(tenant, 0.0) + entitled[tenant] - given[tenant]
                credit[tenant] = max(-MAX_CREDIT, min(MAX_CREDIT, carried))
    return given


def take_shares(
    rows: Iterable[_T],
    tenant_of: Callable[[_T], str],
    weights: Mapping[str, int],
    room: int,
    caps: Mapping[str, int] | None = None,
    credit: dict[str, float] | None = None,
) -> list[_T]:
    """Of `rows` (each tenant's in the order to take them), the first of each tenant up
    to its share of `room` (`shares`, with `credit`); a tenant's `caps` bound what it may
    take at all."""
    grouped: dict[str, list[_T]] = {}
    for row in rows:
        grouped.setdefault(tenant_of(row), []).append(row)
    bounded = caps or {}
    demand = {
        tenant: min(len(found), bounded.get(tenant, len(found)))
        for tenant, found in grouped.items()
    }
    given = shares(demand, weights, room, credit)
    return [row for tenant, found in grouped.items() for row in found[: given[tenant]]]


def interleave(
    rows: Sequence[_T], tenant_of: Callable[[_T], str], weights: Mapping[str, int]
) -> list[_T]:
    """`rows` in turns by tenant, each tenant's in the order given: the n-th row of a tenant
    of weight w comes at virtual time n / w (weighted fair queuing, ties in the order the
    tenants first appear); rows of one tenant only come back as they are."""
    if not rows:
        return []
    first = tenant_of(rows[0])
    if all(tenant_of(row) == first for row in rows):
        return list(rows)
    seen: dict[str, int] = {}
    keyed = []
    for index, row in enumerate(rows):
        tenant = tenant_of(row)
        nth = seen.get(tenant, 0) + 1
        seen[tenant] = nth
        keyed.append((nth / weights.get(tenant, DEFAULT_WEIGHT), index, row))
    keyed.sort(key=lambda entry: (entry[0], entry[1]))
    return [row for _, _, row in keyed]
