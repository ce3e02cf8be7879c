"""Settings: the documented defaults, the environment, and refusal of incoherent configs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.settings import (
    DEFAULT_DATABASE_URL,
    Settings,
    SettingsError,
    known_variables,
    load_settings,
)
from tests.e2e.processes import free_port

OWN_VARIABLES = ("DATABASE_URL", "AMQP_URL")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees only the variables it sets itself."""
    for name in list(os.environ):
        if name.upper().startswith("CHRONOQ_") or name.upper() in OWN_VARIABLES:
            monkeypatch.delenv(name)


# DESIGN.md section 2, the settings table.
@pytest.mark.parametrize(
    ("field", "default"),
    [
        ("amqp_url", None),
        ("poll_interval", 1.0),
        ("batch_size", 100),
        ("concurrency", 64),
        ("lease", 30.0),
        ("min_cycle_delay", 0.005),
        ("dispatch_timeout", 10.0),
        ("retry_base_delay", 1.0),
        ("retry_max_delay", 300.0),
        ("jitter", True),
        ("max_attempts", 5),
        ("worker_enabled", True),
        ("auto_migrate", True),
        ("max_payload_bytes", 262144),
        ("max_connections", 1024),
        ("request_head_timeout", 5.0),
        ("request_body_timeout", 30.0),
    ],
)
def test_defaults_match_the_design(field: str, default: object) -> None:
    assert getattr(load_settings(), field) == default


def test_the_default_database_is_a_sqlite_file_under_data() -> None:
    url = load_settings().database_url

    assert url == DEFAULT_DATABASE_URL
    assert url.startswith("sqlite:///")
    assert Path(url.removeprefix("sqlite:///")).parent == Path("data")


@pytest.mark.parametrize(
    ("variable", "text", "field", "value"),
    [
        ("CHRONOQ_POLL_INTERVAL", "0.25", "poll_interval", 0.25),
        ("CHRONOQ_BATCH_SIZE", "500", "batch_size", 500),
        ("CHRONOQ_CONCURRENCY", "8", "concurrency", 8),
        ("CHRONOQ_LEASE", "45.5", "lease", 45.5),
        ("CHRONOQ_MIN_CYCLE_DELAY", "0", "min_cycle_delay", 0.0),
        ("CHRONOQ_CLAIM_AHEAD", "0", "claim_ahead", 0.0),
        ("CHRONOQ_DISPATCH_TIMEOUT", "2.5", "dispatch_timeout", 2.5),
        ("CHRONOQ_RETRY_BASE_DELAY", "0.5", "retry_base_delay", 0.5),
        ("CHRONOQ_RETRY_MAX_DELAY", "60", "retry_max_delay", 60.0),
        ("CHRONOQ_JITTER", "false", "jitter", False),
        ("CHRONOQ_MAX_ATTEMPTS", "9", "max_attempts", 9),
        ("CHRONOQ_WORKER_ENABLED", "false", "worker_enabled", False),
        ("CHRONOQ_AUTO_MIGRATE", "0", "auto_migrate", False),
        ("CHRONOQ_MAX_PAYLOAD_BYTES", "1024", "max_payload_bytes", 1024),
        ("CHRONOQ_LOG_LEVEL", "DEBUG", "log_level", "DEBUG"),
        (
            "DATABASE_URL",
            "postgresql://chronoq@127.0.0.1:5432/chronoq",
            "database_url",
            "postgresql://chronoq@127.0.0.1:5432/chronoq",
        ),
        (
            "DATABASE_URL",
            "postgresql+asyncpg://chronoq@127.0.0.1/chronoq",
            "database_url",
            "postgresql+asyncpg://chronoq@127.0.0.1/chronoq",
        ),
        ("DATABASE_URL", "sqlite:////tmp/x.db", "database_url", "sqlite:////tmp/x.db"),
        ("AMQP_URL", "amqp://guest:guest@127.0.0.1/", "amqp_url", "amqp://guest:guest@127.0.0.1/"),
    ],
)
def test_settings_are_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, variable: str, text: str, field: str, value: object
) -> None:
    monkeypatch.setenv(variable, text)

    assert getattr(load_settings(), field) == value


def test_unprefixed_names_of_chronoq_settings_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEASE", "5")
    monkeypatch.setenv("BATCH_SIZE", "7")

    settings = load_settings()

    assert settings.lease == 30.0
    assert settings.batch_size == 100


