"""What a recurring schedule does with ticks it could not fire on time, and the record of
every tick it does not fire.

When the cadence occurrence at `fire_at` is claimed at `now`, the ticks in (fire_at, now]
were missed (the service was down or behind). The schedule's `misfire_policy` decides:

- `fire_once` (default): the claimed occurrence fires as the one catch-up; the missed
  ticks collapse into it and are recorded as skipped (`misfire`).
- `skip`: a tick later than `misfire_grace_seconds` is dropped and recorded as skipped; a
  tick within the grace fires.
- `fire_all`: every missed tick fires, in order, each with its own occurrence id, up to
  `max_catchup` of them; the rest are recorded as skipped.

Every policy then realigns onto the first tick strictly after `now`. No tick is dropped
silently: a gap lists at most `max_catchup` skipped ticks one by one and then one entry
that carries the count of the rest. `max_occurrences` caps how many ticks ever fire;
when it is spent, or the trigger's `end_at` has passed, nothing follows and the schedule
completes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import islice
from typing import Literal

from app.domain import wallclock
from app.domain.trigger import CronTrigger, Trigger, count_ticks, next_fire_after, ticks_between

MisfirePolicy = Literal["fire_once", "skip", "fire_all"]
SkipReason = Literal["misfire", "paused", "dst_gap"]

DEFAULT_GRACE_SECONDS = 60.0
DEFAULT_MAX_CATCHUP = 100
# A summary entry counts the rest of a gap exactly up to this many ticks (an interval's
# count is arithmetic and always exact); counting a cron gap costs a walk over its ticks.
COUNT_CAP = 10_000


@dataclass(frozen=True, slots=True)
class Rules:
    """A schedule's misfire and bound settings, with how many ticks it has fired so far."""

    policy: MisfirePolicy = "fire_once"
    grace_seconds: float = DEFAULT_GRACE_SECONDS
    max_catchup: int = DEFAULT_MAX_CATCHUP
    max_occurrences: int | None = None
    fired: int = 0

    @property
    def budget(self) -> int | None:
        """Ticks it may still fire (None: unbounded)."""
        if self.max_occurrences is None:
            return None
        return max(self.max_occurrences - self.fired, 0)


@dataclass(frozen=True, slots=True)
class Skip:
    """A tick that did not fire; `count` > 1 when the entry stands for the rest of a gap."""

    fire_at: datetime
    reason: SkipReason
    count: int = 1


@dataclass(frozen=True, slots=True)
class Plan:
    """What one cadence claim does: fire the claimed tick or not, which missed ticks fire
    after it (in order), which are recorded as skipped, and the next tick (None: done)."""

    fire: bool
    catch_up: list[datetime] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    upcoming: datetime | None = None

    @property
    def fired(self) -> int:
        return int(self.fire) + len(self.catch_up)


def skipped_range(
    trigger: Trigger, after: datetime, until: datetime, reason: SkipReason, limit: int
) -> list[Skip]:
    """The ticks in (after, until] recorded as skipped for `reason`, plus DST gaps."""
    entries = _listed_range(trigger, after, until, reason, limit)
    return entries + dst_gap_skips(trigger, after, until)


def _listed_range(
    trigger: Trigger, after: datetime, until: datetime, reason: SkipReason, limit: int
) -> list[Skip]:
    entries = [Skip(t, reason) for t in islice(ticks_between(trigger, after, until), limit)]
    if len(entries) == limit:
        start = entries[-1].fire_at if entries else after
        rest = count_ticks(trigger, start, until, COUNT_CAP)
        if rest:
            first = next_fire_after(trigger, start)
            assert first is not None
            entries.append(Skip(first, reason, rest))
    return entries


def dst_gap_skips(trigger: Trigger, after: datetime, until: datetime) -> list[Skip]:
    """Wall times of a `dst_gap="skip"` cron that do not exist in (after, until]."""
    if not isinstance(trigger, CronTrigger) or trigger.dst_gap != "skip":
        return []
    if trigger.timezone == "UTC":
        return []
    return [
        Skip(instant, "dst_gap", count)
        for instant, count in wallclock.gaps(trigger.normalized, trigger.timezone, after, until)
        if _within(trigger, instant)
    ]


def _within(trigger: CronTrigger, instant: datetime) -> bool:
    if trigger.start_at is not None and instant < trigger.start_at:
        return False
    return trigger.end_at is None or instant <= trigger.end_at


def plan(trigger: Trigger, rules: Rules, fire_at: datetime, now: datetime) -> Plan:
    """The plan for the cadence occurrence at `fire_at`, claimed at `now`."""
    budget = rules.budget
    late_before = now - timedelta(seconds=rules.grace_seconds) if rules.policy == "skip" else None
    # The claimed occurrence exists because the budget allowed it when it was planned.
    fire = late_before is None or fire_at >= late_before
    skips = [] if fire else [Skip(fire_at, "misfire")]
    catch_up: list[datetime] = []
    following = next_fire_after(trigger, fire_at)
    if following is not None and following <= now:  # ticks were missed
        room = rules.max_catchup
        if budget is not None:
            room = max(min(room, budget - int(fire)), 0)
        start = fire_at
        if late_before is not None and following < late_before:
            # skip: the ticks past the grace are dropped; those within it fire
            start = max(fire_at, late_before - timedelta(microseconds=1))
            skips += _listed_range(trigger, fire_at, start, "misfire", rules.max_catchup)
        if rules.policy != "fire_once":
            catch_up = list(islice(ticks_between(trigger, start, now), room))
            start = catch_up[-1] if catch_up else start
        skips += _listed_range(trigger, start, now, "misfire", rules.max_catchup)
    fired = int(fire) + len(catch_up)
    upcoming = next_fire_after(trigger, max(fire_at, now))
    spent = budget is not None and budget <= fired
    if spent:
        upcoming = None
    skips += dst_gap_skips(trigger, fire_at, _gaps_until(trigger, upcoming, now, spent))
    return Plan(fire=fire, catch_up=catch_up, skips=skips, upcoming=upcoming)


def _gaps_until(
    trigger: Trigger, upcoming: datetime | None, now: datetime, spent: bool
) -> datetime:
    """Where this plan's DST gap record ends: at the next tick, whose own plan records
    what follows; when none follows because end_at has passed, at end_at, since no later
    plan will record a gap before it."""
    if upcoming is not None:
        return upcoming
    end_at = trigger.end_at if isinstance(trigger, CronTrigger) else None
    if spent or end_at is None:
        return now
    return max(now, end_at)
