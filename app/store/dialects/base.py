"""What differs by database, behind one interface: each dialect is a module of its own.

A `Dialect` is chosen once, when the `Database` is built, from the URL's scheme; the rest of
the store asks it, never the database's name. Adding a database means writing one module
here and making the store conformance suite (tests/store/) pass on it.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Dialect as SqlDialect
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.domain.ids import event_id
from app.domain.occurrence import Delivery
from app.domain.schedule import EventKind
from app.settings.backends import Backend
from app.store.dialects.claim_rows import (
    DUE_KEY_COLUMNS,
    earliest_later,
)
from app.store.dialects.toolkit import by_lease_token
from app.store.engine.clock import DatabaseClock, moved_statement
from app.store.engine.commits import after_commit
from app.store.engine.wakeups import Wakeups
from app.store.loop.sql import ClaimRows, Finished, listed, queries, query, typed
from app.store.schema.tables import CLAIM_SETS, attempts, schedule_events
from app.store.schema.types import UUID, UTCDateTime


class Dialect(ABC):
    """One database's ways: connection, clock, claim, locks, conflicts and wake-ups."""

    # What app.settings.backends says of this database: its name, URL schemes, whether several
    # replicas may share it and whether it takes CHRONOQ_DB_SCHEMA.
    backend: ClassVar[Backend]

    @property
    def name(self) -> str:
        return self.backend.name

    @property
    def multi_replica(self) -> bool:
        return self.backend.multi_replica

    @property
    def schemas(self) -> bool:
        return self.backend.schemas

    # Whether migrations alter a table by rebuilding it (alembic's batch mode): they then
    # need the live database, and `chronoq migrate --sql` cannot render them.
    batch_migrations: ClassVar[bool] = False

    # What this dialect's statements write where they read the server's clock themselves
    # (None: none does; the clock is read into Python, `transaction_now`, and bound).
    server_clock: ClassVar[str | None] = None

    def __init__(self) -> None:
        # The database clock as this process reads it, shared by every `Database` of this
        # dialect (one instance per process); tests move it (`DatabaseClock.move`).
        self.clock = DatabaseClock(on_move=_watch_statements)

    # -- connections --------------------------------------------------------------------

    @abstractmethod
    def normalize_url(self, url: str) -> str:
        """The URL with the async driver Chronoq uses when none is named."""

    @abstractmethod
    def engine(
        self, url: str, *, schema: str | None, connections: int, pre_ping: bool, pooled: bool
    ) -> AsyncEngine:
        """An engine of at most `connections` connections (half of them kept while idle);
        `pooled`: each one reaches the server through a transaction-mode pooler, so none
        may keep session state between transactions."""

    @abstractmethod
    def sql_dialect(self) -> SqlDialect:
        """SQLAlchemy's dialect, to render DDL with no connection."""

    def is_transient(self, error: BaseException) -> bool:
        """A driver error that a retry of the whole transaction may not meet again."""
        return False

    def is_unavailable(self, error: BaseException) -> bool:
        """A driver error that says the server cannot be used now."""
        return False

    def is_full(self, error: BaseException) -> bool:
        """A driver error that says the server refused a new connection because it has as
        many as it allows (for all, this user or this database): it is up, and busy."""
        return False

    def is_missing_schema(self, error: BaseException) -> bool:
        """A driver error that says a table, column or schema the statements name does not
        exist: the database is not migrated to this version's revision."""
        return False

    def missing_database(self, url: str) -> str | None:
        """A reason the operator CLI should not connect (a file that does not exist)."""
        return None

    async def identity(self, conn: AsyncConnection) -> tuple[Any, ...]:
        """What tells one database on one server from another, as seen through `conn`
        (empty where a dialect cannot tell)."""
        return ()

    # -- the clock ----------------------------------------------------------------------

    @abstractmethod
    async def transaction_now(self, conn: AsyncConnection) -> datetime:
        """The database clock's current instant, for this transaction's writes (moved as
        `clock` is)."""

    # Whether `mark_started` may run outside any transaction, one statement in autocommit
    # (else it runs in a transaction of its caller's).
    marks_alone = False

    async def mark_started(
        self, conn: AsyncConnection, deliveries: Sequence[Delivery]
    ) -> set[uuid.UUID]:
        """Start marks: of `deliveries`, leased unstarted and about to start, those that may
        start, marked started (named SQL `start_mark`). Leased unstarted: claimed ahead of
        its instant (app/worker/ahead.py), or by a claim that found more due than the loop
        had free slots (app/worker/start_marks.py). A cancel or a pause committed since the
        claim stops one (it is not returned); so does a lease another claim took over. An
        attempt marked started is charged if its lease is lost; one never marked is not (it
        never ran). A mark lost with a crash of the database reads as never started: the
        attempt is made again, uncharged."""
        marks = self._start_marks
        may_start: set[uuid.UUID] = set()
        for token, ids in by_lease_token(deliveries).items():
            params = {"ids": ids, "token": token}
            if len(marks) == 1:  # one statement marks and returns
                may_start.update(row[0] for row in await conn.execute(marks[0], params))
                continue
            mark, marked = marks
            if (await conn.execute(mark, params)).rowcount == len(ids):
                may_start.update(ids)
            else:  # some were stopped: which were marked
                may_start.update(row[0] for row in await conn.execute(marked, params))
        return may_start

    @cached_property
    def _start_marks(self) -> tuple[sa.Executable, ...]:
        """`start_mark`, with its parameters and the ids it returns typed: a statement that
        marks and returns, or one that marks and one that reads back."""
        typed = (
            sa.bindparam("ids", expanding=True, type_=UUID),
            sa.bindparam("token", type_=UUID),
        )
        *marks, returning = queries("start_mark", self.name)
        return (
            *(mark.bindparams(*typed) for mark in marks),
            returning.bindparams(*typed).columns(occurrence_id=UUID),
        )

    async def bound_now(self, conn: AsyncConnection) -> datetime:
        """The value of the `now` parameter of statements built with `now()`."""
        return await self.transaction_now(conn)

    def moved_clock(self, by: timedelta) -> str:
        """SQL for `server_clock` moved forward by `by` (a dialect that has one says)."""
        raise NotImplementedError(f"{self.name} reads no clock in its statements")

    def moved_statement(self, statement: str, by: timedelta) -> str:
        """`statement` as it reads the database clock moved forward by `by` (the clock
        seam, `DatabaseClock.move`; never in production): each `server_clock` read is
        `moved_clock(by)`, and a statement reading any other clock is refused."""
        read = self.server_clock
        return moved_statement(statement, read, self.moved_clock(by) if read else "")

    def now(self) -> sa.ColumnElement[datetime]:
        """The transaction's instant inside a statement (bound as `now` by default)."""
        return sa.bindparam("now", type_=UTCDateTime())

    def retry_at(self) -> sa.ColumnElement[datetime]:
        """`now` plus the `b_delay` seconds of a retry (bound as `b_available_at` by default)."""
        return sa.bindparam("b_available_at", type_=UTCDateTime())

    def among(self, column: sa.ColumnElement[Any], name: str) -> sa.ColumnElement[bool]:
        """`column` is one of the list bound as `name`."""
        return column.in_(sa.bindparam(name, expanding=True, type_=UUID))

    def per_row(self, probe: sa.Select[Any]) -> sa.Select[Any]:
        """`probe`, a correlated subquery, kept a lookup for each row of the outer query:
        never planned as a join with every row it could match (as it is by default)."""
        return probe

    # -- writes -------------------------------------------------------------------------

    @abstractmethod
    async def insert_ignoring(
        self, conn: AsyncConnection, table: sa.Table, rows: list[dict[str, Any]], key: str
    ) -> None:
        """Insert `rows`, skipping any whose `key` exists already."""

    @abstractmethod
    async def insert_new(
        self, conn: AsyncConnection, table: sa.Table, rows: list[dict[str, Any]], key: str
    ) -> set[Any]:
        """Like `insert_ignoring`; returns the keys of the rows it inserted."""

    async def insert_rows(
        self,
        conn: AsyncConnection,
        table: sa.Table,
        rows: Sequence[dict[str, Any]],
        *,
        ignoring: str | None = None,
        now_columns: tuple[str, ...] = (),
    ) -> None:
        """Insert `rows` (each with the same keys, as the table's columns take them) in one
        statement where the database allows it; with `ignoring`, rows whose `ignoring` key
        exists already are skipped. Each of `now_columns` is set to the transaction's
        instant (`now()`; by default bound as `now`, then a key of every row). The two
        options are not combined."""
        if not rows:
            return
        if ignoring is not None:
            await self.insert_ignoring(conn, table, list(rows), ignoring)
            return
        statement = table.insert()
        if now_columns:
            statement = statement.values({name: self.now() for name in now_columns})
        await conn.execute(statement, list(rows))

    async def record_attempts(self, conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
        """Write settled attempts to the attempt log, in one multi-row insert, each only
        while its `lease_token` (a key of the row, not a column) still holds its occurrence:
        a late settle whose lease another claim took over is not an attempt of this row's
        (that claim recorded it as lease_expired). The rows stay locked until the commit."""
        if not rows:
            return
        held_now, insert = self._record_attempts
        held = await conn.execute(held_now, {"ids": [row["occurrence_id"] for row in rows]})
        tokens = {found.occurrence_id: found.lease_token for found in held}
        current = [
            {k: v for k, v in row.items() if k != "lease_token"}
            for row in rows
            if tokens.get(row["occurrence_id"]) == row["lease_token"]
        ]
        if current:
            await conn.execute(insert, current)

    @cached_property
    def _record_attempts(self) -> tuple[sa.Executable, sa.Executable]:
        """The read of what the settle still holds (`settled_leases`), and the insert of
        one attempt (`record_attempt`), typed."""
        held_now, insert = query("settled_leases", self.name), query("record_attempt", self.name)
        columns = attempts.c
        return (
            held_now.bindparams(sa.bindparam("ids", expanding=True, type_=UUID)).columns(
                occurrence_id=UUID, lease_token=UUID
            ),
            insert.bindparams(
                *(
                    sa.bindparam(name, type_=columns[name].type)
                    for name in (
                        "id",
                        "occurrence_id",
                        "attempt",
                        "started_at",
                        "duration_ms",
                        "outcome",
                        "status_code",
                        "error",
                        "response_excerpt",
                        "replica",
                        "trace_id",
                    )
                )
            ),
        )

    async def mark_delivered(
        self, conn: AsyncConnection, deliveries: Sequence[Delivery], now: datetime
    ) -> None:
        """Mark delivered each of `deliveries` whose lease token still holds it, and start
        from 0 again the count of dead letters in a row of each schedule that delivered
        one (only those counting: most schedules never fail, and are not written): named
        SQL `delivered` for each lease, then `restart_failures`."""
        delivered, restart = self._delivered
        by_token = by_lease_token(deliveries)
        for token, ids in by_token.items():
            await conn.execute(delivered, {"ids": ids, "token": token, "now": now})
        if by_token:
            params = {
                "touched": list({d.schedule_id for d in deliveries}),
                "delivered_ids": [d.occurrence_id for d in deliveries],
                "now": now,
            }
            await conn.execute(restart, params)

    @cached_property
    def _delivered(self) -> tuple[sa.TextClause, sa.TextClause]:
        params = (
            *(listed(name, self.name, UUID) for name in ("ids", "touched", "delivered_ids")),
            sa.bindparam("token", type_=UUID),
            sa.bindparam("now", type_=UTCDateTime()),
        )
        return (
            typed(query("delivered", self.name), *params),
            typed(query("restart_failures", self.name), *params),
        )

    async def finish_schedules(
        self,
        conn: AsyncConnection,
        finished: Finished,
        schedule_ids: Sequence[Any],
        now: datetime,
        actor: str | None,
    ) -> None:
        """Finish the schedules of `schedule_ids` that `finished` says are done, read and
        locked (named SQL `finishing_<finished>`): each set to the status that read gives
        it (`finish`), with an event of that kind at its version (`finish_event`;
        finishing is no change a client makes: the version stays), by `actor`."""
        finishing, finish, event = self._finishing[finished]
        found = (await conn.execute(finishing, {"schedule_ids": list(schedule_ids)})).all()
        if not found:
            return
        by_status: dict[str, list[Any]] = defaultdict(list)
        for row in found:
            by_status[row.status].append(row.id)
        for status, changed in by_status.items():
            await conn.execute(finish, {"schedule_ids": changed, "b_status": status, "now": now})
        events = [
            {
                "id": event_id(now),
                "schedule_id": row.id,
                "kind": EventKind(row.status).value,
                "version": row.version,
                "actor": actor,
                "fields": None,
                "now": now,
            }
            for row in found
        ]
        await conn.execute(event, events)

    @cached_property
    def _finishing(self) -> dict[Finished, tuple[sa.TextualSelect, sa.TextClause, sa.TextClause]]:
        columns = schedule_events.c
        params = (
            listed("schedule_ids", self.name, UUID),
            sa.bindparam("b_status", type_=sa.String()),
            sa.bindparam("now", type_=UTCDateTime()),
            *(sa.bindparam(name, type_=columns[name].type) for name in _EVENT_COLUMNS),
        )
        finish = typed(query("finish", self.name), *params)
        event = typed(query("finish_event", self.name), *params)
        return {
            kind: (
                typed(query(f"finishing_{kind}", self.name), *params).columns(
                    id=UUID, version=sa.Integer(), status=sa.String()
                ),
                finish,
                event,
            )
            for kind in Finished
        }

    @abstractmethod
    async def claim(
        self,
        conn: AsyncConnection,
        *,
        limit: int,
        lease: float,
        token: Any,
        owner: str,
        ahead: float = 0.0,
        rows: ClaimRows = ClaimRows.FRESH,
        ids: Sequence[Any] | None = None,
        keys: Sequence[str] | None = None,
        start: int | None = None,
    ) -> Sequence[Any]:
        """Lease up to `limit` due occurrences, and occurrences due within `ahead` seconds
        that no lease holds (`lost_until` is each one's due instant), of the kind `rows`
        says (`ClaimRows`; `chosen`: those of `ids` still claimable; `free`: those of the
        flow keys `keys`); each row with
        CLAIM_COLUMNS, LOST_COLUMNS and RULE_COLUMNS. `start`: when the claim finds more
        than that many rows, none of its attempts starts (each is leased as one claimed
        ahead is, `lease_ahead`, and waits for its start mark); None: every row due now
        starts with the claim. A first claim of an occurrence
        (`first_claim`) counts as a firing of its schedule (`fire_count`,
        `last_fired_at`), in the claim itself."""

    @cached_property
    def _due_keys(self) -> tuple[sa.TextualSelect, bool]:
        """The statement, and whether it takes the instant as `now` (or reads the clock)."""
        statement = query("flow_due", self.name)
        bound = "now" in statement._bindparams
        if bound:
            statement = statement.bindparams(
                sa.bindparam("now", type_=UTCDateTime()), sa.bindparam("until", type_=UTCDateTime())
            )
        return statement.columns(**DUE_KEY_COLUMNS), bound

    async def due_keys(self, conn: AsyncConnection, ahead: float = 0.0) -> Sequence[Any]:
        """The flow keys that have occurrences due (or due within `ahead` seconds), the
        earliest due first, each with
        DUE_KEY_COLUMNS: its earliest `available_at`, the transaction's instant and the
        key's stored limits, bucket and back-off (NULL: the key has no row), read without
        a lock."""
        statement, bound = self._due_keys
        if bound:
            now = await self.transaction_now(conn)
            params: dict[str, Any] = {"now": now, "until": now + timedelta(seconds=ahead)}
        else:
            params = {"ahead": ahead}
        return (await conn.execute(statement, params)).all()

    @abstractmethod
    async def prune(self, conn: AsyncConnection, *, cutoff: datetime, limit: int) -> int:
        """Delete at most `limit` finished occurrences last changed before `cutoff`."""

    # -- locks --------------------------------------------------------------------------

    def migrating(
        self, conn: AsyncConnection, schema: str | None, *, session: bool = True
    ) -> AbstractAsyncContextManager[None]:
        """Held while this installation's schema is migrated: replicas take turns. Without
        a `session` (a pooled connection) the lock lasts the connection's transaction, and
        the migrations must run in that one transaction."""
        return nullcontext()

    @asynccontextmanager
    async def exclusive(self, conn: AsyncConnection, purpose: str) -> AsyncIterator[bool]:
        """Whether this replica holds `purpose`'s lock for the rest of the block (one
        replica at a time; never waits)."""
        yield True

    # -- wake-ups -----------------------------------------------------------------------

    async def announce(self, conn: AsyncConnection, wakeups: Wakeups, at: datetime) -> None:
        """Inside a write's transaction: something is due at `at`. By default the news
        reaches this process's loop once the write commits (other replicas poll)."""
        after_commit(lambda: wakeups.due_in((at - self.clock.host_now()).total_seconds()))

    async def next_due_in(self, conn: AsyncConnection) -> float | None:
        """Seconds until the earliest pending occurrence not yet due (None: none)."""
        now = await self.bound_now(conn)
        bound = sa.literal(now, UTCDateTime())
        # One round trip: the first entry past `now` of each claim index.
        firsts = (
            await conn.execute(
                sa.select(*(earliest_later(w, bound).scalar_subquery() for w in CLAIM_SETS))
            )
        ).one()
        found = []
        for at in firsts:
            if at is not None:
                when = at if isinstance(at, datetime) else datetime.fromisoformat(str(at))
                found.append(when.replace(tzinfo=UTC) if when.tzinfo is None else when)
        return (min(found) - now).total_seconds() if found else None

    def listening(self, url: str, schema: str | None, wakeups: Wakeups) -> Any:
        """An async context manager: while open, other replicas' announcements reach
        `wakeups` (nothing by default: the loop's poll interval covers them)."""
        return nullcontext()


# The columns of a finished schedule's event the finish binds (named SQL `finish_event`).
_EVENT_COLUMNS = ("id", "schedule_id", "kind", "version", "actor", "fields")

# The engine-wide execution option that carries the dialect to code holding a connection.
OPTION = "chronoq_dialect"

_watching = False


def _watch_statements() -> None:
    """From the first move of a clock on, every statement of this process passes `_moved`
    (installed once)."""
    global _watching
    if not _watching:
        event.listen(Engine, "before_cursor_execute", _moved, retval=True)
        _watching = True


def _moved(
    conn: Any,
    cursor: Any,
    statement: str,
    parameters: Any,
    context: Any,
    executemany: bool,
) -> tuple[str, Any]:
    """A statement about to be sent, as it reads its database's clock moved (engines that
    are no `Database`'s, and clocks not moved, pass unchanged)."""
    dialect: Dialect | None = conn.engine.get_execution_options().get(OPTION)
    if dialect is None or not dialect.clock.shift:
        return statement, parameters
    return dialect.moved_statement(statement, dialect.clock.shift), parameters