def test_settings_are_frozen() -> None:
    settings = load_settings()

    with pytest.raises(ValueError, match="frozen"):
        settings.lease = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("environment", "named"),
    [
        ({"CHRONOQ_LEASE": "0"}, "CHRONOQ_LEASE"),
        ({"CHRONOQ_LEASE": "-1"}, "CHRONOQ_LEASE"),
        ({"CHRONOQ_DISPATCH_TIMEOUT": "0"}, "CHRONOQ_DISPATCH_TIMEOUT"),
        ({"CHRONOQ_DISPATCH_TIMEOUT": "30"}, "CHRONOQ_DISPATCH_TIMEOUT"),
        ({"CHRONOQ_DISPATCH_TIMEOUT": "20", "CHRONOQ_LEASE": "15"}, "CHRONOQ_DISPATCH_TIMEOUT"),
        ({"CHRONOQ_POLL_INTERVAL": "0"}, "CHRONOQ_POLL_INTERVAL"),
        ({"CHRONOQ_BATCH_SIZE": "0"}, "CHRONOQ_BATCH_SIZE"),
        ({"CHRONOQ_CONCURRENCY": "0"}, "CHRONOQ_CONCURRENCY"),
        ({"CHRONOQ_MAX_ATTEMPTS": "0"}, "CHRONOQ_MAX_ATTEMPTS"),
        ({"CHRONOQ_MAX_PAYLOAD_BYTES": "0"}, "CHRONOQ_MAX_PAYLOAD_BYTES"),
        ({"CHRONOQ_MIN_CYCLE_DELAY": "-0.1"}, "CHRONOQ_MIN_CYCLE_DELAY"),
        ({"CHRONOQ_CLAIM_AHEAD": "-0.1"}, "CHRONOQ_CLAIM_AHEAD"),
        ({"CHRONOQ_CLAIM_AHEAD": "5.5"}, "CHRONOQ_CLAIM_AHEAD"),
        ({"CHRONOQ_CLAIM_AHEAD": "nan"}, "CHRONOQ_CLAIM_AHEAD"),
        ({"CHRONOQ_RETRY_BASE_DELAY": "0"}, "CHRONOQ_RETRY_BASE_DELAY"),
        ({"CHRONOQ_RETRY_MAX_DELAY": "0.5"}, "CHRONOQ_RETRY_MAX_DELAY"),
        (
            {"CHRONOQ_RETRY_BASE_DELAY": "10", "CHRONOQ_RETRY_MAX_DELAY": "5"},
            "CHRONOQ_RETRY_MAX_DELAY",
        ),
        ({"DATABASE_URL": "oracle://scott@127.0.0.1/chronoq"}, "DATABASE_URL"),
        ({"DATABASE_URL": "/var/lib/chronoq.db"}, "DATABASE_URL"),
        ({"AMQP_URL": "http://127.0.0.1:15672/"}, "AMQP_URL"),
        ({"CHRONOQ_WEBHOOK_SIGNING_SECRET": "c2VjcmV0"}, "CHRONOQ_WEBHOOK_SIGNING_SECRET"),
        ({"CHRONOQ_LEASE": "thirty"}, "CHRONOQ_LEASE"),
        ({"CHRONOQ_BATCH_SIZE": "1.5"}, "CHRONOQ_BATCH_SIZE"),
        ({"CHRONOQ_CONCURRENCY": "many"}, "CHRONOQ_CONCURRENCY"),
        ({"CHRONOQ_JITTER": "sometimes"}, "CHRONOQ_JITTER"),
        ({"CHRONOQ_LOG_LEVEL": "LOUD"}, "CHRONOQ_LOG_LEVEL"),
        ({"CHRONOQ_MAX_CONNECTIONS": "0"}, "CHRONOQ_MAX_CONNECTIONS"),
        ({"CHRONOQ_MAX_CONNECTIONS": "lots"}, "CHRONOQ_MAX_CONNECTIONS"),
        ({"CHRONOQ_REQUEST_HEAD_TIMEOUT": "0"}, "CHRONOQ_REQUEST_HEAD_TIMEOUT"),
        ({"CHRONOQ_REQUEST_BODY_TIMEOUT": "-1"}, "CHRONOQ_REQUEST_BODY_TIMEOUT"),
    ],
)
def test_incoherent_configurations_are_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], named: str
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)

    with pytest.raises(SettingsError, match=named):
        load_settings()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_lease_that_is_not_a_finite_number_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("CHRONOQ_LEASE", value)

    with pytest.raises(SettingsError, match="CHRONOQ_LEASE"):
        load_settings()


