"""What `chronoq serve` does before it serves: take the port, wait a bounded time for the
database, migrate it once, and say which `CHRONOQ_*` variables it does not know; and what
the app says at start, however it is served, of a schema it will not migrate.

Invariant: each failure here is one line naming what failed (the address, the database URL
with its password hidden, the setting), never a traceback, and nothing is served after one.
"""

from __future__ import annotations

import asyncio
import difflib
import logging
import math
import os
import socket
import time
from collections.abc import Mapping

from app.domain.errors import StoreUnavailableError
from app.process.databases import open_database
from app.settings import Settings, known_variables
from app.store.engine.database import Database, describe_failure, is_unavailable, redact_url

log = logging.getLogger("app.cli.command")

# Variables of the `chronoq` command and of its processes that are not settings of a
# replica: the operator commands' service and key, and what `serve` hands its processes.
OTHER_VARIABLES = frozenset(
    {"CHRONOQ_URL", "CHRONOQ_API_KEY", "CHRONOQ_DELIVERY_SOCKETS", "CHRONOQ_DELIVERY_PROCESS"}
)
PREFIX = "CHRONOQ_"
FIRST_PAUSE = 0.5
LONGEST_PAUSE = 5.0


class StartupError(Exception):
    """Serving cannot start; the message is the one line to print."""


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything slower is done, so a port in use is
    said at once."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise StartupError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def _where(settings: Settings) -> str:
    where = redact_url(settings.database_url)
    if settings.db_schema is not None:
        where += f" (schema {settings.db_schema})"
    return where


async def _reach(settings: Settings) -> None:
    database = open_database(settings, "command")
    try:
        await database.identity()
    finally:
        await database.close()


async def wait_for_database(settings: Settings, budget: float) -> None:
    """Until the database answers, for at most `budget` seconds, each failed try logged
    on one line; StartupError once the budget is spent."""
    deadline = time.monotonic() + budget
    pause = FIRST_PAUSE
    while True:
        try:
            await _reach(settings)
            return
        except (OSError, StoreUnavailableError) as exc:
            why = _why(exc, settings)
        except Exception as exc:
            if not is_unavailable(exc):
                raise StartupError(
                    f"cannot use {_where(settings)}: {_why(exc, settings)}"
                ) from None
            why = _why(exc, settings)
        left = deadline - time.monotonic()
        if left <= 0:
            raise StartupError(
                f"cannot reach {_where(settings)}: {why} (gave up after {budget:g} s: "
                "CHRONOQ_DATABASE_WAIT)"
            )
        log.warning(
            "cannot reach %s: %s; trying again for up to %d s",
            _where(settings),
            why,
            math.ceil(left),
        )
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, LONGEST_PAUSE)


def _why(exc: BaseException, settings: Settings) -> str:
    if isinstance(exc, StoreUnavailableError) and exc.__cause__ is not None:
        exc = exc.__cause__
    return describe_failure(exc, settings.database_url)


async def migrate(settings: Settings) -> None:
    """Upgrade the schema once, before any process serves (they start with it at head)."""
    from app.store.engine.migrations import upgrade_to_head

    database = open_database(settings, "command")
    try:
        await upgrade_to_head(database)
    except Exception as exc:
        raise StartupError(
            f"migration failed on {_where(settings)}: {_why(exc, settings)}"
        ) from None
    finally:
        await database.close()


async def say_if_not_migrated(database: Database) -> None:
    """One WARNING line when the database is not at this version's revision (the app does
    not migrate it: CHRONOQ_AUTO_MIGRATE is false), naming the revision it has and the one
    it needs; nothing when it is at head, and that it cannot tell when the database cannot
    be read now (requests and readiness then say it is unreachable)."""
    from app.store.engine.migrations import revisions

    try:
        current, head = await revisions(database)
    except Exception as exc:
        log.warning(
            "cannot tell whether %s is migrated: %s",
            redact_url(database.url),
            describe_failure(exc, database.url),
        )
        return
    if current == head:
        return
    log.warning(
        "the database is at schema revision %s and this version needs %s: run `chronoq "
        "migrate` (CHRONOQ_AUTO_MIGRATE is false); until then requests that reach the "
        "database answer 503 and the delivery loop waits",
        _revisions(current),
        _revisions(head),
    )


def _revisions(names: set[str]) -> str:
    return ", ".join(sorted(names)) if names else "none (no Chronoq tables)"


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """A line for each CHRONOQ_* variable that is no setting, naming the closest one."""
    known = known_variables() | OTHER_VARIABLES
    # Compared without the prefix every one of them shares, which would make any two alike.
    suffixes = sorted(n.removeprefix(PREFIX) for n in known if n.startswith(PREFIX))
    lines = []
    for name in sorted(n for n in environ if n.upper().startswith(PREFIX)):
        if name.upper() in known:
            continue
        close = difflib.get_close_matches(name.upper().removeprefix(PREFIX), suffixes, 1, 0.6)
        hint = f": did you mean {PREFIX}{close[0]}?" if close else ""
        lines.append(f"{name} is not a setting and is ignored{hint}")
    return lines


def warn_unknown(environ: Mapping[str, str] | None = None) -> None:
    for line in unknown_variables(os.environ if environ is None else environ):
        log.warning("%s", line)
