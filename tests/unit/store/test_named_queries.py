"""Named statements: every name loads for each dialect it is written for (a file of its own,
or one every database runs alike), with comments stripped; no file is left unnamed."""

from __future__ import annotations

from importlib import resources

import pytest
import sqlalchemy as sa

from app.store.loop import sql
from app.store.loop.sql import (
    DIALECTS,
    NAMES,
    REST,
    dialects_of,
    file_names,
    queries,
    union_all,
)

EVERY_STATEMENT = [(name, dialect) for name in NAMES for dialect in dialects_of(name)]


def test_there_are_names_and_dialects() -> None:
    assert NAMES
    assert set(DIALECTS) == {"postgresql", "sqlite", "mysql"}


def test_every_name_has_its_files_and_every_file_a_name() -> None:
    files = {entry.name for entry in resources.files(sql).iterdir() if entry.name.endswith(".sql")}

    assert files == file_names()


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


def test_a_shared_statement_is_the_same_text_on_every_database() -> None:
    shared = [name for name, dialects in NAMES.items() if not dialects]

    assert shared
    for name in shared:
        assert len({queries(name, dialect)[0].text for dialect in DIALECTS}) == 1


def test_the_rest_share_one_file_and_the_named_dialects_have_their_own() -> None:
    mixed = {name: dialects for name, dialects in NAMES.items() if REST in dialects}

    assert mixed
    for name, dialects in mixed.items():
        own = [d for d in DIALECTS if d in dialects]
        rest = [d for d in DIALECTS if d not in dialects]
        assert own
        assert rest
        assert len({queries(name, dialect)[0].text for dialect in rest}) == 1
        assert all(queries(name, d) != queries(name, rest[0]) for d in own)


def test_an_unknown_name_does_not_load() -> None:
    with pytest.raises(FileNotFoundError):
        queries("no_such_statement", "sqlite")


def test_a_union_numbers_the_parameters_of_each_part_and_shares_the_rest() -> None:
    statement = union_all(("flow_head", "flow_due_rows"), "sqlite", numbered=("key", "most"))

    assert set(statement._bindparams) == {"key_0", "key_1", "most_1", "now"}
    assert statement.text.count("UNION ALL") == 1
