"""Named dialect-specific statements: every name exists for every dialect, comments stripped."""

from __future__ import annotations

from importlib import resources

import pytest
import sqlalchemy as sa

from app.store.loop import sql
from app.store.loop.sql import DIALECTS, NAMES, queries

EVERY_STATEMENT = [(name, dialect) for name in NAMES for dialect in DIALECTS]


def test_there_are_names_and_dialects() -> None:
    assert NAMES
    assert set(DIALECTS) == {"postgresql", "sqlite", "mysql"}


@pytest.mark.parametrize(("name", "dialect"), EVERY_STATEMENT)
def test_every_name_has_a_file_for_every_dialect(name: str, dialect: str) -> None:
    assert resources.files(sql).joinpath(f"{name}.{dialect}.sql").is_file()


@pytest.mark.parametrize(("name", "dialect"), EVERY_STATEMENT)
def test_every_statement_loads_as_sql_text(name: str, dialect: str) -> None:
    statements = queries(name, dialect)

    assert statements
    for statement in statements:
        assert isinstance(statement, sa.TextClause)
        assert statement.text.strip()
        assert not statement.text.rstrip().endswith(";")


@pytest.mark.parametrize(("name", "dialect"), EVERY_STATEMENT)
def test_no_loaded_statement_keeps_a_comment_line(name: str, dialect: str) -> None:
    lines = [line for s in queries(name, dialect) for line in s.text.splitlines()]

    assert not [line for line in lines if line.lstrip().startswith("--")]


def test_every_sql_file_is_a_known_name_and_dialect() -> None:
    files = {entry.name for entry in resources.files(sql).iterdir() if entry.name.endswith(".sql")}

    assert files == {f"{name}.{dialect}.sql" for name, dialect in EVERY_STATEMENT}


def test_an_unknown_name_does_not_load() -> None:
    with pytest.raises(FileNotFoundError):
        queries("no_such_statement", "sqlite")
