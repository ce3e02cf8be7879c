"""The CLI cases' empty PostgreSQL databases: new ones for each case, as tests/conftest.py
makes them, but dropped all together when the module's cases are done rather than after each
case. DROP DATABASE makes the server take a checkpoint, which writes out every page the rest
of the suite has changed since the last one: in a run of the whole suite a second or more
each; back to back, the later ones find next to nothing left to write."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

import tests.conftest as shared


@pytest.fixture(scope="module")
def _databases_to_drop() -> Iterator[list[str]]:
    names: list[str] = []
    try:
        yield names
    finally:
        for name in names:
            shared._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def empty_postgres(_databases_to_drop: list[str]) -> Callable[[], str]:
    """Makes empty databases (no tables, no migrations), dropped after the module's cases."""

    def make() -> str:
        # The run's id at call time: pytest_configure sets it after tests.conftest is imported.
        name = f"chronoq_empty_{shared.RUN_ID}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        try:
            shared._admin(f'CREATE DATABASE "{name}"')
        except Exception as exc:
            shared.service_missing("PostgreSQL", exc)
        _databases_to_drop.append(name)
        return shared._url_of(name)

    return make
