"""Shared fixtures: real databases migrated by the real migrations, settings, a receiver.

PostgreSQL and MySQL/MariaDB tests skip when the server is down, unless
CHRONOQ_REQUIRE_SERVICES=1 (set by .ci/run), where they fail instead: a missing service
never passes silently.

`make test` runs the suite on three pytest-xdist workers, each a process with session fixtures
of its own: every database, queue, port and file a fixture makes has a name no other process
uses (the run's id, the process id and a random part; port 0 or tests.e2e.processes.free_port;
tmp_path). Each worker drops its databases at its own teardown; the controlling process drops
afterwards whatever a worker that crashed left behind (see `pytest_sessionfinish`).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from app.domain.tenants import DEFAULT_TENANT
from app.settings import Settings
from app.store.engine.database import Database
from app.store.engine.migrations import upgrade_to_head
from app.store.schema.tables import metadata, tenants
from tests.receiver import Receiver

REQUIRE_SERVICES = os.environ.get("CHRONOQ_REQUIRE_SERVICES") == "1"
AMQP_URL = os.environ.get("CHRONOQ_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
PG_ADMIN_URL = os.environ.get(
    "CHRONOQ_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
MYSQL_ADMIN_URL = os.environ.get("CHRONOQ_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/mysql")


# The run's id, in the name of every database the run creates: shared by every xdist worker
# (pytest_configure sets it from xdist's --testrunuid), so the controlling process finds the
# databases of workers that never reached their teardown.
RUN_ID = uuid.uuid4().hex[:8]
_LEFTOVER_TIMEOUT = 30.0


def pytest_configure(config: pytest.Config) -> None:
    global RUN_ID
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None:
        shared = str(workerinput["testrunuid"])
    else:
        # The controlling process (or a run without xdist): xdist hands this to the workers.
        if getattr(config.option, "testrunuid", None) is None:
            config.option.testrunuid = uuid.uuid4().hex
        shared = str(config.option.testrunuid)
    RUN_ID = hashlib.sha256(shared.encode()).hexdigest()[:8]


# Cases that run on one xdist worker each lane, one after another, ahead of that worker's share
# of the rest: the end-to-end cases start replicas (and nginx) that load a core by
# themselves, so more of them side by side would each measure the others' load rather than
# the service. Two lanes of about equal length (the first: replicas killed, stopped and
# failed over under load; the second: the servers in front of replicas, the processes users
# start, and the browser cases, which share one Chromium); a module stays whole, since its
# cases may share replicas (module fixtures). A module of tests/e2e/ named in no lane runs
# in the first.
PINNED = ("tests/e2e/", "tests/browser/")
SECOND_LANE = (
    "tests/browser/",
    *(
        f"tests/e2e/test_{name}.py"
        for name in (
            "shipped_balancers",
            "hostile_connections",
            "hostile_bodies",
            "pgbouncer",
            "cli_over_http",
            "client_process",
            "served_logs",
            "serve_startup",
            "wheel",
            "tracing",
        )
    ),
)


def lane(nodeid: str) -> int | None:
    """The lane of a pinned case (0 or 1), None for a case any worker may take."""
    if not nodeid.startswith(PINNED):
        return None
    return 1 if nodeid.startswith(SECOND_LANE) else 0


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` (pyproject.toml): xdist's `load`, except that the pinned cases go,
    lane by lane, to the first workers given tests (both lanes to one, with one worker), all
    at once, ahead of their share of the rest.

    Not xdist's own loadgroup (nor loadscope): those key the cases by test id, and the
    schemathesis cases of tests/contract/test_fuzz.py share one id per test function, so all
    but one of each would silently not run. Nor `xdist_group` marks: pytest-xdist 3.8 finds a
    mark's group by renaming the test, which pytest 9.2 ignores (pytest-xdist issue 1386)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScheduling  # type: ignore[import-untyped]

    class Scheduling(LoadScheduling):  # type: ignore[misc]
        lanes: list[list[int]] | None = None

        def _send_tests(self, node: Any, num: int) -> None:
            if self.lanes is None:
                self.lanes = [[], []]
                for index, nodeid in enumerate(self.collection):
                    if (which := lane(nodeid)) is not None:
                        self.lanes[which].append(index)
                pinned = {index for each in self.lanes for index in each}
                self.pending[:] = [index for index in self.pending if index not in pinned]
                if len(self.nodes) < 2:
                    self.lanes = [self.lanes[0] + self.lanes[1]]
            if self.lanes and (given := self.lanes.pop(0)):
                self.node2pending[node].extend(given)
                node.send_runtest_some(given)
            super()._send_tests(node, num)

    return Scheduling(config, log)


# How to list and drop the suite's databases on each server.
_LIST_DATABASES = {
    "postgresql": "SELECT datname FROM pg_database WHERE datname LIKE 'chronoq%'",
    "mysql": "SHOW DATABASES LIKE 'chronoq%'",
}
_DROP_DATABASE = {
    "postgresql": 'DROP DATABASE IF EXISTS "{}" WITH (FORCE)',
    "mysql": "DROP DATABASE IF EXISTS `{}`",
}


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """In the controlling process, after the workers are gone (xdist's own sessionfinish
    stops them): drop the databases of this run still there. A worker that finished dropped
    its own; these are those of a worker that crashed or was killed."""
    if hasattr(session.config, "workerinput"):
        return
    for url in (PG_ADMIN_URL, MYSQL_ADMIN_URL):
        try:
            dialect, names = _databases(url)
        except Exception:  # the server is down or unreachable: it holds none of them
            continue
        for name in names:
            if f"_{RUN_ID}_" in name:
                _admin(_DROP_DATABASE[dialect].format(name), url)


def _databases(url: str) -> tuple[str, list[str]]:
    """The dialect of `url`'s server and the names of its databases the suite may have made."""
    found: list[str] = []
    dialect: list[str] = []

    async def run() -> None:
        database = Database(url)
        try:
            dialect.append(database.dialect.name)
            async with database.engine.connect() as conn:
                rows = await conn.execute(sa.text(_LIST_DATABASES[database.dialect.name]))
                found.extend(str(row[0]) for row in rows)
        finally:
            await database.close()

    run_sync(lambda: asyncio.wait_for(run(), _LEFTOVER_TIMEOUT))
    return dialect[0], found


