"""Running the `chronoq` command, and reading back what a PostgreSQL schema holds.

Two ways to run a command, with the same answer (the `returncode`, `stdout` and `stderr` of a
`subprocess.CompletedProcess`) and the same environment (of the command's own variables,
`OWN_VARIABLES`, every `CHRONOQ_*` and `OTEL_*`, only those a case passes; the rest as the
suite has it):

- `in_process` (`in_process_async` from a coroutine) calls `app.cli.command.main` in a thread of the
  test's own process. For a case whose subject is what the command does: its output, its exit
  status, what it writes to the database or the broker. It costs milliseconds where a process
  costs a second of start-up and imports.
- `chronoq` and `start` run the installed script as a process of its own. For a case whose
  subject is the process: the entry point, `--version`, a closed or broken pipe, a signal,
  what the process reads from its own environment, anything it prints on its way out,
  `serve`; for commands that run side by side (in-process, each would change the other's
  environment); and for at least one case of each command family, so that the script's
  entry point stays covered.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import asyncpg

from app.cli import command as cli
from app.settings.backends import statement_loggers

# Variables the command reads; a test passes the ones it means, the rest are removed.
OWN_VARIABLES = ("DATABASE_URL", "AMQP_URL")


def command() -> list[str]:
    script = Path(sys.executable).with_name("chronoq")
    return [str(script)] if script.exists() else [sys.executable, "-m", "app.cli.command"]


def _own(name: str) -> bool:
    # OTEL_*: traces are on only where a case turns them on.
    return name.upper().startswith(("CHRONOQ_", "OTEL_")) or name.upper() in OWN_VARIABLES


def environment(**variables: str) -> dict[str, str]:
    clean = {name: value for name, value in os.environ.items() if not _own(name)}
    return {**clean, **variables}


def chronoq(*args: str, timeout: float = 120, **variables: str) -> subprocess.CompletedProcess[str]:
    """Run `chronoq args...` as a process, with only `variables` of its own environment set."""
    return subprocess.run(
        [*command(), *args],
        env=environment(**variables),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start(*args: str, **variables: str) -> subprocess.Popen[str]:
    """Start `chronoq args...` as a process, without waiting for it."""
    return subprocess.Popen(
        [*command(), *args],
        env=environment(**variables),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def in_process(
    *args: str, stdin: str = "", timeout: float = 120, **variables: str
) -> subprocess.CompletedProcess[str]:
    """Run `chronoq args...` as `app.cli.command.main(args)` in a thread of this process (the event
    loop of `asyncio.run` is then its own, as in the script), with only `variables` of its
    own environment set and `stdin` as its standard input: what a process would have printed
    and the status it would have exited with.

    A SystemExit (argparse's usage errors: 2) gives the status it names; an exception that
    escapes `main` is a traceback on stderr and status 1, as the interpreter makes them. The
    command's log lines reach its stderr as in a process of its own: the logging setup is a
    new process's while it runs, and the suite's own again afterwards."""
    stdout, stderr = io.StringIO(), io.StringIO()
    status: list[int] = []

    def run() -> None:
        try:
            status.append(cli.main(list(args)))
        except SystemExit as exc:
            status.append(_exit_status(exc.code, stderr))
        except Exception:
            traceback.print_exc(file=stderr)
            status.append(1)

    thread = threading.Thread(target=run, name=f"chronoq {' '.join(args)}", daemon=True)
    with (
        _ONE_AT_A_TIME,
        _environment(variables),
        _import_path(),
        _fresh_logging(),
        _streams_of(thread, io.StringIO(stdin), stdout, stderr),
    ):
        thread.start()
        thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"chronoq {' '.join(args)} still running after {timeout:g}s")
    return subprocess.CompletedProcess(
        ["chronoq", *args], status[0], stdout.getvalue(), stderr.getvalue()
    )


async def in_process_async(
    *args: str, stdin: str = "", timeout: float = 120, **variables: str
) -> subprocess.CompletedProcess[str]:
    """`in_process` from a coroutine: the test's event loop (and the app a harness serves on
    it) keeps running meanwhile."""
    return await asyncio.to_thread(in_process, *args, stdin=stdin, timeout=timeout, **variables)


# One in-process command at a time: the environment and the logging setup are the process's.
_ONE_AT_A_TIME = threading.Lock()


class _ThreadStream(io.TextIOBase):
    """Stands in for sys.stdin, sys.stdout or sys.stderr while a command runs: the command's
    thread reads and writes its own buffer; every other thread (the test's event loop, the
    app a harness serves on it) the stream the suite had."""

    def __init__(self, thread: threading.Thread, own: io.StringIO, other: TextIO) -> None:
        super().__init__()
        self._thread = thread
        self._own = own
        self._other = other

    def _target(self) -> TextIO:
        return self._own if threading.current_thread() is self._thread else self._other

    def write(self, text: str) -> int:
        return self._target().write(text)

    def writelines(self, lines: Iterable[str]) -> None:  # type: ignore[override]
        self._target().writelines(lines)

    def read(self, size: int | None = -1) -> str:
        return self._target().read(-1 if size is None else size)

    def readline(self, size: int | None = -1) -> str:  # type: ignore[override]
        return self._target().readline(-1 if size is None else size)

    def flush(self) -> None:
        self._target().flush()

    def fileno(self) -> int:
        return self._target().fileno()

    def isatty(self) -> bool:
        return self._target().isatty()

    def readable(self) -> bool:
        return self._target().readable()

    def writable(self) -> bool:
        return self._target().writable()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self._target(), "encoding", None) or "utf-8")


@contextmanager
def _streams_of(
    thread: threading.Thread, stdin: io.StringIO, stdout: io.StringIO, stderr: io.StringIO
) -> Iterator[None]:
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin = _ThreadStream(thread, stdin, saved[0])
    sys.stdout = _ThreadStream(thread, stdout, saved[1])
    sys.stderr = _ThreadStream(thread, stderr, saved[2])
    try:
        yield
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved


def _configured_loggers() -> list[str]:
    """The loggers `app.telemetry.logs.configure` gives a level; a new process leaves them unset."""
    return ["aiormq", "aiormq.connection", "alembic.runtime.plugins", *statement_loggers()]


@contextmanager
def _fresh_logging() -> Iterator[None]:
    """A new process's logging while the command runs (the root at WARNING with no handler,
    so that a warning reaches stderr by Python's last resort; none of `logs.configure`'s
    levels); then the suite's own again, whatever the command configured."""
    root = logging.getLogger()
    loggers = [root] + [
        logger
        for logger in logging.Logger.manager.loggerDict.values()
        if isinstance(logger, logging.Logger)
    ]
    levels = {logger: logger.level for logger in loggers}
    handlers = root.handlers[:]
    root.handlers = []
    root.setLevel(logging.WARNING)
    for name in _configured_loggers():
        logging.getLogger(name).setLevel(logging.NOTSET)
    try:
        yield
    finally:
        root.handlers = handlers
        for name in _configured_loggers():
            logging.getLogger(name).setLevel(logging.NOTSET)
        for logger, level in levels.items():
            logger.setLevel(level)


