"""Activity by the minute (`app.domain.activity`): rolled up from the attempt log into
`activity_minutes`, read back for the charts, and a schedule's read from its log at once.

An attempt counts in the minute it started. A roll-up recomputes whole minutes: it deletes
their rows and writes them again from the log in one transaction, so running it twice, or
on two replicas one after the other, gives the same rows. The fleet has a row for every
minute rolled up (the latest says how current the figures are); a tenant, endpoint or
flow key only for the minutes it had attempts in.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.activity import BUCKETS, LATENESS_BOUNDS, MINUTE, Minute, Scope
from app.domain.ids import uuid7
from app.store.dialects import dialect_of
from app.store.schema.tables import activity_minutes, attempts, occurrences, schedules
from app.store.schema.types import UTCDateTime

FLEET = ""
_NOT_DELIVERED = -1


def _lowest_id(instant: datetime) -> uuid.UUID:
    """The smallest attempt id of an attempt started at `instant` or later (ids are UUIDv7
    of the start): the log's primary key bounds a range of starts."""
    return uuid7(instant, 0)


def _grouped(
    conn: AsyncConnection,
    source: sa.FromClause,
    fire_at: sa.ColumnElement[datetime],
    *extra: sa.ColumnElement[Any],
) -> sa.Select[Any]:
    """Attempts of `source` (the log, or the log joined to what it belongs to) grouped by
    the minute they started, their outcome and their delivery's lateness bucket (-1 when
    it did not deliver; late by their start past `fire_at`, plus their duration), and
    `extra` columns, with counts; of the attempts started in [:since, :until). The columns
    are grouped by position: each dialect's minute and bucket are expressions with
    parameters in them."""
    dialect = dialect_of(conn)
    late = dialect.seconds_between(attempts.c.started_at, fire_at) + attempts.c.duration_ms / 1000.0
    bucket = sa.case(
        (attempts.c.outcome != "delivered", _NOT_DELIVERED),
        *((late <= bound, index) for index, bound in enumerate(LATENESS_BOUNDS)),
        else_=len(LATENESS_BOUNDS),
    )
    columns = [
        dialect.minute_of(attempts.c.started_at).label("minute"),
        attempts.c.outcome,
        bucket.label("bucket"),
        *extra,
    ]
    since = sa.bindparam("since", type_=UTCDateTime())
    until = sa.bindparam("until", type_=UTCDateTime())
    return (
        sa.select(*columns, sa.func.count().label("n"))
        .select_from(source)
        .where(
            attempts.c.id >= sa.bindparam("lowest"),
            attempts.c.id < sa.bindparam("beyond"),
            attempts.c.started_at >= since,
            attempts.c.started_at < until,
        )
        .group_by(*(sa.literal_column(str(place)) for place in range(1, len(columns) + 1)))
    )


# Each logged attempt and its occurrence.
_WITH_OCCURRENCE = attempts.join(
    occurrences, occurrences.c.occurrence_id == attempts.c.occurrence_id
)


def _by_subject(conn: AsyncConnection) -> sa.CompoundSelect[Any]:
    """The roll-up's groups, with each attempt's tenant, endpoint and flow key. A settle's
    attempt carries its occurrence's instant, tenant and flow key (`tenant` not NULL) and
    is read alone; any other (logged before it carried them, or by a claim or a stop) is
    read with its occurrence and schedule. The two kinds may share a group: the caller
    adds them up."""
    carried = _grouped(
        conn,
        attempts,
        attempts.c.fire_at,
        attempts.c.tenant,
        attempts.c.endpoint_id,
        attempts.c.flow_key,
    ).where(attempts.c.tenant.is_not(None))
    joined = _grouped(
        conn,
        _WITH_OCCURRENCE.join(schedules, schedules.c.id == occurrences.c.schedule_id),
        occurrences.c.fire_at,
        schedules.c.tenant,
        attempts.c.endpoint_id,
        occurrences.c.flow_key,
    ).where(attempts.c.tenant.is_(None))
    return sa.union_all(carried, joined)


