"""PostgreSQL (asyncpg): the production store for any number of replicas.

The claim is one statement with `FOR UPDATE SKIP LOCKED` on the server's clock; statements
read `now()` themselves; locks are advisory locks keyed per installation; wake-ups are
`NOTIFY`s sent in the write's own transaction and heard on one `LISTEN` connection per
replica. With CHRONOQ_DB_SCHEMA each installation has its own schema, lock keys and
channel, so installations sharing a database never meet.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import asyncpg
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect as SqlDialect
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from app.domain.ids import event_id
from app.domain.occurrence import Delivery
from app.settings import backends, db_urls
from app.store.dialects.base import Dialect
from app.store.dialects.claim_rows import (
    CLAIM_COLUMNS,
    DUE_KEY_COLUMNS,
    KEY_HEAD_COLUMNS,
    LOST_COLUMNS,
    NEVER_FAR,
    RULE_COLUMNS,
    earliest_later,
)
from app.store.dialects.pg_connections import watch
from app.store.dialects.pg_hosts import HostChooser
from app.store.dialects.pg_listen import PgListener, due_channel
from app.store.dialects.toolkit import OnConflictInserts, dumps, pool_sizes, session_lock
from app.store.engine.clock import moved_statement
from app.store.loop.sql import ClaimRows, Finished, query
from app.store.schema.codec import JsonText
from app.store.schema.tables import (
    CLAIM_SETS,
    PRUNABLE,
    occurrences,
)
from app.store.schema.types import UTCDateTime

if TYPE_CHECKING:
    from app.store.engine.wakeups import Wakeups

log = logging.getLogger(__name__)

# The engine-wide execution option that tells code holding only a connection which
# installation it works for (wake-up channel, advisory lock keys).
SCHEMA_OPTION = "chronoq_schema"

_TRANSIENT_SQLSTATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock
# States that say the server cannot be used now, not that the statement is wrong: too many
# connections, an administrator or a crash shutting the server down, and a write reaching
# a read-only server (a standby not promoted yet, during a failover).
_UNAVAILABLE_SQLSTATES = frozenset({"53300", "57P01", "57P02", "57P03", "25006"})
# Seconds a new connection may take on each host of a multi-host URL, one after the other
# (pg_hosts): asyncpg's own default (60 s) would hold a request that long behind an
# unreachable host.
CONNECT_TIMEOUT = 10.0
_CONNECTION_SQLSTATE_CLASS = "08"  # connection exception
_TOO_MANY_CONNECTIONS = "53300"  # max_connections, or a role's or a database's limit
# undefined_table, undefined_column, undefined_object (a type), invalid_schema_name
_MISSING_SCHEMA_SQLSTATES = frozenset({"42P01", "42703", "42704", "3F000"})

# Any constants work; they only have to be the same in every replica and differ.
MIGRATION_LOCK = 0x43_48_52_4F_4E_51  # "CHRONQ"
PRUNING_LOCK = 0x43_48_52_4F_4E_51_52_54  # "CHRONQRT"
ACTIVITY_LOCK = 0x43_48_52_4F_4E_51_41_43  # "CHRONQAC"
_LOCKS = {"migrate": MIGRATION_LOCK, "prune": PRUNING_LOCK, "activity": ACTIVITY_LOCK}


# How every statement, the named SQL's too, reads the transaction's instant.
SERVER_CLOCK = "now()"
_NOW = sa.select(sa.func.now(type_=UTCDateTime()))
_NOTIFY = sa.text(
    "SELECT pg_notify(:channel, CAST(EXTRACT(EPOCH FROM (:at - now())) AS text))"
).bindparams(sa.bindparam("at", type_=UTCDateTime()))
_TRY_XACT_LOCK = sa.text("SELECT pg_try_advisory_xact_lock(:key)")
_XACT_LOCK = sa.text("SELECT pg_advisory_xact_lock(:key)")
_IDENTITY = sa.text("SELECT current_database(), pg_postmaster_start_time()")
# The list parameter each kind of claim takes, if any.
_LISTS: dict[ClaimRows, sa.BindParameter[Any]] = {
    ClaimRows.CHOSEN: sa.bindparam("ids", type_=postgresql.ARRAY(sa.Uuid())),
    ClaimRows.FREE: sa.bindparam("keys", type_=postgresql.ARRAY(sa.String())),
}
_SKIP = sa.bindparam("skip", type_=postgresql.ARRAY(sa.String()))
_CLAIMS = {
    rows: query("claim", "postgresql", rows=rows)
    .bindparams(
        sa.bindparam("token", type_=sa.Uuid()), _SKIP, *([_LISTS[rows]] if rows in _LISTS else [])
    )
    .columns(**CLAIM_COLUMNS, **LOST_COLUMNS, **RULE_COLUMNS)
    for rows in ClaimRows
}

# A claim of free keys' rows walks their index in due order and stops at its limit: with
# sorts disabled for that one statement, the planner cannot read every due row of the keys
# and sort them instead, which it prefers whenever the table's statistics predate a burst
# (a fresh or quiet table says next to no keyed row is due; a fan-out of 10,000 then read
# 9,000 rows a claim to take 300). Set for the statement, then back to the session's own.
_WALK_IN_DUE_ORDER = sa.text("SET LOCAL enable_sort = off")
_SORTS_AS_BEFORE = sa.text("SET LOCAL enable_sort TO DEFAULT")


_UUIDS = postgresql.ARRAY(sa.Uuid())
# A settle's deliveries, the pairs of occurrence and lease token, and the restart of their
# schedules' failure counts (named SQL `delivered_restarting`).
_DELIVERED_RESTARTING = query("delivered_restarting", "postgresql").bindparams(
    sa.bindparam("ids", type_=_UUIDS), sa.bindparam("tokens", type_=_UUIDS)
)
# The leases a settle or a hand-back ends of occurrences cancelled while they ran, the
# same pairs (named SQL `end_cancelled_leases`).
_END_CANCELLED_LEASES = query("end_cancelled_leases", "postgresql").bindparams(
    sa.bindparam("ids", type_=_UUIDS), sa.bindparam("tokens", type_=_UUIDS)
)
# Schedules finished: the locked read, the update by key and the events in one statement
# (named SQL `finish_one_shots`, `finish_recurring`).
_FINISH = {
    kind: query(f"finish_{kind}", "postgresql").bindparams(
        sa.bindparam("schedule_ids", type_=_UUIDS),
        sa.bindparam("event_ids", type_=_UUIDS),
        sa.bindparam("actor", type_=sa.String()),
    )
    for kind in Finished
}
# The due flow keys, read on the server's clock (named SQL `flow_due`).
_DUE_KEYS = query("flow_due", "postgresql").columns(**DUE_KEY_COLUMNS)
_KEY_HEADS = query("key_heads", "postgresql").columns(**KEY_HEAD_COLUMNS)
_DUE_WINDOW = query("flow_due_window", "postgresql").columns(
    **DUE_KEY_COLUMNS, scanned=sa.Integer()
)
# The attempt log's rows of a settle, from arrays (named SQL `record_attempts`).
_RECORD_ATTEMPTS = query("record_attempts", "postgresql")
# The start marks (named SQL `start_mark`): every pair asked, in one statement.
_MARK_STARTED = query("start_mark", "postgresql").bindparams(
    sa.bindparam("ids", type_=postgresql.ARRAY(sa.Uuid())),
    sa.bindparam("tokens", type_=postgresql.ARRAY(sa.Uuid())),
)
# The same, as the driver takes it (`PostgreSQL.mark_started`, outside a transaction).
_MARK_STARTED_SQL = (
    str(_MARK_STARTED).replace(":ids", "$1::uuid[]").replace(":tokens", "$2::uuid[]").strip()
)
_ATTEMPT_ARRAYS = {
    "ids": "id",
    "occurrence_ids": "occurrence_id",
    "tokens": "lease_token",
    "attempts": "attempt",
    "started_ats": "started_at",
    "durations": "duration_ms",
    "outcomes": "outcome",
    "status_codes": "status_code",
    "errors": "error",
    "excerpts": "response_excerpt",
    "replicas": "replica",
    "trace_ids": "trace_id",
    "endpoint_ids": "endpoint_id",
    "fire_ats": "fire_at",
    "tenants": "tenant",
    "flow_keys": "flow_key",
}


# Inserts from array parameters (`insert_rows`): one statement per table and set of
# columns whatever the number of rows, so one prepared statement and one cached plan, and
# no per-row bind processing; JSON goes as text and is cast in the statement.
_SQL = postgresql.dialect()  # type: ignore[no-untyped-call]
# `dumps` (the engine's JSON serializer), with its encoder made once rather than per value.
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_NULL = _ENCODE(None)  # a column of JSON nulls (an event's fields) need not encode each


@functools.cache
def json_columns(table: sa.Table, names: tuple[str, ...]) -> tuple[bool, ...]:
    """Which of `names` are JSON columns of `table` (sent as text, cast in the statement)."""
    return tuple(isinstance(table.c[name].type.dialect_impl(_SQL), sa.JSON) for name in names)


# Bounded: a statement per set of columns that hold one value for every row.
@functools.lru_cache(maxsize=256)
def array_insert(
    table: sa.Table,
    names: tuple[str, ...],
    shared: tuple[bool, ...],
    ignoring: str | None,
    now_columns: tuple[str, ...],
) -> sa.TextClause:
    """`INSERT INTO table (names, now_columns) SELECT ... FROM unnest(:p0, :p1, ...)`: the
    value of each column `shared` marks is bound once, as a scalar, the others as arrays."""
    quote = _SQL.identifier_preparer.quote
    arrays: list[str] = []
    aliases: list[str] = []
    selected: list[str] = []
    for n, (name, is_json, one) in enumerate(
        zip(names, json_columns(table, names), shared, strict=True)
    ):
        sql_type = table.c[name].type.compile(dialect=_SQL)
        element = "text" if is_json else sql_type
        if one:
            value = f"CAST(:p{n} AS {element})"
        else:
            arrays.append(f"CAST(:p{n} AS {element}[])")
            aliases.append(quote(name))
            value = f"u.{quote(name)}"
        selected.append(f"CAST({value} AS {sql_type})" if is_json else value)
    targets = ", ".join(quote(name) for name in (*names, *now_columns))
    values = ", ".join([*selected, *("now()" for _ in now_columns)])
    text = f"INSERT INTO {quote(table.name)} ({targets}) SELECT {values}"
    if arrays:
        text += f" FROM unnest({', '.join(arrays)}) AS u({', '.join(aliases)})"
    if ignoring is not None:
        text += f" ON CONFLICT ({quote(ignoring)}) DO NOTHING"
    return sa.text(text)


def column_values(rows: Sequence[dict[str, Any]], name: str, is_json: bool) -> tuple[Any, bool]:
    """The values of column `name` in `rows`, and whether they are one value for all:
    then that value alone. JSON goes as its text (the same text: 1 and 1.0 differ), a
    `JsonText` as it was written."""
    values = [row[name] for row in rows]
    if is_json:
        values = [
            value if isinstance(value, JsonText) else _NULL if value is None else _ENCODE(value)
            for value in values
        ]
    first = values[0]
    if values.count(first) == len(values):
        return first, True
    return values, False


def quote_schema(schema: str) -> str:
    """`schema` as an identifier, quoted whatever it is (a keyword such as `user` is a
    valid schema name)."""
    return '"' + schema.replace('"', '""') + '"'


def advisory_key(purpose: str, schema: str | None, default: int) -> int:
    """An advisory lock key (signed 64 bits) for `purpose` in `schema`; the installation
    without a schema keeps `default`, the key it has always used."""
    if schema is None:
        return default
    digest = hashlib.blake2b(f"chronoq:{purpose}:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def migration_lock_key(schema: str | None) -> int:
    return advisory_key("migrate", schema, MIGRATION_LOCK)


def pruning_lock_key(schema: str | None) -> int:
    """The pruning lock of the installation in `schema` (None: the default one)."""
    return advisory_key("prune", schema, PRUNING_LOCK)


def _statement_name() -> str:
    return f"__chronoq_{uuid.uuid4().hex}__"


@asynccontextmanager
async def _transaction_lock(conn: AsyncConnection, key: int) -> AsyncIterator[None]:
    # Waits for the lock; the commit or rollback that ends the transaction releases it.
    await conn.execute(_XACT_LOCK, {"key": key})
    yield


def schema_of(conn: AsyncConnection) -> str | None:
    """The schema of the installation this connection belongs to (None: the default)."""
    schema = conn.sync_engine.get_execution_options().get(SCHEMA_OPTION)
    return None if schema is None else str(schema)


def _prune_statement() -> sa.Delete:
    expired = (
        sa.select(occurrences.c.occurrence_id)
        # The index predicate as text: a bound list would hide it from the planner.
        .where(
            sa.text(PRUNABLE),
            occurrences.c.updated_at < sa.bindparam("cutoff", type_=UTCDateTime()),
        )
        # Oldest first, read in index order: the scan stops after `limit` entries.
        .order_by(occurrences.c.updated_at)
        .limit(sa.bindparam("limit", type_=sa.Integer()))
        # Rows another transaction holds are skipped: pruning never waits behind a claim.
        .with_for_update(skip_locked=True)
    )
    # `= ANY(ARRAY(...))` rather than `IN (...)`: the generic plan of a cached prepared
    # statement (asyncpg) does not know the limit and turns IN into a hash join over a
    # scan of the whole table; an array of keys is always deleted through the primary key.
    keys = sa.func.array(expired.scalar_subquery(), type_=postgresql.ARRAY(sa.Uuid()))
    return occurrences.delete().where(occurrences.c.occurrence_id == sa.any_(keys))


_PRUNE = _prune_statement()


class PostgreSQL(OnConflictInserts, Dialect):
    insert = staticmethod(postgresql.insert)
    backend = backends.named("postgresql")
    batch_migrations = False
    marks_alone = True
    partitioned_history = True

    def normalize_url(self, url: str) -> str:
        url = db_urls.for_sqlalchemy(url)  # libpq's multi-host form, as SQLAlchemy parses it
        if url.startswith("postgres://"):
            url = "postgresql://" + url[len("postgres://") :]
        if url.startswith("postgresql://"):
            return "postgresql+asyncpg://" + url[len("postgresql://") :]
        return url

    def engine(
        self, url: str, *, schema: str | None, connections: int, pre_ping: bool, pooled: bool
    ) -> AsyncEngine:
        # Each host of a multi-host URL gets the whole timeout (pg_hosts).
        connect_args: dict[str, Any] = {"async_creator_fn": HostChooser(CONNECT_TIMEOUT).connect}
        options: dict[str, Any] = {}
        if pooled:
            # No statement outlives its transaction, where the pooler gives the next one
            # another server connection: no cache of prepared statements (asyncpg's and
            # SQLAlchemy's), and unique names for the ones a transaction prepares.
            connect_args.update(
                statement_cache_size=0,
                prepared_statement_cache_size=0,
                prepared_statement_name_func=_statement_name,
            )
        if schema is not None:
            options[SCHEMA_OPTION] = schema
            # Sent in the startup packet: in force before the first statement, and kept by
            # every pooled connection. Only the schema: a table missing from it must fail,
            # not be found in `public` (another installation's, perhaps).
            connect_args["server_settings"] = {"search_path": quote_schema(schema)}
        kept = pool_sizes(connections)
        engine = create_async_engine(
            url,
            pool_size=kept,
            max_overflow=connections - kept,
            json_serializer=dumps,
            connect_args=connect_args,
            execution_options=options,
        )
        # A ping per checkout (bounded in time, pg_connections) costs a round trip; the
        # delivery loop turns it off because each of its transactions is safe to fail and
        # run again, and a dead pooled connection is dropped on its first error.
        watch(engine, ping=pre_ping)
        return engine

    def sql_dialect(self) -> SqlDialect:
        return postgresql.dialect()  # type: ignore[no-untyped-call]

    def is_transient(self, error: BaseException) -> bool:
        code = getattr(error, "sqlstate", None) or getattr(error, "pgcode", None)
        return code in _TRANSIENT_SQLSTATES

    def is_unavailable(self, error: BaseException) -> bool:
        if isinstance(error, asyncpg.TargetServerAttributeNotMatched):
            return True  # every host is read-only: a failover that has not promoted yet
        sqlstate = getattr(error, "sqlstate", None)
        return isinstance(sqlstate, str) and (
            sqlstate in _UNAVAILABLE_SQLSTATES or sqlstate.startswith(_CONNECTION_SQLSTATE_CLASS)
        )

    def is_full(self, error: BaseException) -> bool:
        return getattr(error, "sqlstate", None) == _TOO_MANY_CONNECTIONS

    def is_missing_schema(self, error: BaseException) -> bool:
        return getattr(error, "sqlstate", None) in _MISSING_SCHEMA_SQLSTATES

    def missing_database(self, url: str) -> str | None:
        return None  # the server says, once connected

    async def identity(self, conn: AsyncConnection) -> tuple[Any, ...]:
        # The server's start instant tells servers apart (a standby has its own); through a
        # pooler it is the server's behind the pooler.
        row = (await conn.execute(_IDENTITY)).one()
        return tuple(row)

    async def transaction_now(self, conn: AsyncConnection) -> datetime:
        value = (await conn.execute(_NOW)).scalar_one()
        assert isinstance(value, datetime)
        return value

    async def bound_now(self, conn: AsyncConnection) -> datetime:
        # Statements read now() themselves; the bound value only seeds ids and the instant
        # of an attempt that has none of its own.
        return self.clock.host_now()

    def moved_statement(self, statement: str) -> str:
        # In microseconds: an interval with no day part adds elapsed time, whatever the
        # session's time zone does across a DST change.
        by = self.clock.shift // timedelta(microseconds=1)
        moved = f"(now() + interval '{by} microseconds')"
        if (frozen := self.clock.frozen_at) is not None:
            moved = f"LEAST({moved}, CAST('{frozen.astimezone(UTC).isoformat()}' AS timestamptz))"
        return moved_statement(statement, SERVER_CLOCK, moved)

    async def mark_started(
        self, conn: AsyncConnection, deliveries: Sequence[Delivery]
    ) -> set[uuid.UUID]:
        ids = [d.occurrence_id for d in deliveries]
        tokens = [d.lease_token for d in deliveries]
        if conn.in_transaction():
            # Through a pooler in transaction mode: SQLAlchemy's statement, in the caller's
            # transaction.
            result = await conn.execute(_MARK_STARTED, {"ids": ids, "tokens": tokens})
            return {row[0] for row in result}
        # Alone, on the driver's connection: a saturated loop makes a mark for every few
        # dozen deliveries, and the driver alone costs a third of the CPU a mark costs
        # through SQLAlchemy (0.22 against 0.76 ms). A failure drops the connection from
        # the pool, as SQLAlchemy would have.
        driver = (await conn.get_raw_connection()).driver_connection
        assert driver is not None
        try:
            return {row[0] for row in await driver.fetch(_MARK_STARTED_SQL, ids, tokens)}
        except BaseException:
            await conn.invalidate()
            raise

    async def record_attempts(self, conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
        if rows:
            params = {name: [row[key] for row in rows] for name, key in _ATTEMPT_ARRAYS.items()}
            await conn.execute(_RECORD_ATTEMPTS, params)

    async def end_cancelled_leases(
        self, conn: AsyncConnection, deliveries: Sequence[Delivery]
    ) -> None:
        if deliveries:
            params = {
                "ids": [d.occurrence_id for d in deliveries],
                "tokens": [d.lease_token for d in deliveries],
            }
            await conn.execute(_END_CANCELLED_LEASES, params)

    async def mark_delivered(
        self, conn: AsyncConnection, deliveries: Sequence[Delivery], now: datetime
    ) -> None:
        # One statement, whatever the claims: the update, and the restart of the counts of
        # the schedules it delivered.
        params = {
            "ids": [d.occurrence_id for d in deliveries],
            "tokens": [d.lease_token for d in deliveries],
        }
        await conn.execute(_DELIVERED_RESTARTING, params)

    async def finish_schedules(
        self,
        conn: AsyncConnection,
        finished: Finished,
        schedule_ids: Sequence[Any],
        now: datetime,
        actor: str | None,
    ) -> None:
        # The locked read, the update by key and the events in one statement.
        ids = list(schedule_ids)
        if ids:
            params = {
                "schedule_ids": ids,
                "event_ids": [event_id(now) for _ in ids],
                "actor": actor,
            }
            await conn.execute(_FINISH[finished], params)

    async def insert_rows(
        self,
        conn: AsyncConnection,
        table: sa.Table,
        rows: Sequence[dict[str, Any]],
        *,
        ignoring: str | None = None,
        now_columns: tuple[str, ...] = (),
    ) -> None:
        if not rows:
            return
        names = tuple(name for name in rows[0] if name not in now_columns and name != "now")
        columns = [
            column_values(rows, name, is_json)
            for name, is_json in zip(names, json_columns(table, names), strict=True)
        ]
        shared = [one for _, one in columns]
        if len(rows) > 1 and all(shared):
            # Rows alike in every column: the first one's stays an array, for the count.
            columns[0], shared[0] = ([columns[0][0]] * len(rows), False), False
        statement = array_insert(table, names, tuple(shared), ignoring, now_columns)
        await conn.execute(statement, {f"p{n}": values for n, (values, _) in enumerate(columns)})

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
    ) -> Sequence[Row[Any]]:
        params = {
            "skip": list(skip),
            "limit": limit,
            "lease": lease,
            "token": token,
            "owner": owner,
            "ahead": ahead,
            "start": limit if start is None else start,
        }
        if rows is ClaimRows.CHOSEN:
            params["ids"] = list(ids or ())
        if rows is not ClaimRows.FREE:
            return (await conn.execute(_CLAIMS[rows], params)).all()
        params["keys"] = list(keys or ())
        await conn.execute(_WALK_IN_DUE_ORDER)
        found = (await conn.execute(_CLAIMS[rows], params)).all()
        await conn.execute(_SORTS_AS_BEFORE)
        return found

    async def due_keys(
        self, conn: AsyncConnection, ahead: float = 0.0, far: float = NEVER_FAR
    ) -> Sequence[Any]:
        return (await conn.execute(_DUE_KEYS, {"ahead": ahead, "far": far})).all()

    async def key_heads(self, conn: AsyncConnection, after: str, page: int) -> Sequence[Any]:
        return (await conn.execute(_KEY_HEADS, {"after": after, "page": page})).all()

    async def due_window(
        self, conn: AsyncConnection, ahead: float, window: int
    ) -> Sequence[Any] | None:
        return (await conn.execute(_DUE_WINDOW, {"ahead": ahead, "window": window})).all()

    async def prune(self, conn: AsyncConnection, *, cutoff: datetime, limit: int) -> int:
        result = await conn.execute(_PRUNE, {"cutoff": cutoff, "limit": limit})
        return int(result.rowcount)

    def migrating(
        self, conn: AsyncConnection, schema: str | None, *, session: bool = True
    ) -> AbstractAsyncContextManager[None]:
        if not session:
            return _transaction_lock(conn, migration_lock_key(schema))
        return session_lock(
            conn,
            sa.text("SELECT pg_advisory_lock(:key)"),
            sa.text("SELECT pg_advisory_unlock(:key)"),
            {"key": migration_lock_key(schema)},
        )

    def seconds_between(
        self, later: sa.ColumnElement[Any], earlier: sa.ColumnElement[Any]
    ) -> sa.ColumnElement[float]:
        return sa.type_coerce(sa.extract("epoch", later - earlier), sa.Float())

    def minute_of(self, instant: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        return sa.type_coerce(sa.func.date_trunc("minute", instant), UTCDateTime())

    @asynccontextmanager
    async def exclusive(self, conn: AsyncConnection, purpose: str) -> AsyncIterator[bool]:
        # Transaction-scoped: released by the commit or rollback that ends the block's
        # transaction, whatever happens.
        key = advisory_key(purpose, schema_of(conn), _LOCKS[purpose])
        yield bool((await conn.execute(_TRY_XACT_LOCK, {"key": key})).scalar_one())

    async def announce(self, conn: AsyncConnection, wakeups: Wakeups, at: datetime) -> None:
        # Sent with the transaction: every replica hears it when, and only if, it commits.
        await conn.execute(_NOTIFY, {"channel": due_channel(schema_of(conn)), "at": at})

    async def next_due_in(self, conn: AsyncConnection) -> float | None:
        seconds = await conn.scalar(_NEXT_DUE_IN)
        return None if seconds is None else float(seconds)

    @asynccontextmanager
    async def listening(
        self, url: str, schema: str | None, wakeups: Wakeups
    ) -> AsyncIterator[None]:
        listener = PgListener(url, wakeups, schema=schema)
        listener.start()
        try:
            yield
        finally:
            await listener.stop()


# Seconds to the earliest pending row not due yet, keyed or not (each from its own index).
_NEXT_DUE_IN = sa.select(
    sa.extract(
        "epoch",
        sa.func.least(
            *(earliest_later(where, sa.func.now()).scalar_subquery() for where in CLAIM_SETS)
        )
        - sa.func.now(),
    )
)

DIALECT = PostgreSQL()
