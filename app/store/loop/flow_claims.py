"""The keyed claim: lease due occurrences of flow keys, as far as each key's limits allow,
fleet-wide (DESIGN section 11; the design is docs/flow-control.md).

Invariants:
- a key with limits starts nothing unless this claim holds its row's lock (FOR UPDATE SKIP
  LOCKED; SQLite's single writer): claims of one key never interleave, and a claim passes
  over a key another claim holds rather than wait for it;
- under that lock the key's attempts in flight are counted from the live leases (never a
  stored counter; `flow_key_holds.in_flight`: a paused or cancelled attempt still runs, and
  counts until it is settled, released or its lease runs out), and no more start than
  `allowance()` gives; the tokens spent are written
  in the same transaction as the leases;
- a fifo key starts only its head (its earliest pending occurrence by fire instant, then
  id), and only when nothing of the key is in flight: a retrying head holds the key;
- a key that is paused or backing off costs a claim nothing once one claim has found it so:
  that claim shelves its waiting rows (`shelve_keys`, under the key's lock, so that a resume
  committed meanwhile is never undone), which leaves them out of the index the claim walks
  until the key may start again; a resume, a removal or the back-off's end unshelves them
  (`unshelve_keys`; the claim does it for a back-off that ran out);
- a key out of tokens or at its parallelism costs the claim one index probe, never a read
  of the rows waiting on it;
- rows of a key with limits are leased only when due, never ahead: a lease waiting for its
  instant would hold a slot and a token before its time (a key without limits is claimed
  ahead as unkeyed rows are).
"""

from __future__ import annotations

import functools
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.fair_share import interleave, take_shares
from app.domain.flow import Bucket, FlowLimits, Ordering, allowance, full_bucket
from app.domain.tenants import (
    DEFAULT_WEIGHT,
    is_own_key,
    own_key,
    tenant_of_key,
)
from app.store.dialects import dialect_of
from app.store.dialects.claim_rows import DUE_WINDOW, NEVER_FAR
from app.store.loop.sleeps import (
    SLEEP_AFTER,
    next_wake_in,
    sleep_keys,
    sleep_pages,
    wake_keys,
)
from app.store.loop.sql import ClaimRows, typed, union_all
from app.store.loop.tenant_gates import (
    Gate,
    read_gates,
    shelve_for_paused_tenants,
    tenants_in_flight,
)
from app.store.records.flow_key_holds import (
    in_flight,
    lock_keys,
    named,
    next_unshelve_in,
    row_limits,
    shelve_keys,
    unshelve_keys,
    unshelving_keys,
)
from app.store.schema.tables import tenants
from app.store.schema.types import UUID, UTCDateTime

# How often (seconds) a replica's claims look for keys whose back-off ended with rows
# shelved (and when the next one ends): a look is two statements, which every claim made
# alone would add to each keyed claim. A resume or a cleared back-off unshelves at once;
# the end of a back-off is noticed within this, or at the instant this replica knows of.
UNSHELVE_EVERY = timedelta(seconds=1)

# At most this many keys have their rows shelved by one claim: the rest are shelved by the
# claims after it, so that a claim that finds 10^4 keys paused at once costs a few statements of a
# bounded size (a list parameter of each key), not one statement of them all.
MAX_SHELVES = 500

# The candidates of each key: a fifo key's head, or the due rows of any other key.
_HEAD, _DUE_ROWS = "flow_head", "flow_due_rows"
_CANDIDATE_COLUMNS: dict[str, Any] = {
    "occurrence_id": UUID,
    "flow_key": sa.String(),
    "available_at": UTCDateTime(),
    "first_attempt_at": UTCDateTime(),
}


@dataclass(frozen=True, slots=True)
class KeyedClaim:
    """What a keyed claim leased (rows as `Dialect.claim` returns them); `demand`: how many
    it would have started with room enough; `held_back_in`: seconds until a key it held back
    for its rate or a back-off may start again (None: none did)."""

    rows: list[Any]
    demand: int = 0
    held_back_in: float | None = None
    # Due keys it held back, by why (paused, backoff, rate, parallelism, order: a fifo head
    # retrying or in flight) and tenant.
    held_back: Counter[tuple[str, str]] = field(default_factory=Counter)
    # The tenants with keyed work it could start, each with its weight (fair dispatch).
    tenants: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Pick:
    key: str
    most: int
    fifo: bool
    tenant: str
    # Its rows may be leased ahead of their instant, as unkeyed rows are (no limits hold
    # the key or its tenant back).
    ahead: bool = False


