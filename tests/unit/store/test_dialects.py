"""The dialect registry: a URL names its dialect, chosen once; anything else is refused."""

from __future__ import annotations

import pytest

from app.settings import backends
from app.store import dialects
from app.store.engine.database import Database


def database_backend(url: str) -> str | None:
    backend = backends.backend_of(url)
    return None if backend is None else backend.name


def test_each_backend_is_served_by_its_own_dialect() -> None:
    for backend in backends.BACKENDS:
        assert dialects.named(backend.name).backend is backend
        for scheme in backend.schemes:
            assert dialects.backend_of(f"{scheme}://h/db") == backend.name


@pytest.mark.parametrize("name", dialects.NAMES)
def test_every_dialect_loads_under_its_own_name(name: str) -> None:
    assert dialects.named(name).name == name


@pytest.mark.parametrize(
    ("url", "dialect", "normalized"),
    [
        ("postgresql://u@h/db", "postgresql", "postgresql+asyncpg://u@h/db"),
        ("postgres://u@h/db", "postgresql", "postgresql+asyncpg://u@h/db"),
        ("sqlite:///./data/x.db", "sqlite", "sqlite+aiosqlite:///./data/x.db"),
        ("mysql://u:p@h:3306/db", "mysql", "mysql+asyncmy://u:p@h:3306/db"),
        ("mariadb://u@h/db", "mysql", "mysql+asyncmy://u@h/db"),
        ("mysql+aiomysql://u@h/db", "mysql", "mysql+aiomysql://u@h/db"),
        ("mariadb+aiomysql://u@h/db", "mysql", "mysql+aiomysql://u@h/db"),
    ],
)
def test_a_url_names_its_dialect_and_driver(url: str, dialect: str, normalized: str) -> None:
    chosen = dialects.for_url(url)

    assert chosen.name == dialect
    assert database_backend(url) == dialect
    assert chosen.normalize_url(url) == normalized


@pytest.mark.parametrize(
    "url", ["oracle://scott@h/db", "mssql+pyodbc://h/db", "/var/lib/chronoq.db", "", "mysql"]
)
def test_any_other_database_is_refused_at_start(url: str) -> None:
    assert database_backend(url) is None
    with pytest.raises(ValueError, match="unsupported database"):
        Database(url)


def test_a_schema_is_refused_where_the_dialect_has_none() -> None:
    with pytest.raises(ValueError, match="PostgreSQL only"):
        Database("mysql://root@127.0.0.1/chronoq", schema="alpha")
