"""The CLI cases' empty PostgreSQL databases: new ones for each case, as tests/conftest.py
makes them, but dropped all together on one connection when the module's cases are done,
rather than after each case on a connection of its own. Each DROP DATABASE makes the server
take a checkpoint, and each new admin connection costs more than the statement it runs."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import asyncpg
import pytest

import tests.conftest as shared


def _admin(*statements: str) -> None:
    """Run `statements` one after another on one connection to the PostgreSQL server."""

    async def run() -> None:
        connection = await asyncpg.connect(shared.PG_ADMIN_URL)
        try:
            for statement in statements:
                await connection.execute(statement)
        finally:
            await connection.close()

    shared.run_sync(run)


@pytest.fixture(scope="module")
def _databases_to_drop() -> Iterator[list[str]]:
    names: list[str] = []
    try:
        yield names
    finally:
        if names:
            _admin(*(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)' for name in names))


@pytest.fixture
def empty_postgres(_databases_to_drop: list[str]) -> Callable[[], str]:
    """Makes empty databases (no tables, no migrations), dropped after the module's cases."""

    def make() -> str:
        # The run's id at call time: pytest_configure sets it after tests.conftest is imported.
        name = f"chronoq_empty_{shared.RUN_ID}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        try:
            _admin(f'CREATE DATABASE "{name}"')
        except Exception as exc:
            shared.service_missing("PostgreSQL", exc)
        _databases_to_drop.append(name)
        return shared._url_of(name)

    return make
