"""Column types that mean the same on every database: a UUID, an instant in UTC with
microseconds, JSON, a payload kept as written, a double. Each spells its value the way its
database stores it (SQLAlchemy variants and type decorators); the tables use only these.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

# UUIDs as 32 hex characters on MySQL and MariaDB alike (MariaDB's own UUID type would make
# the schema depend on the server's version); native elsewhere.
UUID = sa.Uuid().with_variant(sa.Uuid(native_uuid=False), "mysql", "mariadb")

# Text beyond MySQL's TEXT (64 KiB): a callback's body holds a whole payload.
LONG_TEXT = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")

# Databases whose instant type holds no offset: they store naive UTC.
_NAIVE_INSTANTS = frozenset({"sqlite", "mysql", "mariadb"})
# An instant with microseconds on MySQL (DATETIME alone drops them); elsewhere as it was.
INSTANT = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


class UTCDateTime(sa.TypeDecorator[datetime]):
    """Timezone-aware UTC instants on every dialect (SQLite and MySQL store naive UTC)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(sa.DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name in _NAIVE_INSTANTS else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class JSONText(sa.TypeDecorator[Any]):
    """JSON kept as the text written, on a database whose JSON type would rewrite it
    (MySQL's reorders keys and spaces them out): a payload is sent byte for byte."""

    impl = mysql.LONGTEXT()
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str:
        return _dumps(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        return None if value is None else json.loads(value)


class JSONBytes(sa.TypeDecorator[Any]):
    """JSON as the UTF-8 bytes of its text, on SQLite. A column declared JSON has NUMERIC
    affinity there, which stores any text that reads as a number (`1.0`, `1e2`, a 30-digit
    integer) as that number: a bare-number payload would read back rewritten, and not as
    text at all. SQLite keeps a BLOB as it is given. The declared type stays JSON, as the
    migrations create it; `CAST(payload AS TEXT)` reads either kind of row as its text."""

    impl = sa.JSON
    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> Any:
        def process(value: Any) -> bytes:
            return _dumps(value).encode()

        return process

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        def process(value: Any) -> Any:
            if isinstance(value, str | bytes):
                return json.loads(value)
            return value  # None, or a number a row stored before this type rewrote

        return process


JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
# The payload: plain JSON, not JSONB, as text on MySQL and as bytes on SQLite: stored as
# written, sent as stored.
PAYLOAD = sa.JSON().with_variant(JSONText(), "mysql", "mariadb").with_variant(JSONBytes(), "sqlite")
# A double everywhere: MySQL's FLOAT is single precision.
DOUBLE = sa.Float().with_variant(mysql.DOUBLE(asdecimal=False), "mysql", "mariadb")