@contextmanager
def _environment(variables: dict[str, str]) -> Iterator[None]:
    """os.environ as `environment(**variables)` makes it while the command runs; then as it
    was (a variable the command itself set or removed included)."""
    before = dict(os.environ)
    for name in [name for name in os.environ if _own(name)]:
        del os.environ[name]
    os.environ.update(variables)
    try:
        yield
    finally:
        for name in [name for name in os.environ if name not in before]:
            del os.environ[name]
        for name, value in before.items():
            if os.environ.get(name) != value:
                os.environ[name] = value


@contextmanager
def _import_path() -> Iterator[None]:
    """sys.path as it was before the command (alembic prepends to it at each migration)."""
    before = sys.path[:]
    try:
        yield
    finally:
        sys.path[:] = before


def _exit_status(code: object, stderr: io.StringIO) -> int:
    """The status of a process that SystemExit(code) ends, as the interpreter makes it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=stderr)
    return 1


async def run_script(url: str, script: str) -> None:
    """Run a multi-statement SQL script the way psql -f would, on a plain connection."""
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(script)
    finally:
        await connection.close()


async def describe(url: str, schema: str) -> dict[str, set[tuple[Any, ...]]]:
    """The tables, columns, indexes and constraints of `schema`, by name and definition."""
    connection = await asyncpg.connect(url)
    try:
        tables = await connection.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = $1", schema
        )
        columns = await connection.fetch(
            """
            SELECT table_name, column_name, data_type, character_maximum_length,
                   is_nullable, column_default
            FROM information_schema.columns WHERE table_schema = $1
            """,
            schema,
        )
        indexes = await connection.fetch(
            "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = $1",
            schema,
        )
        constraints = await connection.fetch(
            """
            SELECT t.relname, c.conname, c.contype, pg_get_constraintdef(c.oid)
            FROM pg_constraint AS c
            JOIN pg_class AS t ON t.oid = c.conrelid
            JOIN pg_namespace AS n ON n.oid = c.connamespace
            WHERE n.nspname = $1
            """,
            schema,
        )
        # The partitions of a day or of the history before partitions: the service makes
        # and drops them (`app.store.schema.partitions`); the default ones are schema.
        dated = await connection.fetch(
            """
            SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
            WHERE n.nspname = $1 AND c.relispartition
              AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'
            """,
            schema,
        )
    finally:
        await connection.close()
    skipped = {row[0] for row in dated}
    return {
        part: {tuple(row) for row in rows if row[0] not in skipped}
        for part, rows in (
            ("tables", tables),
            ("columns", columns),
            ("indexes", indexes),
            ("constraints", constraints),
        )
    }


def differences(built: dict[str, set[Any]], expected: dict[str, set[Any]]) -> list[str]:
    """What `built` lacks or has beyond `expected`, part by part (empty: the same)."""
    found = []
    for part in expected:
        missing = sorted(expected[part] - built[part], key=str)
        extra = sorted(built[part] - expected[part], key=str)
        if missing:
            found.append(f"{part} missing: {missing}")
        if extra:
            found.append(f"{part} extra: {extra}")
    return found
