"""The database settings of DESIGN section 12: multi-host URLs, the pooler and its direct URL,
pool sizes, schedule retention; each refused, naming the setting, where it cannot work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.process.databases import connections_for, open_database
from app.settings import SettingsError, db_urls, load_settings
from app.store.dialects.pg_listen import PgListener
from app.store.dialects.toolkit import pool_sizes
from app.store.engine.database import Database, redact_url

MULTI = "postgresql://chronoq:s3cret-pw@db1:5432,db2:6432/chronoq?target_session_attrs=read-write"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("CHRONOQ_") or name.upper() == "DATABASE_URL":
            monkeypatch.delenv(name)


def test_defaults() -> None:
    settings = load_settings()
    assert settings.db_pool_size == 20
    assert settings.worker_db_pool_size == 8
    assert settings.db_pooler == "none"
    assert settings.database_direct_url is None
    assert settings.schedule_retention == 30 * 86400
    assert settings.db_transaction_timeout == 15.0


def test_the_settings_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@pooler:6432/chronoq")
    monkeypatch.setenv("CHRONOQ_DB_POOL_SIZE", "6")
    monkeypatch.setenv("CHRONOQ_WORKER_DB_POOL_SIZE", "3")
    monkeypatch.setenv("CHRONOQ_DB_POOLER", "transaction")
    monkeypatch.setenv("CHRONOQ_DATABASE_DIRECT_URL", "postgresql://u@db:5432/chronoq")
    monkeypatch.setenv("CHRONOQ_SCHEDULE_RETENTION", "0")
    monkeypatch.setenv("CHRONOQ_DB_TRANSACTION_TIMEOUT", "2.5")

    settings = load_settings()

    assert (settings.db_pool_size, settings.worker_db_pool_size) == (6, 3)
    assert settings.db_pooler == "transaction"
    assert settings.database_direct_url == "postgresql://u@db:5432/chronoq"
    assert settings.schedule_retention == 0
    assert connections_for(settings, "api") == 6
    assert connections_for(settings, "worker") == 3
    # A replica's pools are bounded in time; a command's (a migration) are not.
    for purpose in ("api", "worker", "starts"):
        assert open_database(settings, purpose).timeout == 2.5
    assert open_database(settings, "command").timeout is None


@pytest.mark.parametrize(
    ("environment", "named"),
    [
        ({"DATABASE_URL": "mysql://root@a:3306,b:3306/chronoq"}, "DATABASE_URL"),
        ({"DATABASE_URL": "mariadb://root@a,b/chronoq"}, "DATABASE_URL"),
        (
            {"DATABASE_URL": "sqlite:///x.db", "CHRONOQ_DB_POOLER": "transaction"},
            "CHRONOQ_DB_POOLER",
        ),
        (
            {"DATABASE_URL": "mysql://root@a/chronoq", "CHRONOQ_DB_POOLER": "transaction"},
            "CHRONOQ_DB_POOLER",
        ),
        ({"DATABASE_URL": "postgresql://a/c", "CHRONOQ_DB_POOLER": "session"}, "CHRONOQ_DB_POOLER"),
        (
            {"DATABASE_URL": "postgresql://a/c", "CHRONOQ_DATABASE_DIRECT_URL": "postgresql://b/c"},
            "CHRONOQ_DATABASE_DIRECT_URL",
        ),
        (
            {
                "DATABASE_URL": "postgresql://a/c",
                "CHRONOQ_DB_POOLER": "transaction",
                "CHRONOQ_DATABASE_DIRECT_URL": "mysql://b/c",
            },
            "CHRONOQ_DATABASE_DIRECT_URL",
        ),
        (
            {
                "DATABASE_URL": "postgresql://a/c",
                "CHRONOQ_DB_POOLER": "transaction",
                "CHRONOQ_DB_SCHEMA": "tenant",
            },
            "CHRONOQ_DB_SCHEMA",
        ),
        ({"DATABASE_URL": "postgresql://a,b/c?target_session_attrs=standby"}, "DATABASE_URL"),
        ({"DATABASE_URL": "postgresql://a,b/c?target_session_attrs=any"}, "DATABASE_URL"),
        ({"CHRONOQ_DB_POOL_SIZE": "0"}, "CHRONOQ_DB_POOL_SIZE"),
        ({"CHRONOQ_WORKER_DB_POOL_SIZE": "0"}, "CHRONOQ_WORKER_DB_POOL_SIZE"),
        ({"CHRONOQ_DB_TRANSACTION_TIMEOUT": "0"}, "CHRONOQ_DB_TRANSACTION_TIMEOUT"),
        ({"CHRONOQ_SCHEDULE_RETENTION": "-1"}, "CHRONOQ_SCHEDULE_RETENTION"),
        ({"CHRONOQ_SCHEDULE_RETENTION": "nan"}, "CHRONOQ_SCHEDULE_RETENTION"),
    ],
)
def test_what_cannot_work_is_refused_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], named: str
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)

    with pytest.raises(SettingsError, match=named):
        load_settings()


def test_a_multi_host_url_is_accepted_for_postgresql(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", MULTI)
    assert load_settings().database_url == MULTI


def test_a_multi_host_url_becomes_every_host_with_its_port_and_a_writable_session() -> None:
    converted = db_urls.for_sqlalchemy("postgresql://u:p@db1,db2:6432,[::1]/chronoq")

    assert converted == (
        "postgresql://u:p@/chronoq?host=db1%3A5432&host=db2%3A6432&host=%5B%3A%3A1%5D%3A5432"
        "&target_session_attrs=read-write"
    )
    assert db_urls.for_sqlalchemy("postgresql://u@db1/chronoq") == "postgresql://u@db1/chronoq"
    asked = db_urls.for_sqlalchemy("postgresql://a,b/c?target_session_attrs=primary")
    assert asked.endswith("target_session_attrs=primary")
    assert asked.count("target_session_attrs") == 1


def test_a_multi_host_url_reaches_every_connection_the_listen_one_included() -> None:
    database = Database(MULTI)
    listener = PgListener(database.url, wakeups=None)  # type: ignore[arg-type]

    assert database.engine.url.query["host"] == ("db1:5432", "db2:6432")
    assert listener._connect_args["host"] == ["db1", "db2"]
    assert listener._connect_args["port"] == [5432, 6432]
    assert listener._connect_args["target_session_attrs"] == "read-write"


def test_a_multi_host_url_is_shown_without_its_password() -> None:
    shown = redact_url(MULTI)
    assert "s3cret-pw" not in shown
    assert shown.startswith("postgresql://chronoq:***@db1:5432,db2:6432/chronoq")
    assert "s3cret-pw" not in redact_url(Database(MULTI).url)


def test_a_pool_opens_at_most_its_size_and_keeps_half_while_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@db/chronoq")
    monkeypatch.setenv("CHRONOQ_DB_POOL_SIZE", "7")
    pool = open_database(load_settings(), "api").engine.pool

    assert pool.size() + pool._max_overflow == 7  # type: ignore[attr-defined]
    assert pool.size() == pool_sizes(7) == 4  # type: ignore[attr-defined]
    assert pool_sizes(1) == 1


def test_pooled_connections_keep_no_prepared_statements_and_know_their_session_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@pooler:6432/chronoq")
    monkeypatch.setenv("CHRONOQ_DB_POOLER", "transaction")
    pooled = open_database(load_settings(), "api")
    assert pooled.pooled
    assert pooled.session_url is None

    monkeypatch.setenv("CHRONOQ_DATABASE_DIRECT_URL", "postgresql://u@db:5432/chronoq")
    with_direct = open_database(load_settings(), "worker")
    assert with_direct.session_url == "postgresql+asyncpg://u@db:5432/chronoq"
    assert not open_database(
        load_settings().model_copy(update={"db_pooler": "none", "database_direct_url": None}), "api"
    ).pooled


def _environment(tmp_path: Path, **values: str) -> dict[str, str]:
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.upper().startswith("CHRONOQ_") and name.upper() != "DATABASE_URL"
    }
    environment.update(values)
    return environment


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"DATABASE_URL": "mysql://root@127.0.0.1:9,127.0.0.1:10/x"}, "DATABASE_URL"),
        (
            {"DATABASE_URL": "sqlite:///x.db", "CHRONOQ_DB_POOLER": "transaction"},
            "CHRONOQ_DB_POOLER",
        ),
    ],
)
def test_serve_and_migrate_refuse_them_with_exit_2(
    tmp_path: Path, values: dict[str, str], named: str
) -> None:
    for command in (["serve", "--host", "127.0.0.1", "--port", "9"], ["migrate"]):
        finished = subprocess.run(
            [sys.executable, "-m", "app.cli.command", *command],
            env=_environment(tmp_path, **values),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert finished.returncode == 2, finished.stderr
        assert named in finished.stderr
        assert "Traceback" not in finished.stderr