@pytest.mark.parametrize(
    "secret",
    [
        "whsec_",  # an empty key: standardwebhooks refuses it, so nobody could verify
        "whsec_not-base64!",
    ],
)
def test_a_signing_secret_without_a_usable_key_is_refused(
    monkeypatch: pytest.MonkeyPatch, secret: str
) -> None:
    monkeypatch.setenv("CHRONOQ_WEBHOOK_SIGNING_SECRET", secret)

    with pytest.raises(SettingsError, match="CHRONOQ_WEBHOOK_SIGNING_SECRET"):
        load_settings()


def test_overrides_are_checked_like_the_environment() -> None:
    with pytest.raises(SettingsError, match="CHRONOQ_LEASE"):
        load_settings(lease=0)


def test_a_settings_error_is_a_value_error_with_one_line() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(batch_size=0)

    assert isinstance(caught.value, ValueError)
    assert "\n" not in str(caught.value)


def test_a_coherent_configuration_is_accepted() -> None:
    settings = load_settings(lease=5.0, dispatch_timeout=4.9, retry_base_delay=2, retry_max_delay=2)

    assert isinstance(settings, Settings)


def _chronoq_command() -> list[str]:
    script = Path(sys.executable).with_name("chronoq")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "app.cli.command"]


def test_serve_refuses_to_start_with_a_zero_lease(tmp_path: Path) -> None:
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.upper().startswith("CHRONOQ_") and name.upper() not in OWN_VARIABLES
    }
    environment["CHRONOQ_LEASE"] = "0"
    environment["DATABASE_URL"] = f"sqlite:///{tmp_path / 'chronoq.db'}"

    finished = subprocess.run(
        [*_chronoq_command(), "serve", "--host", "127.0.0.1", "--port", str(free_port())],
        env=environment,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert finished.returncode == 2, finished.stderr
    assert "CHRONOQ_LEASE" in finished.stderr
    assert "Uvicorn running" not in finished.stderr
    assert not (tmp_path / "chronoq.db").exists()


@pytest.mark.parametrize(
    ("field", "default"),
    [("retention", 604800.0), ("retention_batch", 500), ("retention_interval", 60.0)],
)
def test_retention_defaults_to_a_week_in_batches_of_500_every_minute(
    field: str, default: object
) -> None:
    assert getattr(load_settings(), field) == default


@pytest.mark.parametrize(
    ("variable", "text", "field", "value"),
    [
        ("CHRONOQ_RETENTION", "86400", "retention", 86400.0),
        ("CHRONOQ_RETENTION", "0.5", "retention", 0.5),
        ("CHRONOQ_RETENTION_BATCH", "1", "retention_batch", 1),
        ("CHRONOQ_RETENTION_INTERVAL", "2.5", "retention_interval", 2.5),
    ],
)
def test_retention_settings_are_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, variable: str, text: str, field: str, value: object
) -> None:
    monkeypatch.setenv(variable, text)

    assert getattr(load_settings(), field) == value


@pytest.mark.parametrize(
    ("variable", "text"),
    [
        ("CHRONOQ_RETENTION", "0"),
        ("CHRONOQ_RETENTION", "-3600"),
        ("CHRONOQ_RETENTION", "nan"),
        ("CHRONOQ_RETENTION", "a week"),
        ("CHRONOQ_RETENTION_BATCH", "0"),
        ("CHRONOQ_RETENTION_BATCH", "-1"),
        ("CHRONOQ_RETENTION_BATCH", "2.5"),
        ("CHRONOQ_RETENTION_INTERVAL", "0"),
        ("CHRONOQ_RETENTION_INTERVAL", "-60"),
        ("CHRONOQ_RETENTION_INTERVAL", "inf"),
    ],
)
def test_incoherent_retention_settings_are_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, text: str
) -> None:
    monkeypatch.setenv(variable, text)

    with pytest.raises(SettingsError, match=rf"{variable}\b"):
        load_settings()


PG_URL = "postgresql://chronoq@127.0.0.1:5432/chronoq"


def test_the_database_schema_is_unset_by_default() -> None:
    assert load_settings().db_schema is None


