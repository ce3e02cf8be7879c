"""What a list of schedules or of dead letters may be narrowed to: each field given must
match, and one left None matches everything. A list of schedules also says its order."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from app.domain.schedule import ScheduleStatus
from app.domain.tenants import DEFAULT_TENANT

# A schedule is failing while its latest occurrences are dead-lettered in a row
# (`consecutive_failures` > 0), or while a dead letter of it from this long ago or later is
# still waiting (neither replayed nor discarded): a schedule that failed once between
# deliveries shows until someone deals with the dead letter or a day has passed.
FAILING_WINDOW = timedelta(hours=24)


class ScheduleSort(StrEnum):
    """The orders a list of schedules comes in; each pages by its own cursor."""

    # Newest first (ids are UUIDv7: they sort by creation).
    CREATED = "created"
    # Earliest next fire instant first, then by id; those with nothing pending last.
    NEXT_FIRE_AT = "next_fire_at"
    # Most occurrences dead-lettered in a row first, then newest first.
    FAILURES = "failures"


@dataclass(frozen=True, slots=True)
class ScheduleFilter:
    # The tenant whose schedules are listed: a list never reaches beyond one.
    tenant: str = DEFAULT_TENANT
    status: ScheduleStatus | None = None
    event_type: str | None = None
    target_type: str | None = None
    name: str | None = None
    # Names that start with this text, taken literally (`%` and `_` are no wildcards).
    name_prefix: str | None = None
    labels: dict[str, str] = field(default_factory=dict)  # every one, key and value
    # True: only failing schedules (see FAILING_WINDOW); False or None: all.
    failing: bool = False
    # Only schedules with a pending occurrence due at or before this instant.
    due_before: datetime | None = None
    # Only schedules of this flow key (its name, within `tenant`).
    flow_key: str | None = None
    sort: ScheduleSort = ScheduleSort.CREATED


@dataclass(frozen=True, slots=True)
class ScheduleAfter:
    """Where a page of schedules ends, in the terms of its sort: the last schedule's id, and
    its next fire instant (sort `next_fire_at`) or its failures in a row (`failures`)."""

    sort: ScheduleSort
    id: uuid.UUID
    next_fire_at: datetime | None = None
    failures: int = 0


@dataclass(frozen=True, slots=True)
class DeadLetterFilter:
    # The tenant whose dead letters are listed or replayed: never beyond one.
    tenant: str = DEFAULT_TENANT
    schedule_id: uuid.UUID | None = None
    event_type: str | None = None
    # A fan-out's deliveries: to this subscription, or this endpoint (DESIGN section 15).
    subscription_id: uuid.UUID | None = None
    endpoint_id: uuid.UUID | None = None
    # Dead-lettered after this instant ("what failed since 09:00").
    dead_lettered_after: datetime | None = None

    @property
    def narrows(self) -> bool:
        """Whether it names anything but the tenant (a replay by filter needs one)."""
        return any(
            value is not None
            for value in (
                self.schedule_id,
                self.event_type,
                self.subscription_id,
                self.endpoint_id,
                self.dead_lettered_after,
            )
        )
