"""Logging setup: one line per event on stderr, readable text or JSON.

JSON lines carry `ts`, `level`, `logger`, `message` and the event's own fields (schedule
id, occurrence id, attempt, outcome, ...), given as `extra=` by the code that logs. No log
line carries a payload, a header value, a secret or a password: code logs ids and kinds of
failure, and URLs only through `redact_url`. Whatever a line quotes anyway (an exception's
text) has API keys, Authorization credentials and the passwords and secret query values of
URLs masked.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Literal

from app.backends import statement_loggers
from app.domain.secrets import scrub_credentials

LogFormat = Literal["text", "json"]

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


# The credentials of an Authorization header, wherever a line would quote one.
_AUTHORIZATION = re.compile(
    r"""(?i)(authorization['"]?\s*[:=,]\s*(?:b?['"])?\s*(?:(?:bearer|basic)\s+)?)[^\s'",;)\]}]+"""
)


class _Redacting(logging.Formatter):
    """Formats with another formatter, then masks API keys, Authorization credentials and
    URL credentials, so that no line (an exception's text included) can print one."""

    def __init__(self, inner: logging.Formatter, secrets: Iterable[str]) -> None:
        super().__init__()
        self._inner = inner
        self._secrets = sorted(set(secrets), key=len, reverse=True)

    def format(self, record: logging.LogRecord) -> str:
        text = self._inner.format(record)
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return scrub_credentials(_AUTHORIZATION.sub(r"\1[redacted]", text))


def configure(level: str = "INFO", fmt: LogFormat = "text", secrets: Iterable[str] = ()) -> None:
    """Log to stderr at `level`; `secrets` (API keys) are masked wherever a line holds one."""
    root = logging.getLogger()
    handler = next((h for h in root.handlers if getattr(h, "_chronoq", False)), None)
    if handler is None:
        handler = logging.StreamHandler()
        handler._chronoq = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    inner = (
        JsonFormatter()
        if fmt == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    handler.setFormatter(_Redacting(inner, secrets))
    root.setLevel(level)
    logging.getLogger("aiormq").setLevel(max(logging.WARNING, root.level))
    # At DEBUG these log every statement with its parameters: targets' secrets included.
    for name in statement_loggers():
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    logging.getLogger("alembic.runtime.plugins").setLevel(max(logging.WARNING, root.level))
    # Each failed reconnect is an ERROR there; the RabbitMQ sink logs one warning instead.
    logging.getLogger("aiormq.connection").setLevel(logging.CRITICAL)
