"""Runtime settings, read from the environment once, refused when incoherent.

The grammar of the address settings (CIDR and host lists, the allowed hosts, trusted
proxies, the public origin) is `app.settings.addresses`; `SettingsError` is
`app.settings.errors`, which both raise.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.domain.retry import RetryPolicy
from app.domain.secrets import signing_key
from app.settings.addresses import (
    ANY_HOST,
    LOOPBACK_HOSTS,
    HostAllowList,
    IPNetwork,
    host_allow_list,
    proxy_allow_list,
    public_origin,
    target_list,
)
from app.settings.api_keys import ApiKey, parse_api_key
from app.settings.backends import URL_FORMS, Backend, backend_of
from app.settings.db_urls import WRITABLE_SESSIONS, is_multi_host, session_attrs
from app.settings.errors import SettingsError as SettingsError  # raised to callers
from app.settings.web_origins import WebOrigin, parse_origin

DEFAULT_DATABASE_URL = "sqlite:///./data/chronoq.db"
# The longest `claim_ahead` (seconds): what is claimed ahead waits leased for its instant.
MAX_CLAIM_AHEAD = 5.0

# A schema name that needs no quoting anywhere it appears (search_path, DDL, channel names).
SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class Settings(BaseSettings):
    """Every knob of a replica. Durations are seconds."""

    model_config = SettingsConfigDict(
        env_prefix="CHRONOQ_",
        extra="ignore",
        frozen=True,
        allow_inf_nan=False,
        # A refused value can be an API key or a URL with a password: errors never echo it.
        hide_input_in_errors=True,
    )

    database_url: str = Field(
        default=DEFAULT_DATABASE_URL,
        validation_alias=AliasChoices("DATABASE_URL", "database_url"),
    )
    amqp_url: str | None = Field(
        default=None, validation_alias=AliasChoices("AMQP_URL", "amqp_url")
    )
    # PostgreSQL schema holding this installation's tables (None: the server's search_path),
    # so that independent installations can share one database.
    db_schema: str | None = None
    # Connections each pool of a replica may open (DESIGN section 12): the API's, and the
    # delivery loop's (which also keeps two for its start marks; LISTEN takes one more).
    db_pool_size: int = 20
    worker_db_pool_size: int = 8
    # The longest a transaction of a replica (a request's, a claim, a settle, a prune batch)
    # may take once it has its connection: a connection whose server vanished mid-transaction
    # answers nothing, and without a bound would hold the request (or the loop) until the
    # kernel gives up on it, many minutes later. Getting the connection has bounds of its own.
    db_transaction_timeout: float = 15.0
    # `transaction`: DATABASE_URL reaches PostgreSQL through PgBouncer in transaction mode,
    # so no connection keeps session state; what needs a session (LISTEN, the migration
    # lock) uses CHRONOQ_DATABASE_DIRECT_URL, the same database without the pooler, if set.
    db_pooler: Literal["none", "transaction"] = "none"
    database_direct_url: str | None = None
    poll_interval: float = 1.0
    batch_size: int = 100
    concurrency: int = 64
    lease: float = 30.0
    min_cycle_delay: float = 0.005
    # How far ahead of their instant the loop claims ticks, so that the claim's round trip
    # is not lateness (app/worker/ahead.py); 0 claims only what is due.
    claim_ahead: float = 0.5
    dispatch_timeout: float = 10.0
    retry_base_delay: float = 1.0
    retry_max_delay: float = 300.0
    jitter: bool = True
    max_attempts: int = 5
    worker_enabled: bool = True
    # Where `chronoq serve` runs the delivery loop: `separate`, a process of its own beside
    # the API's (so requests never stand in its way); `shared`, the API's event loop;
    # `auto`, separate where writes wake other processes at once (PostgreSQL's NOTIFY),
    # shared elsewhere. The ASGI app run on its own always shares.
    delivery_process: Literal["auto", "separate", "shared"] = "auto"
    # Set by `chronoq serve` for its API processes, not by hand: the Unix sockets of the
    # replica's delivery processes (comma-separated), whose health /readyz reports and whose
    # metrics /metrics includes; the API process then runs no loop of its own.
    delivery_sockets: str | None = None
    auto_migrate: bool = True
    # A `tenant` label on the series of deliveries, dead letters, what waits and what is
    # held back (a series per tenant: off by default).
    metrics_tenant_label: bool = False
    # How long `chronoq serve` waits for the database to answer before it gives up (0: one
    # try), saying each failed try on one line.
    database_wait: float = Field(default=30.0, ge=0, le=3600)
    max_payload_bytes: int = 262144
    # A request body over this is refused before it is read (Content-Length) or as soon as
    # a chunked body passes it; a body that has not all arrived `request_body_timeout`
    # seconds after its head is refused too (however it trickles), so a slow client cannot
    # hold a worker's memory or a slot.
    max_request_bytes: int = 8 * 1024 * 1024
    request_body_timeout: float = 30.0
    # At most this many requests of one client address (app.api.body_limits) receiving
    # their bodies at once in a process: past it a 429, so one client cannot hold every
    # connection slot with slow bodies.
    max_bodies_per_client: int = 32
    # Client connections (app.api.connections): at most `max_connections` per replica, and
    # one that has not sent a complete request head within `request_head_timeout` seconds
    # is closed, so idle or trickling sockets cannot take the descriptors deliveries need.
    max_connections: int = 1024
    request_head_timeout: float = 5.0
    # Webhook target addresses (DESIGN section 8): CIDRs denied beside the built-in denials;
    # when set, the only CIDRs and host names a webhook may reach. Comma-separated.
    target_deny: str = ""
    target_allow: str | None = None
    # Finished occurrences (delivered, cancelled, skipped) are deleted this long after
    # their last change, up to `retention_batch` per statement, every `retention_interval`.
    retention: float = 604800.0
    retention_batch: int = 500
    retention_interval: float = 60.0
    # The charts' figures (`activity_minutes`) are rolled up from the attempt log this
    # often, by one replica at a time, and kept `activity_retention` seconds.
    activity_interval: float = 10.0
    activity_retention: float = 691200.0
    # Ended schedules (completed, cancelled, failed) are deleted, with their occurrences,
    # attempts and events, this long after they ended; 0 keeps them.
    schedule_retention: float = 2592000.0
    webhook_signing_secret: str | None = None
    # Newest first, comma- or space-separated: each one signs every delivery (rotation).
    webhook_signing_secrets: SecretStr | None = None
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["text", "json"] = "text"
    # One line per HTTP request (app.api.access_log); probes only at DEBUG.
    access_log: bool = True
    # `name:key` or `name:key:read` entries, comma-separated; the file has one a line.
    api_keys: SecretStr | None = None
    api_keys_file: Path | None = None
    # No keys set: `chronoq serve` listens on a non-loopback address only with this.
    allow_unauthenticated: bool = False
    # The Host names requests may name (DESIGN section 8), comma-separated: names, `*.suffix`,
    # IP addresses or CIDRs, or `*`. Unset: the loopback names when no key is set (a website
    # that rebinds its name onto 127.0.0.1 cannot drive an open local instance), else `*`.
    allowed_hosts: str | None = None
    # The address operators open the console at, `https://chronoq.example.com` (scheme, host,
    # optional port, nothing else), when a proxy does not pass the Host the browser used: a
    # change made with HTTP Basic (or with no key set) must come from a page of this origin or
    # of the one the request itself reached. Unset: the request's own origin only.
    public_origin: str | None = None
    # The peers (comma-separated IP addresses or CIDRs, or `*`) whose X-Forwarded-Proto and
    # X-Forwarded-Host are believed when the request's own origin is worked out, as with
    # uvicorn's --forwarded-allow-ips (which `chronoq serve` turns off: the peer the app sees
    # is the proxy). A forwarded host the allowed hosts do not admit is ignored.
    forwarded_allow_ips: str = "127.0.0.1"

    @field_validator("db_schema", "database_direct_url", mode="before")
    @classmethod
    def _unset_when_empty(cls, value: object) -> object:
        # `CHRONOQ_DB_SCHEMA=` (as compose files render an unset variable) means unset.
        return None if value == "" else value

    @field_validator("target_deny", "target_allow", mode="before")
    @classmethod
    def _target_list(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str):
            return value
        env = f"CHRONOQ_{str(info.field_name).upper()}"
        if info.field_name == "target_allow" and value.strip() == "":
            return None  # empty: unset, every address not denied is admitted
        listed = target_list(value, env, names=info.field_name == "target_allow")
        if info.field_name == "target_allow" and not (listed.networks or listed.names):
            raise SettingsError(f"{env} lists nothing; leave it unset to admit every address")
        return value

    def retry_policy(self) -> RetryPolicy:
        """The retry policy of every schedule that sets none of its own."""
        return RetryPolicy(self.retry_base_delay, self.retry_max_delay, self.jitter)

    def target_rules(
        self,
    ) -> tuple[tuple[IPNetwork, ...], tuple[IPNetwork, ...] | None, tuple[str, ...]]:
        """The denied CIDRs, the allowed ones (None: no allow list) and the allowed names."""
        deny = target_list(self.target_deny, "CHRONOQ_TARGET_DENY", names=False).networks
        if self.target_allow is None:
            return deny, None, ()
        allow = target_list(self.target_allow, "CHRONOQ_TARGET_ALLOW", names=True)
        return deny, allow.networks, allow.names

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _host_list(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        if value.strip() == "":
            return None  # as compose files render an unset variable: the default
        host_allow_list(value, "CHRONOQ_ALLOWED_HOSTS")
        return value

    def host_allow_list(self) -> HostAllowList:
        """The Host names this replica answers to."""
        if self.allowed_hosts is None:
            return ANY_HOST if self.api_key_entries() else LOOPBACK_HOSTS
        return host_allow_list(self.allowed_hosts, "CHRONOQ_ALLOWED_HOSTS")

    @field_validator("public_origin", mode="before")
    @classmethod
    def _public_origin(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        if value.strip() == "":
            return None  # as compose files render an unset variable
        return str(public_origin(value, "CHRONOQ_PUBLIC_ORIGIN"))

    def public_web_origin(self) -> WebOrigin | None:
        """CHRONOQ_PUBLIC_ORIGIN, parsed; None when unset."""
        return None if self.public_origin is None else parse_origin(self.public_origin)

    @field_validator("forwarded_allow_ips", mode="before")
    @classmethod
    def _proxy_list(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        if value.strip() == "":
            return "127.0.0.1"  # as compose files render an unset variable: the default
        proxy_allow_list(value, "CHRONOQ_FORWARDED_ALLOW_IPS")
        return value

    def proxy_allow_list(self) -> HostAllowList:
        """The peers whose forwarded headers are believed."""
        return proxy_allow_list(self.forwarded_allow_ips, "CHRONOQ_FORWARDED_ALLOW_IPS")

    @field_validator("api_keys", "api_keys_file", mode="before")
    @classmethod
    def _no_keys_when_empty(cls, value: object) -> object:
        return None if value == "" else value

    def api_key_entries(self) -> tuple[ApiKey, ...]:
        """Every configured key, from CHRONOQ_API_KEYS then CHRONOQ_API_KEYS_FILE; refused
        with a SettingsError naming the variable and the entry, never the key."""
        entries: list[ApiKey] = []
        if self.api_keys is not None:
            for index, text in enumerate(self.api_keys.get_secret_value().split(","), 1):
                entries.append(parse_api_key(text.strip(), f"CHRONOQ_API_KEYS entry {index}"))
        if self.api_keys_file is not None:
            try:
                lines = self.api_keys_file.read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as exc:
                why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
                raise SettingsError(
                    f"CHRONOQ_API_KEYS_FILE: cannot read {self.api_keys_file}: {why}"
                ) from None
            for number, line in enumerate(lines, 1):
                text = line.strip()
                if text and not text.startswith("#"):
                    entries.append(parse_api_key(text, f"CHRONOQ_API_KEYS_FILE line {number}"))
        names = [entry.name for entry in entries]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise SettingsError(
                f"CHRONOQ_API_KEYS: the name {twice[0]!r} is given to more than one key"
            )
        return tuple(entries)

    @property
    def webhook_secrets(self) -> tuple[str, ...]:
        """The signing secrets, newest first: CHRONOQ_WEBHOOK_SIGNING_SECRETS, else the
        single CHRONOQ_WEBHOOK_SIGNING_SECRET; empty when deliveries go unsigned."""
        if self.webhook_signing_secrets is not None:
            listed = self.webhook_signing_secrets.get_secret_value().replace(",", " ").split()
            if listed:
                return tuple(listed)
        return (self.webhook_signing_secret,) if self.webhook_signing_secret else ()

    @model_validator(mode="after")
    def _refuse_incoherent(self) -> Settings:
        positive = {
            "poll_interval": "CHRONOQ_POLL_INTERVAL",
            "lease": "CHRONOQ_LEASE",
            "dispatch_timeout": "CHRONOQ_DISPATCH_TIMEOUT",
            "retry_base_delay": "CHRONOQ_RETRY_BASE_DELAY",
            "retention": "CHRONOQ_RETENTION",
            "retention_interval": "CHRONOQ_RETENTION_INTERVAL",
            "activity_interval": "CHRONOQ_ACTIVITY_INTERVAL",
            "activity_retention": "CHRONOQ_ACTIVITY_RETENTION",
            "request_body_timeout": "CHRONOQ_REQUEST_BODY_TIMEOUT",
            "request_head_timeout": "CHRONOQ_REQUEST_HEAD_TIMEOUT",
            "db_transaction_timeout": "CHRONOQ_DB_TRANSACTION_TIMEOUT",
        }
        for field, env in positive.items():
            if getattr(self, field) <= 0:
                raise SettingsError(f"{env} must be greater than 0")
        at_least_one = {
            "batch_size": "CHRONOQ_BATCH_SIZE",
            "concurrency": "CHRONOQ_CONCURRENCY",
            "max_attempts": "CHRONOQ_MAX_ATTEMPTS",
            "max_payload_bytes": "CHRONOQ_MAX_PAYLOAD_BYTES",
            "max_request_bytes": "CHRONOQ_MAX_REQUEST_BYTES",
            "retention_batch": "CHRONOQ_RETENTION_BATCH",
            "max_connections": "CHRONOQ_MAX_CONNECTIONS",
            "max_bodies_per_client": "CHRONOQ_MAX_BODIES_PER_CLIENT",
            "db_pool_size": "CHRONOQ_DB_POOL_SIZE",
            "worker_db_pool_size": "CHRONOQ_WORKER_DB_POOL_SIZE",
        }
        for field, env in at_least_one.items():
            if getattr(self, field) < 1:
                raise SettingsError(f"{env} must be at least 1")
        if self.schedule_retention < 0:
            raise SettingsError("CHRONOQ_SCHEDULE_RETENTION must not be negative (0 keeps)")
        if self.min_cycle_delay < 0:
            raise SettingsError("CHRONOQ_MIN_CYCLE_DELAY must not be negative")
        if not 0 <= self.claim_ahead <= MAX_CLAIM_AHEAD:
            raise SettingsError(
                f"CHRONOQ_CLAIM_AHEAD must be from 0 to {MAX_CLAIM_AHEAD:g} seconds: what is "
                "claimed ahead holds a lease while it waits for its instant"
            )
        if self.dispatch_timeout >= self.lease:
            raise SettingsError(
                "CHRONOQ_DISPATCH_TIMEOUT must be below CHRONOQ_LEASE, or a slow delivery "
                "would be claimed again while still running"
            )
        if self.retry_max_delay < self.retry_base_delay:
            raise SettingsError(
                "CHRONOQ_RETRY_MAX_DELAY must not be below CHRONOQ_RETRY_BASE_DELAY"
            )
        backend = backend_of(self.database_url)
        if backend is None:
            raise SettingsError(f"DATABASE_URL must be a {URL_FORMS} URL")
        if self.db_schema is not None:
            problem = schema_name_problem(self.db_schema)
            if problem:
                raise SettingsError(f"CHRONOQ_DB_SCHEMA {problem}")
            if not backend.schemas:
                raise SettingsError(
                    f"CHRONOQ_DB_SCHEMA is for PostgreSQL only; DATABASE_URL names {backend.name}"
                )
        self._check_database(backend)
        if self.delivery_process == "separate" and not backend.multi_replica:
            raise SettingsError(
                "CHRONOQ_DELIVERY_PROCESS=separate needs a database that several processes "
                f"can share (PostgreSQL or MySQL/MariaDB); {backend.label} serves one process"
            )
        if self.amqp_url is not None and not self.amqp_url.startswith(("amqp://", "amqps://")):
            raise SettingsError("AMQP_URL must be an amqp:// or amqps:// URL")
        if self.webhook_signing_secret is not None and not signing_key(self.webhook_signing_secret):
            raise SettingsError(
                "CHRONOQ_WEBHOOK_SIGNING_SECRET must be whsec_ followed by a non-empty base64 key"
            )
        self._check_signing_secrets()
        self.api_key_entries()
        return self

    def _check_database(self, backend: Backend) -> None:
        """The failover and pooler settings: PostgreSQL's alone, and coherent."""
        if is_multi_host(self.database_url) and backend.name != "postgresql":
            raise SettingsError(
                f"DATABASE_URL names several hosts: only PostgreSQL takes a multi-host URL, "
                f"it names {backend.label}"
            )
        for url, env in (
            (self.database_url, "DATABASE_URL"),
            (self.database_direct_url, "CHRONOQ_DATABASE_DIRECT_URL"),
        ):
            attrs = session_attrs(url) if url is not None else None
            if attrs is not None and attrs not in WRITABLE_SESSIONS:
                raise SettingsError(
                    f"{env}: target_session_attrs={attrs} may reach a read-only standby; "
                    f"use {' or '.join(WRITABLE_SESSIONS)}"
                )
        if self.db_pooler != "none" and backend.name != "postgresql":
            raise SettingsError(
                f"CHRONOQ_DB_POOLER is for PostgreSQL behind PgBouncer; DATABASE_URL names "
                f"{backend.label}"
            )
        if self.db_pooler != "none" and self.db_schema is not None:
            raise SettingsError(
                "CHRONOQ_DB_SCHEMA cannot be kept on pooled connections (PgBouncer 1.18 does "
                "not carry search_path): with CHRONOQ_DB_POOLER give the installation a "
                "database of its own, or its role a search_path (ALTER ROLE ... SET "
                "search_path), and leave CHRONOQ_DB_SCHEMA unset"
            )
        direct = self.database_direct_url
        if direct is None:
            return
        if self.db_pooler == "none":
            raise SettingsError(
                "CHRONOQ_DATABASE_DIRECT_URL is for CHRONOQ_DB_POOLER=transaction: without a "
                "pooler, DATABASE_URL is direct already"
            )
        direct_backend = backend_of(direct)
        if direct_backend is None or direct_backend.name != "postgresql":
            raise SettingsError("CHRONOQ_DATABASE_DIRECT_URL must be a postgresql:// URL")

    def separate_delivery(self) -> bool:
        """Whether `chronoq serve` runs the delivery loop in a process of its own."""
        if not self.worker_enabled or self.delivery_process == "shared":
            return False
        if self.delivery_process == "separate":
            return True
        backend = backend_of(self.database_url)
        # Through a pooler, other processes hear a write only on a direct LISTEN connection.
        direct = self.db_pooler == "none" or self.database_direct_url is not None
        return backend is not None and backend.notifies and direct

    def _check_signing_secrets(self) -> None:
        # Entries are named by position: an error message never shows a secret.
        if self.webhook_signing_secrets is None:
            return
        listed = self.webhook_signing_secrets.get_secret_value().replace(",", " ").split()
        if listed and self.webhook_signing_secret is not None:
            raise SettingsError(
                "CHRONOQ_WEBHOOK_SIGNING_SECRETS and CHRONOQ_WEBHOOK_SIGNING_SECRET are both "
                "set: list every secret in CHRONOQ_WEBHOOK_SIGNING_SECRETS and unset the other"
            )
        for index, secret in enumerate(listed, 1):
            if not signing_key(secret):
                raise SettingsError(
                    f"CHRONOQ_WEBHOOK_SIGNING_SECRETS entry {index} must be whsec_ followed by "
                    "a non-empty base64 key"
                )
            if secret in listed[: index - 1]:
                raise SettingsError(
                    f"CHRONOQ_WEBHOOK_SIGNING_SECRETS entry {index} repeats an earlier entry"
                )


def schema_name_problem(name: str) -> str | None:
    """Why `name` cannot be a Chronoq schema (None: it can)."""
    if not SCHEMA_NAME.fullmatch(name):
        return (
            f"must be a plain identifier: a lower-case letter or _, then up to 62 "
            f"lower-case letters, digits or _ (got {name!r})"
        )
    if name.startswith("pg_") or name == "information_schema":
        return f"names a PostgreSQL system schema ({name!r})"
    return None


def known_variables() -> frozenset[str]:
    """The environment variables the settings are read from."""
    names: set[str] = set()
    for field, info in Settings.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names.update(str(choice).upper() for choice in alias.choices)
        else:
            names.add(f"CHRONOQ_{field.upper()}")
    return frozenset(names)


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment; pydantic errors become one line naming the variable."""
    from pydantic import ValidationError

    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        cause = first.get("ctx", {}).get("error")
        if isinstance(cause, SettingsError):
            raise cause from None
        field = str(first["loc"][0]) if first["loc"] else "?"
        env = field.upper() if field in {"database_url", "amqp_url"} else f"CHRONOQ_{field.upper()}"
        raise SettingsError(f"{env}: {first['msg']}") from None
