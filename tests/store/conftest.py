"""One clean, migrated database per test, of every dialect the store speaks.

A new dialect joins the suite by adding its parameter and its fixtures' names here (in
tests/conftest.py: a session fixture naming a migrated database of the run's own, and a
factory of empty databases); the tests themselves do not change.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tests.conftest import empty_tables
from tests.store.ports import Database

DIALECTS = [
    "sqlite",
    pytest.param("postgresql", marks=pytest.mark.postgres),
    pytest.param("mysql", marks=pytest.mark.mysql),
]

# The tests/conftest.py fixtures of each server dialect: a migrated database of the run's
# own (session scope), and a factory of empty databases.
_MIGRATED = {"postgresql": "postgres_url", "mysql": "mysql_url"}
_EMPTY = {"postgresql": "empty_postgres", "mysql": "empty_mysql"}


@pytest.fixture(params=DIALECTS)
def dialect(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def store_url(
    dialect: str, request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path
) -> str:
    """The URL of a migrated database with no schedules and no occurrences."""
    if dialect == "sqlite":
        path = tmp_path / "chronoq.db"
        shutil.copy(sqlite_template, path)
        return f"sqlite:///{path}"
    url: str = request.getfixturevalue(_MIGRATED[dialect])
    empty_tables(url)
    return url


@pytest.fixture
async def database(store_url: str) -> AsyncIterator[Database]:
    database = Database(store_url)
    try:
        yield database
    finally:
        database.clock.reset()  # a case that moved it
        await database.close()


@pytest.fixture
def empty_store(dialect: str, request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], str]:
    """Makes URLs of empty databases (no tables, no migrations) of the dialect."""
    if dialect == "sqlite":
        numbers = itertools.count()
        return lambda: f"sqlite:///{tmp_path / f'empty-{next(numbers)}.db'}"
    make: Callable[[], str] = request.getfixturevalue(_EMPTY[dialect])
    return make