class _Tally:
    """Minutes being added up, per (scope, subject)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, datetime], list[int]] = defaultdict(
            lambda: [0, 0, 0] + [0] * BUCKETS
        )

    def add(self, key: tuple[str, str, datetime], outcome: str, bucket: int, n: int) -> None:
        counts = self.counts[key]
        if outcome == "delivered":
            counts[0] += n
            counts[3 + max(0, min(bucket, BUCKETS - 1))] += n
            return
        counts[1] += n
        if outcome == "dead_lettered":
            counts[2] += n

    def minutes(self) -> Iterable[tuple[str, str, Minute]]:
        for (scope, subject, at), counts in self.counts.items():
            yield (
                scope,
                subject,
                Minute(
                    at=at,
                    delivered=counts[0],
                    failed=counts[1],
                    dead_lettered=counts[2],
                    lateness=tuple(counts[3:]),
                ),
            )


def _params(since: datetime, until: datetime) -> dict[str, Any]:
    return {
        "since": since,
        "until": until,
        "lowest": _lowest_id(since),
        "beyond": _lowest_id(until),
    }


async def roll_up(conn: AsyncConnection, since: datetime, until: datetime, now: datetime) -> int:
    """Recompute the minutes from `since` to `until` (each a minute's start) from the
    attempt log; returns how many rows it wrote."""
    tally = _Tally()
    result = await conn.execute(_by_subject(conn), _params(since, until))
    for row in result:
        at = row.minute
        for key in (
            (Scope.FLEET.value, FLEET, at),
            (Scope.TENANT.value, row.tenant, at),
            *(
                ((Scope.ENDPOINT.value, str(row.endpoint_id), at),)
                if row.endpoint_id is not None
                else ()
            ),
            *(((Scope.FLOW_KEY.value, row.flow_key, at),) if row.flow_key is not None else ()),
        ):
            tally.add(key, row.outcome, row.bucket, row.n)
    at = since
    while at < until:  # the fleet's every minute, something happening or not
        tally.counts[(Scope.FLEET.value, FLEET, at)]
        at += MINUTE
    rows = [
        {
            "scope": scope,
            "subject": subject,
            "minute": minute.at,
            "delivered": minute.delivered,
            "failed": minute.failed,
            "dead_lettered": minute.dead_lettered,
            "lateness": list(minute.lateness),
            "rolled_at": now,
        }
        for scope, subject, minute in tally.minutes()
    ]
    await conn.execute(
        activity_minutes.delete().where(
            activity_minutes.c.minute >= since, activity_minutes.c.minute < until
        )
    )
    if rows:
        await conn.execute(activity_minutes.insert(), rows)
    return len(rows)


async def rolled_to(conn: AsyncConnection) -> datetime | None:
    """The latest minute the fleet's figures were rolled up for (None: none yet)."""
    fleet = activity_minutes.c.scope == Scope.FLEET.value
    latest: datetime | None = await conn.scalar(
        sa.select(sa.func.max(activity_minutes.c.minute)).where(fleet)
    )
    return latest


async def earliest_attempt(conn: AsyncConnection, since: datetime) -> datetime | None:
    """When the first attempt at or after `since` started (None: none has)."""
    found: datetime | None = await conn.scalar(
        sa.select(attempts.c.started_at)
        .where(attempts.c.id >= _lowest_id(since))
        .order_by(attempts.c.id)
        .limit(1)
    )
    return found


def _minute(row: Any) -> Minute:
    counts = tuple(int(n) for n in row.lateness)
    return Minute(
        at=row.minute,
        delivered=row.delivered,
        failed=row.failed,
        dead_lettered=row.dead_lettered,
        lateness=counts if len(counts) == BUCKETS else (0,) * BUCKETS,
    )


async def rolled_minutes(
    conn: AsyncConnection,
    scope: Scope,
    subject: str,
    since: datetime,
    until: datetime,
) -> tuple[list[Minute], datetime | None]:
    """The rolled-up minutes of one `subject` of `scope` from `since` to `until`, and when
    the fleet's latest of them was rolled up (None: none was)."""
    in_window = (activity_minutes.c.minute >= since, activity_minutes.c.minute < until)
    found = await conn.execute(
        sa.select(activity_minutes).where(
            activity_minutes.c.scope == scope.value,
            activity_minutes.c.subject == subject,
            *in_window,
        )
    )
    minutes = [_minute(row) for row in found]
    current: datetime | None = await conn.scalar(
        sa.select(sa.func.max(activity_minutes.c.rolled_at)).where(
            activity_minutes.c.scope == Scope.FLEET.value, *in_window
        )
    )
    return minutes, current


async def schedule_minutes(
    conn: AsyncConnection, schedule_id: uuid.UUID, since: datetime, until: datetime, fired: datetime
) -> list[Minute]:
    """A schedule's minutes from `since` to `until`, read from its attempt log at once: the
    attempts of its occurrences due from `fired` on (its schedule and instant index, then
    each occurrence's attempts)."""
    statement = _grouped(conn, _WITH_OCCURRENCE, occurrences.c.fire_at).where(
        occurrences.c.schedule_id == schedule_id, occurrences.c.fire_at >= fired
    )
    tally = _Tally()
    for row in await conn.execute(statement, _params(since, until)):
        tally.add((Scope.SCHEDULE.value, "", row.minute), row.outcome, row.bucket, row.n)
    return [minute for _, _, minute in tally.minutes()]


async def prune_activity(conn: AsyncConnection, before: datetime) -> int:
    """Delete the minutes before `before`; returns how many rows went."""
    result = await conn.execute(activity_minutes.delete().where(activity_minutes.c.minute < before))
    return int(result.rowcount or 0)