def service_missing(what: str, why: object) -> None:
    message = f"{what} is not reachable: {why}"
    if REQUIRE_SERVICES:
        pytest.fail(message + " (CHRONOQ_REQUIRE_SERVICES=1)", pytrace=False)
    pytest.skip(message)


def run_sync(factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run a coroutine to completion on a fresh loop in a worker thread, so that it also
    works from inside a running test loop."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, factory()).result()


def _admin(sql: str, url: str = PG_ADMIN_URL) -> None:
    async def run() -> None:
        database = Database(url)
        try:
            async with database.engine.connect() as conn:
                conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                await conn.execute(sa.text(sql))
        finally:
            await database.close()

    run_sync(run)


def _migrate(url: str) -> None:
    async def run() -> None:
        database = Database(url)
        try:
            await upgrade_to_head(database)
        finally:
            await database.close()

    run_sync(run)


def _url_of(name: str) -> str:
    url = make_url(PG_ADMIN_URL.replace("postgresql://", "postgresql+asyncpg://", 1))
    database_url = url.set(database=name).render_as_string(hide_password=False)
    return database_url.replace("postgresql+asyncpg://", "postgresql://", 1)


def _mysql_url_of(name: str) -> str:
    return make_url(MYSQL_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def _create_mysql(prefix: str) -> str:
    name = f"{prefix}_{RUN_ID}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        _admin(f"CREATE DATABASE `{name}`", MYSQL_ADMIN_URL)
    except Exception as exc:
        service_missing("MySQL/MariaDB", exc)
    return name


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A database of this run's own, migrated once, dropped at the end."""
    name = f"chronoq_test_{RUN_ID}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        _admin(f'CREATE DATABASE "{name}"')
    except Exception as exc:
        service_missing("PostgreSQL", exc)
    database_url = _url_of(name)
    try:
        _migrate(database_url)
        yield database_url
    finally:
        _JANITOR.forget(database_url)
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def empty_postgres() -> Iterator[Callable[[], str]]:
    """Makes empty databases (no tables, no migrations), each dropped after the test."""
    names: list[str] = []

    def make() -> str:
        name = f"chronoq_empty_{RUN_ID}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        try:
            _admin(f'CREATE DATABASE "{name}"')
        except Exception as exc:
            service_missing("PostgreSQL", exc)
        names.append(name)
        return _url_of(name)

    try:
        yield make
    finally:
        for name in names:
            _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def mysql_url() -> Iterator[str]:
    """A MySQL/MariaDB database of this run's own, migrated once, dropped at the end."""
    name = _create_mysql("chronoq_test")
    try:
        database_url = _mysql_url_of(name)
        _migrate(database_url)
        yield database_url
    finally:
        _JANITOR.forget(_mysql_url_of(name))
        _admin(f"DROP DATABASE IF EXISTS `{name}`", MYSQL_ADMIN_URL)


@pytest.fixture
def empty_mysql() -> Iterator[Callable[[], str]]:
    """Makes empty MySQL/MariaDB databases, each dropped after the test."""
    names: list[str] = []

    def make() -> str:
        names.append(_create_mysql("chronoq_empty"))
        return _mysql_url_of(names[-1])

    try:
        yield make
    finally:
        for name in names:
            _admin(f"DROP DATABASE IF EXISTS `{name}`", MYSQL_ADMIN_URL)


@pytest.fixture(scope="session")
def amqp_url() -> str:
    """The local RabbitMQ; tests isolate themselves by queue and exchange names of their own."""
    import aio_pika

    async def ping() -> None:
        connection = await aio_pika.connect(AMQP_URL, timeout=5)
        await connection.close()

    try:
        run_sync(ping)
    except Exception as exc:
        service_missing("RabbitMQ", exc)
    return AMQP_URL


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "chronoq.db"
    _migrate(f"sqlite:///{path}")
    return path


# Every table, children first. DELETE, not TRUNCATE: on the few rows a test leaves it takes
# milliseconds where PostgreSQL's TRUNCATE, which replaces each table's files, takes a tenth
# of a second or more (once per server case); and MySQL refuses TRUNCATE on a table a
# foreign key references.
# The default tenant stays, as migrated: every installation has it (migration 0021 makes
# it), and a PUT of it (which grows its version) is undone.
_EMPTY_TABLES = [
    table.delete().where(table.c.id != DEFAULT_TENANT) if table is tenants else table.delete()
    for table in reversed(metadata.sorted_tables)
] + [
    tenants.update()
    .where(tenants.c.id == DEFAULT_TENANT, tenants.c.version != 1)
    .values(
        version=1,
        display_name=None,
        weight=1,
        max_schedules=None,
        max_creates_per_minute=None,
        create_tokens=None,
        create_refilled_at=None,
        retention_seconds=None,
    )
]


async def delete_every_row(database: Database) -> None:
    """Empty the migrated database behind `database`, in one transaction."""
    async with database.engine.begin() as conn:
        for statement in _EMPTY_TABLES:
            await conn.execute(statement)


class _Janitor:
    """Empties the server databases of the run between cases over a connection to each that
    it keeps: opening one (and SQLAlchemy's first-connect queries) was most of the 40 ms an
    emptying took, once per server case. Its connections live on an event loop of its own, in
    a thread: a case's loop may be running when a fixture asks, and is gone after the case."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._databases: dict[str, Database] = {}

    def _run(self, factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="janitor", daemon=True).start()
        asyncio.run_coroutine_threadsafe(factory(), self._loop).result(_LEFTOVER_TIMEOUT)

    def empty(self, url: str) -> None:
        async def run() -> None:
            database = self._databases.get(url)
            if database is None:
                database = self._databases[url] = Database(url, connections=2)
            await delete_every_row(database)

        self._run(run)

    def forget(self, url: str) -> None:
        """Close the connection to `url`'s database, about to be dropped."""
        database = self._databases.pop(url, None)
        if database is not None:
            self._run(database.close)


_JANITOR = _Janitor()


def empty_tables(url: str) -> None:
    """Delete every row of the migrated database at `url`, so a test finds it empty."""
    _JANITOR.empty(url)


STORES = [
    "sqlite",
    pytest.param("postgresql", marks=pytest.mark.postgres),
    pytest.param("mysql", marks=pytest.mark.mysql),
]


# The stores an integration case runs on unless it says otherwise: the embedded one and one
# server. What the store does is the store conformance suite's (tests/store/, on every
# store); the API, the delivery loop, the CLI and the console above it are the same code
# whichever store is below.
SERVED = STORES[:2]
# For an integration case about what a store itself does where the databases differ (how
# MySQL locks, counts rows, classifies its errors, holds extreme values), beyond what the
# conformance suite covers: every store.
ALL_STORES = pytest.mark.parametrize("database_url", STORES, indirect=True)
# For a case whose store reads and writes are those of other cases (a command's usage
# errors, a table's layout): the embedded store only.
EMBEDDED_ONLY = pytest.mark.parametrize("database_url", STORES[:1], indirect=True)


@pytest.fixture(params=SERVED)
def database_url(request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path) -> str:
    """An empty, migrated database of each store (SERVED, or those a case's parametrize
    names); every test gets a clean one."""
    if request.param == "sqlite":
        path = tmp_path / "chronoq.db"
        shutil.copy(sqlite_template, path)
        return f"sqlite:///{path}"
    fixture = {"postgresql": "postgres_url", "mysql": "mysql_url"}[request.param]
    url: str = request.getfixturevalue(fixture)
    empty_tables(url)
    return url


def make_settings(database_url: str, **overrides: Any) -> Settings:
    """Settings for tests: short delays, no auto-migration (the fixtures migrated)."""
    values: dict[str, Any] = {
        "database_url": database_url,
        "auto_migrate": False,
        "worker_enabled": False,
        "poll_interval": 0.05,
        "min_cycle_delay": 0.0,
        # Steps run on a frozen clock (tests.stepping), which nothing is ahead of: the
        # cases of claiming ahead say how far.
        "claim_ahead": 0.0,
        "lease": 5.0,
        "dispatch_timeout": 2.0,
        "retry_base_delay": 0.05,
        "retry_max_delay": 0.2,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """A local webhook receiver that records every request and answers as scripted."""
    async with Receiver() as running:
        yield running
