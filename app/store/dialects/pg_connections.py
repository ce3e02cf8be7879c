"""Which pooled PostgreSQL connections the pool keeps: one is pinged at checkout within a
bound, and one whose server is gone or no longer takes writes is dropped, never handed out
again.

A connection to a server that vanished without closing it (its machine gone, a partition)
answers nothing: SQLAlchemy's own pre-ping waits for it forever, and with it the request
that checked it out. A server that turned read-only (a primary demoted, or fenced during a
failover) refuses every write with SQLSTATE 25006 while the connection itself works: kept,
the connection would refuse the next write too, long after a new primary was promoted.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import InvalidatePoolError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import await_

# Seconds a pooled connection has to answer its checkout ping before it is taken for lost.
PING_TIMEOUT = 5.0
# read_only_sql_transaction: a write reached a server that does not take writes.
READ_ONLY_SQLSTATE = "25006"
_FRESH = "chronoq_fresh"  # a connection made for this checkout: no need to ping it


def sqlstates(error: BaseException | None) -> set[str]:
    """The SQLSTATEs of `error` and the driver's errors under it (SQLAlchemy's wrapper,
    its adapter's, asyncpg's own)."""
    found: set[str] = set()
    seen: list[BaseException] = []
    pending = [error]
    while pending:
        current = pending.pop()
        if current is None or any(current is e for e in seen):
            continue
        seen.append(current)
        code = getattr(current, "sqlstate", None) or getattr(current, "pgcode", None)
        if isinstance(code, str):
            found.add(code)
        pending.extend([getattr(current, "orig", None), current.__cause__])
    return found


def _fresh(_dbapi_connection: Any, record: Any) -> None:
    record.info[_FRESH] = True


def _ping(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
    if record.info.pop(_FRESH, False):
        return
    try:
        # One round trip of the simple protocol: nothing prepared, no transaction (through
        # a transaction-mode pooler too).
        await_(dbapi_connection.driver_connection.execute("SELECT 1", timeout=PING_TIMEOUT))
    except Exception as exc:
        # The pool drops it, and every connection opened before it (they went to the same
        # server), and checks out a new one.
        raise InvalidatePoolError(f"no answer to the checkout ping: {exc!r}") from exc


def _drop_read_only(context: sa.engine.ExceptionContext) -> None:
    if READ_ONLY_SQLSTATE in sqlstates(context.original_exception):
        # Dropped with every connection opened before it (the same server): the next ones
        # are opened anew, on the host that takes writes now.
        context.is_disconnect = True
        context.invalidate_pool_on_disconnect = True


def watch(engine: AsyncEngine, *, ping: bool) -> None:
    """Install on `engine`: the checkout ping when `ping`, the drop of read-only ones."""
    target = engine.sync_engine
    if ping:
        sa.event.listen(target, "connect", _fresh)
        sa.event.listen(target, "checkout", _ping)
    sa.event.listen(target, "handle_error", _drop_read_only)
