"""Keys asleep: a flow key with nothing due for a while costs the keyed claim's walks nothing.

When the due rows fill the claim's window, the claim walks every key with awake pending rows
(named SQL `flow_due`), one index probe each. A key whose earliest row is more than
SLEEP_AFTER off is put to sleep: by the claim that walked it, or by the look that read it in
its page of keys (each look reads the next PAGE_KEYS keys, so that keys fall asleep before
any walk comes). Its rows leave the walk's index (`occurrences.shelved`, as a paused key's
do), and the key is written to `flow_key_sleeps` with the earliest instant it shelved. The
claim's regular look (with the unshelving of keys whose back-off ended) wakes what is due
within WAKE_BEFORE, so that each row is in view again well before its instant. 10^5 tenants
or keys with work only later are then out of every walk, and cost it nothing.

Invariants:
- a row asleep has a sleep row of its key whose `next_at` is at or before its instant (or
  no instant: a row its schedule's pause holds wakes at the resume, `unhold`); the claim
  shelves a key's rows only while it holds that row locked, and only the rows at or after
  its instant and more than SLEEP_AFTER off (a row that arrived sooner stays awake);
- a key that is itself shelving (paused or backing off) has no need of a sleep row: its
  resume, its removal or the end of its back-off unshelves all its rows, asleep or not;
- every change of where or when a row fires that may meet a row asleep wakes it (a move
  to another key, a resume of its schedule, a replay, a backfill): nothing waits on a sleep
  row that does not cover it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.dialects import dialect_of
from app.store.schema.tables import flow_key_sleeps, flow_keys, occurrences
from app.store.schema.types import UTCDateTime

# A key whose earliest row is further off than this is put to sleep by the claim that walks it.
SLEEP_AFTER = timedelta(seconds=60)
# A sleeping key's rows wake this long before their instant (a look runs every second).
WAKE_BEFORE = timedelta(seconds=15)
# At most this many keys are put to sleep, or woken, by one claim (the rest by the next).
MAX_SLEEPS = 5000
MAX_WAKES = 1000
# How many keys each look reads, in key order, to put to sleep those with nothing due for
# a while: a claim that never walks the keys finds them so (a replica pages through 10^5
# keys awake in 50 looks; once they sleep, a page holds only keys with work due soon).
PAGE_KEYS = 2000
# A look reads up to this many pages while each is mostly keys to put to sleep.
PAGES_PER_LOOK = 5

_s = flow_key_sleeps.c
_o = occurrences.c
_PENDING = "pending"

# A sleep row's earlier instant, for a key whose row the caller holds locked.
_EARLIER = (
    flow_key_sleeps.update()
    .where(_s.key == sa.bindparam("s_key"), _s.next_at > sa.bindparam("s_at", type_=UTCDateTime()))
    .values(next_at=sa.bindparam("s_at", type_=UTCDateTime()))
)
# The rows of the keys (:keys) whose sleep rows the caller holds locked that are further off
# than :far_at and at or after their key's `next_at`: they leave the walk's index.
_SHELVE = (
    occurrences.update()
    .where(
        _o.flow_key.in_(sa.bindparam("keys", expanding=True)),
        _o.status == _PENDING,
        _o.shelved.is_(False),
        _o.lease_token.is_(None),
        _o.available_at > sa.bindparam("far_at", type_=UTCDateTime()),
        _o.available_at >= sa.select(_s.next_at).where(_s.key == _o.flow_key).scalar_subquery(),
    )
    .values(shelved=True)
)


async def sleep_keys(
    conn: AsyncConnection, heads: Sequence[tuple[str, datetime]], far_at: datetime
) -> int:
    """Put to sleep the keys of `heads`, each with the earliest instant a read of the keys
    found of its awake rows, every one after `far_at` (up to MAX_SLEEPS of them, in key
    order): each key's sleep row is made, or locked and brought as early as that instant;
    then the key's rows after `far_at` and at or after its sleep row's instant are shelved,
    in one statement. A key whose sleep row a waking look removed meanwhile, or another
    claim holds, is left awake (for a later look). Returns how many rows went to sleep."""
    heads = sorted(heads)[:MAX_SLEEPS]
    if not heads:
        return 0
    first = dict(heads)
    await dialect_of(conn).insert_ignoring(
        conn, flow_key_sleeps, [{"key": key, "next_at": at} for key, at in heads], "key"
    )
    locked = {
        row.key: row.next_at
        for row in await conn.execute(
            sa.select(_s.key, _s.next_at)
            .where(_s.key.in_(list(first)))
            .order_by(_s.key)
            .with_for_update(skip_locked=True)
        )
    }
    if not locked:
        return 0
    earlier = [{"s_key": key, "s_at": first[key]} for key, at in locked.items() if at > first[key]]
    if earlier:
        await conn.execute(_EARLIER, earlier)
    result = await conn.execute(_SHELVE, {"keys": sorted(locked), "far_at": far_at})
    return max(int(result.rowcount), 0)


async def sleep_pages(conn: AsyncConnection, after: str) -> str:
    """Read the page of keys after `after` (named SQL `key_heads`) and put to sleep those
    whose earliest row is more than SLEEP_AFTER off; while a full page was mostly such keys
    (many keys made at once with work only later), the next page too, up to PAGES_PER_LOOK.
    Returns where the next look's page starts ('': from the first key again)."""
    dialect = dialect_of(conn)
    for _ in range(PAGES_PER_LOOK):
        heads = await dialect.key_heads(conn, after, PAGE_KEYS)
        if not heads:
            return ""
        far_at = heads[0].now + SLEEP_AFTER
        far = [
            (h.flow_key, h.first_at)
            for h in heads
            if h.first_at is not None and h.first_at > far_at
        ]
        await sleep_keys(conn, far, far_at)
        if len(heads) < PAGE_KEYS:
            return ""
        after = str(heads[-1].flow_key)
        if len(far) < PAGE_KEYS // 2:
            break
    return after