@pytest.mark.parametrize("name", ["alpha", "tenant_2", "_private", "user", "a" * 63])
def test_a_plain_schema_name_is_accepted_with_postgresql(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv("DATABASE_URL", PG_URL)
    monkeypatch.setenv("CHRONOQ_DB_SCHEMA", name)

    assert load_settings().db_schema == name


def test_an_empty_schema_variable_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", PG_URL)
    monkeypatch.setenv("CHRONOQ_DB_SCHEMA", "")

    assert load_settings().db_schema is None


@pytest.mark.parametrize(
    "name",
    [
        "Alpha",  # PostgreSQL would fold it unquoted and keep it quoted: two names for one
        "9lives",
        "with-dash",
        "with space",
        'quo"te',
        "a" * 64,  # PostgreSQL cuts identifiers at 63 bytes
        "pg_chronoq",  # reserved for system schemas
        "information_schema",
    ],
)
def test_a_schema_name_that_is_not_a_plain_identifier_is_refused(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv("DATABASE_URL", PG_URL)
    monkeypatch.setenv("CHRONOQ_DB_SCHEMA", name)

    with pytest.raises(SettingsError, match="CHRONOQ_DB_SCHEMA"):
        load_settings()


def test_a_schema_is_refused_with_sqlite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "sqlite:////tmp/chronoq.db")
    monkeypatch.setenv("CHRONOQ_DB_SCHEMA", "alpha")

    with pytest.raises(SettingsError, match=r"CHRONOQ_DB_SCHEMA.*PostgreSQL only"):
        load_settings()


KEY_ENTRY = "ops:0123456789abcdef-ops"


def test_with_no_key_set_only_the_loopback_names_are_allowed_hosts() -> None:
    allowed = load_settings().host_allow_list()

    for name in ("localhost", "127.0.0.1", "127.8.9.10", "::1"):
        assert allowed.admits(name), name
    for name in ("evil.example", "localhost.evil.example", "0.0.0.0", "10.0.0.1", "::ffff:7f00:1"):
        assert not allowed.admits(name), name


def test_with_keys_set_any_host_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHRONOQ_API_KEYS", KEY_ENTRY)

    assert load_settings().host_allow_list().admits("chronoq.example.com")


@pytest.mark.parametrize("text", ["", "  "])
def test_an_empty_allowed_hosts_variable_means_the_default(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    monkeypatch.setenv("CHRONOQ_ALLOWED_HOSTS", text)

    settings = load_settings()

    assert settings.allowed_hosts is None
    assert not settings.host_allow_list().admits("evil.example")


def test_allowed_hosts_take_names_suffixes_addresses_and_networks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CHRONOQ_API_KEYS", KEY_ENTRY)
    monkeypatch.setenv(
        "CHRONOQ_ALLOWED_HOSTS",
        "Chronoq.Example.com., *.internal.example, 10.0.0.0/8, [::1], fd00::5",
    )

    allowed = load_settings().host_allow_list()

    admitted = ["chronoq.example.com", "a.internal.example", "10.9.8.7", "::1", "fd00::5"]
    refused = ["example.com", "internal.example", "11.0.0.1", "fd00::6", "localhost"]
    assert all(allowed.admits(name) for name in admitted)
    assert not any(allowed.admits(name) for name in refused)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("localhost:8000", "leave the port out"),
        ("[::1]:8000", "leave the port out"),
        ("chronoq example", "not a host name"),
        ("10.0.0.1/8", "not a host name"),
        ("https://chronoq.example.com", "not a host name"),
        (",", "lists nothing"),
    ],
)
def test_an_allowed_host_that_is_none_of_the_forms_is_refused(
    monkeypatch: pytest.MonkeyPatch, text: str, says: str
) -> None:
    monkeypatch.setenv("CHRONOQ_ALLOWED_HOSTS", text)

    with pytest.raises(SettingsError, match=f"CHRONOQ_ALLOWED_HOSTS.*{says}"):
        load_settings()


@pytest.mark.parametrize(
    ("url", "environment", "separate"),
    [
        # auto: a process of its own where writes wake it at once (NOTIFY).
        ("postgresql://chronoq@127.0.0.1/chronoq", {}, True),
        ("mysql://root@127.0.0.1/chronoq", {}, False),
        ("sqlite:////tmp/x.db", {}, False),
        ("postgresql://chronoq@127.0.0.1/chronoq", {"CHRONOQ_DELIVERY_PROCESS": "shared"}, False),
        ("mysql://root@127.0.0.1/chronoq", {"CHRONOQ_DELIVERY_PROCESS": "separate"}, True),
        # An API-only replica has no loop to place.
        ("postgresql://chronoq@127.0.0.1/chronoq", {"CHRONOQ_WORKER_ENABLED": "false"}, False),
    ],
)
def test_where_serve_runs_the_delivery_loop(
    monkeypatch: pytest.MonkeyPatch, url: str, environment: dict[str, str], separate: bool
) -> None:
    monkeypatch.setenv("DATABASE_URL", url)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)

    assert load_settings().separate_delivery() is separate