# How long a replica's keyed claims walk the keys at once after a due window came back full
# (then they read the window again: the backlog may have drained below it).
WALK_FOR = timedelta(seconds=1)

# How often a replica reads the tenants' weights again: a weight put counts within this.
WEIGHTS_EVERY = timedelta(seconds=2)


def _tenant_of_row(row: Any) -> str:
    return tenant_of_key(row.flow_key)


def _least(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def _bucket(row: Any, limits: FlowLimits, now: datetime) -> Bucket:
    if row.tokens is None or row.refilled_at is None:
        return full_bucket(limits, now)
    return Bucket(row.tokens, row.refilled_at)


def _sooner(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


class DueKeys(NamedTuple):
    """What `keys_with_work_due` found: the keys with work due (`DUE_KEY_COLUMNS`), whether
    the due window was full, and the keys a walk found with nothing due for a while (to put
    to sleep, `app.store.loop.sleeps`)."""

    rows: Sequence[Any]
    full: bool
    far: Sequence[Any] = ()


async def keys_with_work_due(
    conn: AsyncConnection, ahead: float, *, window: bool = True, far: float = NEVER_FAR
) -> DueKeys:
    """The keys with work due, from the due rows when fewer than DUE_WINDOW are due (so that
    keys with only future rows cost nothing), else from a walk of every key awake (named SQL
    `flow_due_window`, `flow_due`); with `window` False, from the walk at once. Also whether
    the window was full (more than it holds is due), and of a walk, the keys whose earliest
    row is more than `far` seconds off."""
    dialect = dialect_of(conn)
    if window:
        rows = await dialect.due_window(conn, ahead, DUE_WINDOW)
        if rows is not None and (not rows or rows[0].scanned < DUE_WINDOW):
            return DueKeys(rows, False)
        full = rows is not None
    else:
        full = True
    walked = await dialect.due_keys(conn, ahead, far)
    if not walked:
        return DueKeys(walked, full)
    # Each row carries the walk's instant: a key's earliest beyond `ahead` is one of the far.
    until = walked[0].now + timedelta(seconds=ahead)
    return DueKeys(
        [row for row in walked if row.first_at <= until],
        full,
        [row for row in walked if row.first_at > until],
    )


def _backing_off(row: Any, now: datetime) -> float | None:
    until = row.backoff_until
    return (until - now).total_seconds() if until is not None and until > now else None


@functools.lru_cache(maxsize=256)
def _candidates(parts: tuple[str, ...], dialect: str) -> sa.TextualSelect:
    """Per key, the rows it may start, in one statement: the named SQL of each of `parts`
    (`flow_head` or `flow_due_rows`) joined UNION ALL, the i-th taking its key, room and
    instant as `key_<i>`, `most_<i>` and `now_<i>`. Each is a probe of one key's index
    range, however many of the key's rows wait."""
    statement = union_all(parts, dialect, numbered=("key", "most", "now"))
    numbered = [
        sa.bindparam(f"{name}_{n}", type_=type_)
        for n, part in enumerate(parts)
        for name, type_ in (("key", sa.String()), ("most", sa.Integer()), ("now", UTCDateTime()))
        if part == _DUE_ROWS or name == "key"
    ]
    return typed(statement, *numbered).columns(**_CANDIDATE_COLUMNS)


def _started(rows: Sequence[Any], buckets: dict[str, Any]) -> Counter[str]:
    """What the leased `rows` spend from each bucket: a key's, its rows; a tenant's (under
    its own key), every row of the tenant."""
    by_key = Counter(row.flow_key for row in rows)
    by_tenant = Counter(tenant_of_key(row.flow_key) for row in rows)
    return Counter(
        {key: by_tenant[tenant_of_key(key)] if is_own_key(key) else by_key[key] for key in buckets}
    )


class FlowClaims:
    """The keyed part of a claim; runs inside the claim's transaction. One per replica: it
    keeps when its claims next look for shelved keys that may start again, and the tenants'
    weights as last read."""

    def __init__(self) -> None:
        self._look_at: datetime | None = None  # None: at the next claim
        self._unshelve_at: datetime | None = None  # the soonest known back-off end or wake
        self._walk_until: datetime | None = None  # no due window before (None: none)
        self._page_after = ""  # the key after which its looks read the next page
        self._weights: dict[str, int] = {}  # of the tenants whose weight is not the default
        # What each tenant was owed or given beyond its share by the rounding of the claims
        # before (`app.domain.fair_share.shares`).
        self._credit: dict[str, float] = {}
        self._weights_at: datetime | None = None  # when they are read again (None: now)

    async def claim(
        self,
        conn: AsyncConnection,
        *,
        room: int,
        lease: float,
        token: uuid.UUID,
        owner: str,
        ahead: float = 0.0,
        start: int | None = None,
        skip: Sequence[str] = (),
    ) -> KeyedClaim:
        """Lease up to `room` due keyed occurrences, oldest due first, as their keys and
        their tenants allow. The rows of keys without limits are claimed as unkeyed rows
        are, `ahead` and the destinations to `skip` included; a key with limits starts
        nothing before its instant (its limits are the key's, wherever it delivers). `start`:
        as `Dialect.claim`'s, shared by its two statements.

        Tenants: a tenant's pause and delivery quotas (its own key's row, `own_key`) bound
        all its keys together; when keys of more than one tenant may start, the room is
        shared by the tenants' weights (`app.domain.fair_share`), what one cannot use going
        to the others."""
        dialect = dialect_of(conn)
        await self._unshelve(conn)
        # After a full window, the walk at once for a while: reading a window that will be
        # full again (a backlog of DUE_WINDOW rows or more) would only add to the walk.
        looked_at = dialect.clock.host_now()
        window = self._walk_until is None or looked_at >= self._walk_until
        due, full, far = await keys_with_work_due(
            conn, ahead, window=window, far=SLEEP_AFTER.total_seconds()
        )
        if full and window:
            self._walk_until = looked_at + WALK_FOR
        if far:  # out of the walks until their rows near
            far_at = far[0].now + SLEEP_AFTER
            await sleep_keys(conn, [(row.flow_key, row.first_at) for row in far], far_at)
            self._look_at = None  # when the soonest of them wakes
        if not due:
            return KeyedClaim([], held_back_in=self._unshelve_in(dialect.clock.host_now()))
        now: datetime = due[0].now
        weights = await self._weights_of(conn)
        gates = await read_gates(conn, due)
        held_back: Counter[tuple[str, str]] = Counter()
        held_back_in: float | None = None
        shelving: list[str] = []  # due keys paused or backing off: their rows to shelve
        held_by_tenant: list[str] = []  # due keys whose tenant is paused: the same
        free: list[str] = []  # keys with no limits: no lock, no count
        bounded: list[str] = []  # keys that may start something once locked
        with_rows: set[str] = set()  # of those, the keys with a row of their own to lock
        # Each tenant's keys in turn, so that one tenant's many keys never fill the room.
        for row in interleave(due, _tenant_of_row, weights):
            if len(free) + len(bounded) >= max(room, 1):
                break  # each key starts one at least: the oldest `room` keys fill the room
            key = row.flow_key
            backing_off = _backing_off(row, now)
            if backing_off is not None:
                held_back["backoff", tenant_of_key(key)] += 1
                held_back_in = _sooner(held_back_in, backing_off)
                shelving.append(key)
                continue
            gate = gates.get(tenant_of_key(key))
            if gate is not None and not is_own_key(key):
                # The tenant's pause or its quotas hold every key of it (from the unlocked
                # read; its own key's row, locked with the keys, decides).
                most, bucket = allowance(
                    gate.limits, _bucket(gate.row, gate.limits, now), in_flight=0, now=now
                )
                if most == 0:
                    held_back["paused" if gate.limits.paused else "rate", tenant_of_key(key)] += 1
                    if gate.limits.paused:
                        held_by_tenant.append(key)
                    else:
                        held_back_in = _sooner(held_back_in, bucket.next_token_in(gate.limits))
                    continue
            limits = row_limits(row)
            keyed = limits is not None and limits.limited
            if not keyed and gate is None:
                free.append(key)
                continue
            if row.first_at > now:
                continue  # due only within `ahead`: a key with limits waits for the instant
            if keyed:
                assert limits is not None
                # From the unlocked read: a paused key or an empty bucket needs no lock.
                most, bucket = allowance(limits, _bucket(row, limits, now), in_flight=0, now=now)
                if most == 0:
                    held_back["paused" if limits.paused else "rate", tenant_of_key(key)] += 1
                    if limits.paused:
                        shelving.append(key)
                    else:
                        held_back_in = _sooner(held_back_in, bucket.next_token_in(limits))
                    continue
            if row.period_seconds is not None:
                with_rows.add(key)
            bounded.append(key)
        if await self._shelve(conn, shelving, now):
            self._look_at = None  # when what this claim shelved may start again
        await shelve_for_paused_tenants(conn, held_by_tenant[:MAX_SHELVES])
        held_back_in = _sooner(held_back_in, self._unshelve_in(dialect.clock.host_now()))
        due_tenants = {tenant_of_key(key) for key in [*free, *bounded]}
        tenant_weights = {t: weights.get(t, DEFAULT_WEIGHT) for t in due_tenants}
        if room <= 0:  # a look only: whether any due key may start something
            return KeyedClaim([], len(free) + len(bounded), held_back_in, held_back, tenant_weights)
        picks, buckets, budgets, wait = await self._bounded(
            conn, bounded, with_rows, room, now, held_back, gates
        )
        held_back_in = _sooner(held_back_in, wait)
        if free and len(due_tenants) > 1:
            # Keys of more than one tenant may start: every key's rows are chosen first and
            # shared by the tenants' weights (a free key's rows ahead of their instant too).
            picks += [_Pick(key, room + 1, False, tenant_of_key(key), ahead=True) for key in free]
            free = []
        rows: list[Any] = []
        demand = 0
        if picks:
            chosen = await self._choose(conn, picks, now, held_back, ahead)
            # Within a tenant, what is due first first, and of what is due now first
            # attempts before retries and replays (of the rows each key's probe read).
            chosen.sort(
                key=lambda r: (r.available_at > now, r.first_attempt_at is not None, r.available_at)
            )
            caps = {t: most for t, most in budgets.items() if most is not None}
            taken = take_shares(chosen, _tenant_of_row, weights, room, caps, self._credit)
            demand = len(taken) + (1 if len(chosen) > len(taken) else 0)
            if taken:
                rows = list(
                    await dialect.claim(
                        conn,
                        limit=len(taken),
                        lease=lease,
                        token=token,
                        owner=owner,
                        rows=ClaimRows.CHOSEN,
                        ids=[row.occurrence_id for row in taken],
                        # Only the free keys' rows are chosen ahead of their instant.
                        ahead=ahead,
                        start=start,
                        skip=skip,
                    )
                )
                await self._spend(conn, buckets, _started(rows, buckets))
        left = room - len(rows)
        if free and left > 0:
            unchosen = await dialect.claim(
                conn,
                limit=left,
                lease=lease,
                token=token,
                owner=owner,
                ahead=ahead,
                rows=ClaimRows.FREE,
                keys=free,
                skip=skip,
                # What the chosen rows started is no longer free to start.
                start=None if start is None else start - sum(not r.lease_ahead for r in rows),
            )
            rows += unchosen
            demand += len(unchosen) + (1 if len(unchosen) >= left else 0)
        return KeyedClaim(rows, demand, held_back_in, held_back, tenant_weights)

    @property
    def weights(self) -> dict[str, int]:
        """The tenants' weights as last read (a tenant not named: DEFAULT_WEIGHT)."""
        return self._weights

    async def _weights_of(self, conn: AsyncConnection) -> dict[str, int]:
        """The tenants' weights but the default one, read again every WEIGHTS_EVERY."""
        now = dialect_of(conn).clock.host_now()
        if self._weights_at is None or now >= self._weights_at:
            found = await conn.execute(
                sa.select(tenants.c.id, tenants.c.weight).where(tenants.c.weight != DEFAULT_WEIGHT)
            )
            self._weights = {row.id: row.weight for row in found}
            self._weights_at = now + WEIGHTS_EVERY
        return self._weights

    async def _shelve(self, conn: AsyncConnection, keys: list[str], now: datetime) -> bool:
        """Shelve the rows of the keys that are still paused or backing off under their
        locks (a key another claim holds is left to it); whether any was."""
        keys = keys[:MAX_SHELVES]
        if not keys:
            return False
        locked = (await conn.execute(lock_keys(dialect_of(conn).name), {"keys": keys})).all()
        shelved = [
            row.flow_key for row in locked if row.paused or _backing_off(row, now) is not None
        ]
        if shelved:
            await shelve_keys(conn, shelved)
        return bool(shelved)

    async def _unshelve(self, conn: AsyncConnection) -> None:
        """Unshelve the rows of keys whose back-off ended and wake the rows of sleeping keys
        that near their instant (every UNSHELVE_EVERY, or at the soonest of either this
        replica knows of), and learn when the next of either is."""
        now = dialect_of(conn).clock.host_now()
        if self._look_at is not None and now < self._look_at:
            return
        unshelving = await unshelving_keys(conn, now)
        if unshelving:
            await unshelve_keys(conn, unshelving)
        await wake_keys(conn, now)
        self._page_after = await sleep_pages(conn, self._page_after)
        soonest = _sooner(await next_unshelve_in(conn, now), await next_wake_in(conn, now))
        self._unshelve_at = None if soonest is None else now + timedelta(seconds=soonest)
        self._look_at = now + UNSHELVE_EVERY
        if self._unshelve_at is not None:
            self._look_at = min(self._look_at, self._unshelve_at)

    def _unshelve_in(self, now: datetime) -> float | None:
        """Seconds until the soonest back-off this replica knows of ends (the loop's
        sleep; None: none)."""
        if self._unshelve_at is None:
            return None
        return max(0.0, (self._unshelve_at - now).total_seconds())

    async def _bounded(
        self,
        conn: AsyncConnection,
        keys: list[str],
        with_rows: set[str],
        room: int,
        now: datetime,
        held_back: Counter[tuple[str, str]],
        gates: dict[str, Gate],
    ) -> tuple[
        list[_Pick],
        dict[str, tuple[FlowLimits, Bucket]],
        dict[str, int | None],
        float | None,
    ]:
        """Lock the keys with limits and the gates of their tenants, count what of them is
        in flight and allow each key what its limits and its tenant's give: the picks, the
        buckets to spend from (a gate's under its own key), what each gated tenant may start
        in all (None: no bound), and how soon a key or tenant out of tokens has one again.
        A key or gate another claim holds starts nothing here."""
        if not keys:
            return [], {}, {}, None
        dialect = dialect_of(conn).name
        tenant_of = {key: tenant_of_key(key) for key in keys}
        gated = sorted({t for t in tenant_of.values() if t in gates})
        lock = sorted(with_rows | {own_key(t) for t in gated})
        locked = {
            row.flow_key: row
            for row in (await conn.execute(lock_keys(dialect), {"keys": lock})).all()
        }
        limited = {
            key: row_limits(locked[key]) for key in keys if key in locked and not is_own_key(key)
        }
        counted = [key for key, limits in limited.items() if limits and limits.most_in_flight]
        flying: dict[str, int] = {}
        if counted:
            counts = await conn.execute(in_flight(dialect), {"keys": counted, "now": now})
            flying = {row.flow_key: row.in_flight for row in counts}
        buckets: dict[str, tuple[FlowLimits, Bucket]] = {}
        wait: float | None = None
        budgets: dict[str, int | None] = {}
        gate_limits = {t: row_limits(locked[own_key(t)]) for t in gated if own_key(t) in locked}
        tenant_flying = await tenants_in_flight(
            conn, [t for t, limits in gate_limits.items() if limits and limits.most_in_flight], now
        )
        for t in gated:
            limits = gate_limits.get(t)
            if own_key(t) not in locked:
                budgets[t] = 0  # another claim holds the tenant: its keys wait for it
                continue
            if limits is None or not limits.limited:
                budgets[t] = None  # its quotas went since the unlocked read
                continue
            gate_row = locked[own_key(t)]
            allowed, bucket = allowance(
                limits, _bucket(gate_row, limits, now), in_flight=tenant_flying[t], now=now
            )
            budgets[t] = allowed
            if limits.capacity is not None:
                buckets[own_key(t)] = (limits, bucket)
            if allowed == 0:
                if limits.paused:
                    held_back["paused", t] += 1
                elif limits.capacity is not None and bucket.next_token_in(limits):
                    held_back["rate", t] += 1
                    wait = _sooner(wait, bucket.next_token_in(limits))
                else:
                    held_back["parallelism", t] += 1
        picks: list[_Pick] = []
        for key in keys:
            tenant = tenant_of[key]
            budget = budgets.get(tenant)
            if budget == 0:
                continue
            most: int | None = None
            fifo = False
            if key in with_rows and not is_own_key(key):
                key_row = locked.get(key)
                if key_row is None or _backing_off(key_row, now) is not None:
                    continue  # another claim holds the key, or a back-off came meanwhile
                limits = limited[key]
                if limits is not None and limits.limited:
                    most, bucket = allowance(
                        limits,
                        _bucket(key_row, limits, now),
                        in_flight=flying.get(key, 0),
                        now=now,
                    )
                    if limits.capacity is not None:
                        buckets[key] = (limits, bucket)
                    fifo = limits.ordering is Ordering.FIFO
                    if most == 0:
                        if limits.paused:
                            held_back["paused", tenant] += 1
                        elif limits.capacity is not None and bucket.next_token_in(limits):
                            held_back["rate", tenant] += 1
                            wait = _sooner(wait, bucket.next_token_in(limits))
                        else:
                            held_back["order" if fifo else "parallelism", tenant] += 1
                        continue
                elif tenant not in gates:
                    continue  # the limits went since the unlocked read: next claim, free
            elif key in with_rows and tenant not in gates:
                continue  # an own key whose tenant's quotas went: next claim, free
            most = _least(most, budget)
            picks.append(
                _Pick(key, room + 1 if most is None else min(most, room + 1), fifo, tenant)
            )
        return picks, buckets, budgets, wait

    async def _choose(
        self,
        conn: AsyncConnection,
        picks: list[_Pick],
        now: datetime,
        held_back: Counter[tuple[str, str]],
        ahead: float = 0.0,
    ) -> list[Any]:
        """The rows each pick may start: a fifo head only when it is due; a key without
        limits of its own or its tenant's (`_Pick.ahead`) what is due within `ahead` too."""
        statement = _candidates(
            tuple(_HEAD if pick.fifo else _DUE_ROWS for pick in picks), dialect_of(conn).name
        )
        later = now + timedelta(seconds=ahead)
        params: dict[str, Any] = {}
        for n, pick in enumerate(picks):
            params[f"key_{n}"] = pick.key
            # A fifo key's head is one row: its part takes no room.
            if not pick.fifo:
                params[f"most_{n}"] = pick.most
                params[f"now_{n}"] = later if pick.ahead else now
        rows = (await conn.execute(statement, params)).all()
        ahead_keys = {pick.key for pick in picks if pick.ahead}
        chosen = [
            row
            for row in rows
            if row.available_at <= (later if row.flow_key in ahead_keys else now)
        ]
        for row in rows:
            if row.available_at > (later if row.flow_key in ahead_keys else now):
                held_back["order", tenant_of_key(row.flow_key)] += 1
        return chosen

    async def _spend(
        self,
        conn: AsyncConnection,
        buckets: dict[str, tuple[FlowLimits, Bucket]],
        started: Counter[str],
    ) -> None:
        """Write back the tokens the leased rows spent (named SQL `spend_tokens`; a bucket
        nothing spent from is unchanged: its refill is a function of the time since
        `refilled_at`)."""
        params = [
            {
                "b_key": key,
                "b_tokens": bucket.spent(started[key]).tokens,
                "b_at": bucket.refilled_at,
            }
            for key, (_, bucket) in buckets.items()
            if started[key]
        ]
        if params:
            await conn.execute(named("spend_tokens", dialect_of(conn).name), params)
