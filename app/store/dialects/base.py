"""What differs by database, behind one interface: each dialect is a module of its own.

A `Dialect` is chosen once, when the `Database` is built, from the URL's scheme; the rest of
the store asks it, never the database's name. Adding a database means writing one module
here and making the store conformance suite (tests/store/) pass on it.

The interface is a flat list of operations, each with one meaning on every database and
documented here once; every dialect implements every one (there are no defaults). Where
databases write an operation alike, the dialects share its implementation from a module
beside this one: `stepwise.py` (the loop's statements in steps, for databases without
data-modifying CTEs) and `toolkit.py` (inserts, wake-ups by polling, session locks, JSON,
pool sizes). The loop's statements are named SQL (app/store/loop/sql/).
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Dialect as SqlDialect
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.domain.occurrence import Delivery
from app.settings.backends import Backend
from app.store.dialects.claim_rows import NEVER_FAR
from app.store.engine.clock import DatabaseClock
from app.store.engine.wakeups import Wakeups
from app.store.loop.sql import ClaimRows, Finished


class Dialect(ABC):
    """One database's operations: connections, the clock, the delivery loop's statements,
    inserts, locks and wake-ups."""

    # What app.settings.backends says of this database: its name, URL schemes, whether several
    # replicas may share it and whether it takes CHRONOQ_DB_SCHEMA.
    backend: ClassVar[Backend]

    # Whether migrations alter a table by rebuilding it (alembic's batch mode): they then
    # need the live database, and `chronoq migrate --sql` cannot render them.
    batch_migrations: ClassVar[bool]

    # Whether `mark_started` may run outside any transaction, one statement in autocommit
    # (else it runs in a transaction of its caller's).
    marks_alone: ClassVar[bool]

    # Whether the attempt log and the schedules' events are kept in day partitions, which
    # retention drops whole (`app.store.schema.partitions`); else their rows go with their
    # occurrence or schedule.
    partitioned_history: ClassVar[bool] = False

    def __init__(self) -> None:
        # The database clock as this process reads it, shared by every `Database` of this
        # dialect (one instance per process); tests move it (`DatabaseClock.move`).
        self.clock = DatabaseClock(on_move=_watch_statements)

    @property
    def name(self) -> str:
        """The database's name, as app.settings.backends and the named SQL say it."""
        return self.backend.name

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

    @abstractmethod
    def is_transient(self, error: BaseException) -> bool:
        """A driver error that a retry of the whole transaction may not meet again."""

    @abstractmethod
    def is_unavailable(self, error: BaseException) -> bool:
        """A driver error that says the server cannot be used now."""

    @abstractmethod
    def is_full(self, error: BaseException) -> bool:
        """A driver error that says the server refused a new connection because it has as
        many as it allows (for all, this user or this database): it is up, and busy."""

    @abstractmethod
    def is_missing_schema(self, error: BaseException) -> bool:
        """A driver error that says a table, column or schema the statements name does not
        exist: the database is not migrated to this version's revision."""

    @abstractmethod
    def missing_database(self, url: str) -> str | None:
        """A reason the operator CLI should not connect (a file that does not exist);
        None: none."""

    @abstractmethod
    async def identity(self, conn: AsyncConnection) -> tuple[Any, ...]:
        """What tells one database on one server from another, as seen through `conn`
        (empty where a dialect cannot tell)."""

    # -- the clock ----------------------------------------------------------------------

    @abstractmethod
    async def transaction_now(self, conn: AsyncConnection) -> datetime:
        """The database clock's current instant, for this transaction's writes (moved as
        `clock` is)."""

    @abstractmethod
    async def bound_now(self, conn: AsyncConnection) -> datetime:
        """The instant a settle binds as `now` (its ids, the instant of an attempt that has
        none of its own, and the statements that take the clock as a parameter): the
        transaction's instant where statements take it bound; where they read the server's
        clock themselves, the host's guess of it, which costs no round trip."""

    @abstractmethod
    def moved_statement(self, statement: str) -> str:
        """`statement` as it reads the database clock moved forward, or frozen, as `clock`
        is (the clock seam, `DatabaseClock.move` and `freeze`; never in production): each
        read of the server's clock that this dialect's statements make is that clock moved,
        and no later than the instant it is frozen at; a statement reading any other clock
        is refused (`app.store.engine.clock.moved_statement`)."""

    # -- figures ------------------------------------------------------------------------

    @abstractmethod
    def seconds_between(
        self, later: sa.ColumnElement[Any], earlier: sa.ColumnElement[Any]
    ) -> sa.ColumnElement[float]:
        """The seconds from one instant column to another, in SQL (negative when `later`
        is earlier)."""

    @abstractmethod
    def minute_of(self, instant: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """An instant column truncated to its minute, in SQL, read back as a UTC instant."""

    # -- the delivery loop --------------------------------------------------------------

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
        skip: Sequence[str] = (),
    ) -> Sequence[Any]:
        """Lease up to `limit` due occurrences, and occurrences due within `ahead` seconds
        that no lease holds (`lost_until` is each one's due instant), of the kind `rows`
        says (`ClaimRows`; `chosen`: those of `ids` still claimable; `free`: those of the
        flow keys `keys`), but none of a schedule whose destination is in `skip` (its
        failure callbacks aside); each row with
        CLAIM_COLUMNS, LOST_COLUMNS and RULE_COLUMNS. `start`: when the claim finds more
        than that many rows, none of its attempts starts (each is leased as one claimed
        ahead is, `lease_ahead`, and waits for its start mark); None: every row due now
        starts with the claim. A first claim of an occurrence
        (`first_claim`) counts as a firing of its schedule (`fire_count`,
        `last_fired_at`), in the claim itself (named SQL `claim`)."""

    @abstractmethod
    async def due_keys(
        self, conn: AsyncConnection, ahead: float = 0.0, far: float = NEVER_FAR
    ) -> Sequence[Any]:
        """The flow keys that have occurrences due (or due within `ahead` seconds), and those
        whose earliest is more than `far` seconds off (which the claim puts to sleep), the
        earliest due first, each with
        DUE_KEY_COLUMNS: its earliest `available_at`, the transaction's instant and the
        key's stored limits, bucket and back-off (NULL: the key has no row), read without
        a lock (named SQL `flow_due`): a walk of every key with pending rows no key shelved."""

    @abstractmethod
    async def key_heads(self, conn: AsyncConnection, after: str, page: int) -> Sequence[Any]:
        """Up to `page` flow keys after `after` in key order, each with KEY_HEAD_COLUMNS:
        its earliest pending row no key shelved and the transaction's instant (named SQL
        `key_heads`)."""

    @abstractmethod
    async def due_window(
        self, conn: AsyncConnection, ahead: float, window: int
    ) -> Sequence[Any] | None:
        """As `due_keys`, but from up to `window` due rows no key shelved, read in due
        order, each row also with `scanned` (how many rows were read: with `window` read,
        keys may lie beyond them); None where the dialect has no index to read them from
        (named SQL `flow_due_window`)."""

    @abstractmethod
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

    @abstractmethod
    async def record_attempts(self, conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
        """Write settled attempts to the attempt log, each only while its `lease_token` (a
        key of the row, not a column) still holds its occurrence: a late settle whose lease
        another claim took over is not an attempt of this row's (that claim recorded it as
        lease_expired). The occurrences stay locked until the commit (named SQL
        `record_attempts`, or `settled_leases` then `record_attempt`)."""

    @abstractmethod
    async def end_cancelled_leases(
        self, conn: AsyncConnection, deliveries: Sequence[Delivery]
    ) -> None:
        """End the leases that `deliveries` (keyed ones, settled or handed back) still hold
        of occurrences cancelled while they ran (named SQL `end_cancelled_leases`: one
        statement for all on PostgreSQL, one per lease token elsewhere)."""

    @abstractmethod
    async def mark_delivered(
        self, conn: AsyncConnection, deliveries: Sequence[Delivery], now: datetime
    ) -> None:
        """Mark delivered each of `deliveries` whose lease token still holds it, and start
        from 0 again the count of dead letters in a row of each schedule that delivered
        one (only those counting: most schedules never fail, and are not written); `now`:
        the settle's `bound_now` (named SQL `delivered_restarting`, or `delivered` for each
        lease then `restart_failures`)."""

    @abstractmethod
    async def finish_schedules(
        self,
        conn: AsyncConnection,
        finished: Finished,
        schedule_ids: Sequence[Any],
        now: datetime,
        actor: str | None,
    ) -> None:
        """Finish the schedules of `schedule_ids` that `finished` says are done, read and
        locked: each set to the status that read gives it, with an event of that kind at
        its version (finishing is no change a client makes: the version stays), by `actor`;
        `now`: the settle's `bound_now` (named SQL `finish_<finished>`, or
        `finishing_<finished>` then `finish` and `finish_event`)."""

    @abstractmethod
    async def prune(self, conn: AsyncConnection, *, cutoff: datetime, limit: int) -> int:
        """Delete at most `limit` finished occurrences last changed before `cutoff`."""

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

    @abstractmethod
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
        instant (where statements take it bound, as `now`, then a key of every row). The two
        options are not combined."""

    # -- locks --------------------------------------------------------------------------

    @abstractmethod
    def migrating(
        self, conn: AsyncConnection, schema: str | None, *, session: bool = True
    ) -> AbstractAsyncContextManager[None]:
        """Held while this installation's schema is migrated: replicas take turns. Without
        a `session` (a pooled connection) the lock lasts the connection's transaction, and
        the migrations must run in that one transaction."""

    @abstractmethod
    def exclusive(self, conn: AsyncConnection, purpose: str) -> AbstractAsyncContextManager[bool]:
        """Whether this replica holds `purpose`'s lock for the rest of the block (one
        replica at a time; never waits)."""

    # -- wake-ups -----------------------------------------------------------------------

    @abstractmethod
    async def announce(self, conn: AsyncConnection, wakeups: Wakeups, at: datetime) -> None:
        """Inside a write's transaction: something is due at `at`. The news reaches this
        process's loop once the write commits, and the other replicas' where the database
        carries it (where it does not, they poll)."""

    @abstractmethod
    async def next_due_in(self, conn: AsyncConnection) -> float | None:
        """Seconds until the earliest pending occurrence not yet due (None: none)."""

    @abstractmethod
    def listening(
        self, url: str, schema: str | None, wakeups: Wakeups
    ) -> AbstractAsyncContextManager[None]:
        """While open, other replicas' announcements reach `wakeups` (where the database
        carries none, nothing does: the loop's poll interval covers them)."""


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
    if dialect is None or not dialect.clock.moved:
        return statement, parameters
    return dialect.moved_statement(statement), parameters