def test_a_separate_delivery_process_on_sqlite_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "sqlite:////tmp/x.db")
    monkeypatch.setenv("CHRONOQ_DELIVERY_PROCESS", "separate")

    with pytest.raises(SettingsError, match=r"CHRONOQ_DELIVERY_PROCESS=separate .* SQLite"):
        load_settings()


def test_an_unknown_delivery_process_placement_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHRONOQ_DELIVERY_PROCESS", "thread")

    with pytest.raises(SettingsError, match="CHRONOQ_DELIVERY_PROCESS"):
        load_settings()


def test_the_public_origin_is_unset_by_default_and_written_as_an_origin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_settings().public_web_origin() is None
    monkeypatch.setenv("CHRONOQ_PUBLIC_ORIGIN", "")
    assert load_settings().public_origin is None
    for text, written in [
        ("https://Chronoq.Example.com", "https://chronoq.example.com"),
        ("https://chronoq.example.com:443/", "https://chronoq.example.com"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://[::1]:8080", "http://[::1]:8080"),
    ]:
        monkeypatch.setenv("CHRONOQ_PUBLIC_ORIGIN", text)
        assert load_settings().public_origin == written, text


@pytest.mark.parametrize(
    "text",
    [
        "chronoq.example.com",
        "ftp://chronoq.example.com",
        "https://chronoq.example.com/ui",
        "https://chronoq.example.com?x=1",
        "https://ops@chronoq.example.com",
        "https://*.example.com",
        "https://chronoq example.com",
        "https://chronoq.example.com:0",
        "https://chronoq.example.com:70000",
        "https://",
    ],
)
def test_a_public_origin_that_is_not_one_refuses_start(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    monkeypatch.setenv("CHRONOQ_PUBLIC_ORIGIN", text)

    with pytest.raises(SettingsError, match=r"^CHRONOQ_PUBLIC_ORIGIN: "):
        load_settings()


def test_forwarded_headers_are_believed_from_the_loopback_proxy_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trusted = load_settings().proxy_allow_list()
    assert trusted.admits("127.0.0.1")
    assert not trusted.admits("127.0.0.2")
    monkeypatch.setenv("CHRONOQ_FORWARDED_ALLOW_IPS", "")
    assert load_settings().forwarded_allow_ips == "127.0.0.1"
    monkeypatch.setenv("CHRONOQ_FORWARDED_ALLOW_IPS", "10.0.0.0/8, fd00::1")
    listed = load_settings().proxy_allow_list()
    assert listed.admits("10.1.2.3")
    assert listed.admits("fd00::1")
    assert not listed.admits("127.0.0.1")
    monkeypatch.setenv("CHRONOQ_FORWARDED_ALLOW_IPS", "*")
    assert load_settings().proxy_allow_list().admits("203.0.113.9")


@pytest.mark.parametrize("text", ["proxy.internal", "10.0.0.1/8", "*, 10.0.0.1", ","])
def test_a_forwarded_allow_list_that_is_not_addresses_refuses_start(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    monkeypatch.setenv("CHRONOQ_FORWARDED_ALLOW_IPS", text)

    with pytest.raises(SettingsError, match=r"^CHRONOQ_FORWARDED_ALLOW_IPS"):
        load_settings()


def test_the_proxy_settings_are_known_and_a_misspelling_names_them() -> None:
    from app.process.startup import unknown_variables

    assert {"CHRONOQ_PUBLIC_ORIGIN", "CHRONOQ_FORWARDED_ALLOW_IPS"} <= known_variables()
    lines = unknown_variables(
        {
            "CHRONOQ_PUBLIC_ORIGIN": "https://a.example",
            "CHRONOQ_PUBLIC_ORGIN": "https://a.example",
            "CHRONOQ_FORWARDED_ALLOWED_IPS": "*",
        }
    )
    assert lines == [
        "CHRONOQ_FORWARDED_ALLOWED_IPS is not a setting and is ignored: did you mean "
        "CHRONOQ_FORWARDED_ALLOW_IPS?",
        "CHRONOQ_PUBLIC_ORGIN is not a setting and is ignored: did you mean CHRONOQ_PUBLIC_ORIGIN?",
    ]