async def wake_keys(conn: AsyncConnection, now: datetime) -> int:
    """Wake the rows due by `now` + WAKE_BEFORE of up to MAX_WAKES sleeping keys (a key
    another claim holds is left to it), and move each key's sleep row on to its earliest row
    still asleep, or remove it when none is. A key that is shelving (paused or backing off)
    loses its sleep row only: what unshelves it wakes all its rows. Returns how many keys it
    looked at."""
    until = now + WAKE_BEFORE
    keys = list(
        (
            await conn.execute(
                sa.select(_s.key)
                .where(_s.next_at <= until)
                .order_by(_s.next_at)
                .limit(MAX_WAKES)
                .with_for_update(skip_locked=True)
            )
        ).scalars()
    )
    if not keys:
        return 0
    shelving = set(
        (
            await conn.execute(
                sa.select(flow_keys.c.key).where(
                    flow_keys.c.key.in_(keys), flow_keys.c.shelving.is_(True)
                )
            )
        ).scalars()
    )
    waking = [key for key in keys if key not in shelving]
    later: dict[str, datetime] = {}
    if waking:
        asleep = (_o.flow_key.in_(waking), _o.status == _PENDING, _o.shelved.is_(True))
        await conn.execute(
            occurrences.update().where(*asleep, _o.available_at <= until).values(shelved=False)
        )
        later = {
            row.flow_key: row.next_at
            for row in await conn.execute(
                sa.select(_o.flow_key, sa.func.min(_o.available_at).label("next_at"))
                .where(*asleep, _o.available_at.is_not(None))
                .group_by(_o.flow_key)
            )
        }
    if later:
        await conn.execute(
            flow_key_sleeps.update()
            .where(_s.key == sa.bindparam("s_key"))
            .values(next_at=sa.bindparam("s_at", type_=UTCDateTime())),
            [{"s_key": key, "s_at": at} for key, at in later.items()],
        )
    gone = [key for key in keys if key not in later]
    if gone:
        await conn.execute(flow_key_sleeps.delete().where(_s.key.in_(gone)))
    return len(keys)


async def next_wake_in(conn: AsyncConnection, now: datetime) -> float | None:
    """Seconds until the soonest sleeping key has rows to wake (None: none sleeps)."""
    soonest: datetime | None = await conn.scalar(sa.select(sa.func.min(_s.next_at)))
    if soonest is None:
        return None
    return max(0.0, (soonest - WAKE_BEFORE - now).total_seconds())
