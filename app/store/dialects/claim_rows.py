"""What every dialect's claim returns, typed the same way on every database: the columns
of a claimed row, its schedule's misfire rules, the lease it replaced, the due flow keys;
and the helpers that shape them."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row

from app.store.schema.tables import in_claim_set, occurrences
from app.store.schema.types import UUID, UTCDateTime

# The columns every dialect's claim returns, typed the same way.
CLAIM_COLUMNS: dict[str, Any] = {
    "occurrence_id": UUID,
    "schedule_id": UUID,
    "fire_at": UTCDateTime(),
    "attempts": sa.Integer(),
    "origin": sa.String(),
    "first_claim": sa.Boolean(),
    # The attempt waits for its start mark: claimed ahead of its instant, or with more
    # than could start at once (`Dialect.claim`'s `start`).
    "lease_ahead": sa.Boolean(),
    "claimed_at": UTCDateTime(),
    "event_type": sa.String(),
    "max_attempts": sa.Integer(),
    "jitter_seconds": sa.Float(),
    "body": sa.Text(),
    "target": sa.Text(),
    "trigger": sa.Text(),
    "flow_key": sa.String(),
    # A fan-out's delivery: the topic's occurrence it delivers (NULL otherwise).
    "parent_id": UUID,
    "retry": sa.Text(),
    # A failure callback's target and body (origin `callback`; NULL body otherwise).
    "on_failure": sa.Text(),
    "callback_body": sa.Text(),
    # The W3C traceparent of the create request (NULL: none; docs/tracing.md).
    "traceparent": sa.String(),
    # Its schedule's tenant, which its delivery names (X-Chronoq-Tenant).
    "tenant": sa.String(),
}

# A schedule's misfire rules and tick count, which every claim returns with each row.
RULE_COLUMNS: dict[str, Any] = {
    "misfire_policy": sa.String(),
    "misfire_grace_seconds": sa.Float(),
    "max_catchup": sa.Integer(),
    "max_occurrences": sa.Integer(),
    "tick_count": sa.Integer(),
}

# The lease a claim replaced, read before the claim overwrote it (all NULL but for a row
# whose previous attempt was never settled: its lease ran out with its token still set).
LOST_COLUMNS: dict[str, Any] = {
    "lost_token": UUID,
    "lost_owner": sa.String(),
    "lost_at": UTCDateTime(),
    "lost_until": UTCDateTime(),
    # The lease lost was a claim ahead that never started its attempt (not charged).
    "lost_ahead": sa.Boolean(),
}
_LOST = tuple(LOST_COLUMNS)

# What `Dialect.due_keys` returns of each key.
# How many due keyed rows the keyed claim reads to find the keys with work due (named SQL
# `flow_due_window`): with fewer due, it has them all at the cost of the rows it read, and
# keys with only future rows cost nothing; with that many, some may be beyond, and it walks
# every key with pending rows instead (`flow_due`).
DUE_WINDOW = 2000
# What `Dialect.key_heads` returns of each key.
KEY_HEAD_COLUMNS: dict[str, Any] = {
    "flow_key": sa.String(),
    "first_at": UTCDateTime(),
    "now": UTCDateTime(),
}
# A `far` (seconds) that no row's instant is beyond: `Dialect.due_keys` then gives only
# the keys with work due.
NEVER_FAR = 1000 * 365 * 86400.0

DUE_KEY_COLUMNS: dict[str, Any] = {
    "flow_key": sa.String(),
    "first_at": UTCDateTime(),
    "now": UTCDateTime(),
    "rate": sa.Integer(),
    "period_seconds": sa.Float(),
    "burst": sa.Integer(),
    "parallelism": sa.Integer(),
    "ordering": sa.String(),
    "paused": sa.Boolean(),
    "tokens": sa.Float(),
    "refilled_at": UTCDateTime(),
    "backoff_until": UTCDateTime(),
}


def with_lost(rows: Iterable[Row[Any]], due: Iterable[Row[Any]]) -> list[SimpleNamespace]:
    """The claimed `rows` with the `LOST_COLUMNS` that the select of `due` rows read before
    the lease was written (for a dialect whose claim reads them in a statement of its own)."""
    lost = {row.occurrence_id: row for row in due}
    return [
        SimpleNamespace(
            **row._mapping, **{name: getattr(lost[row.occurrence_id], name) for name in _LOST}
        )
        for row in rows
    ]


def earliest_later(where: str, now: sa.ColumnElement[datetime]) -> sa.Select[Any]:
    """The earliest `available_at` after `now` of the rows of one claim index
    (`CLAIM_SETS`): its first entry past `now`, read in the index's order and no further.
    (As `min()` the planner could choose to aggregate the whole range instead, which it
    did while its statistics still held the index empty: after a million rows were
    created, each idle sleep read them all, 0.4 s a time until the next analyze.)"""
    return (
        sa.select(occurrences.c.available_at)
        .where(in_claim_set(where), occurrences.c.available_at > now)
        .order_by(occurrences.c.available_at)
        .limit(1)
    )
