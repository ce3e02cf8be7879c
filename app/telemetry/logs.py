"""Logging setup: one line per event on stderr, readable text or JSON.

Every line carries the event's own fields (schedule id, occurrence id, attempt, outcome,
...), given as `extra=` by the code that logs: JSON lines as members beside `ts`, `level`,
`logger` and `message`; text lines as `key=value` after the message. No log line carries a
payload, a header value, a secret or a password: code logs ids and kinds of failure, and
URLs only through `redact_url`. Whatever a line quotes anyway (an exception's text) has API
keys, Authorization credentials and the passwords and secret query values of URLs masked.
No line holds a control character a client sent (a path's `%1b` or `%0a`): they are
written as escapes, so a line can neither colour a terminal nor forge another line.

uvicorn's own loggers write through the same handler, without their colours, and its
access log is replaced by Chronoq's (`app.api.access_log`).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Literal

from app.domain.secrets import scrub_credentials
from app.settings.backends import statement_loggers

LogFormat = Literal["text", "json"]

# Attributes every LogRecord has; anything else on a record came from `extra=`. uvicorn
# gives some of its lines a `color_message`, the message with terminal colour codes.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {
    "message",
    "asctime",
    "taskName",
    "color_message",
}

# Control characters (C0, DEL, C1): a terminal acts on some (ESC starts a colour), and a
# line feed would start a forged line. JSON escapes C0 itself; the rest are escaped here.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_C1 = re.compile(r"[\x7f-\x9f]")
# A text field's value is written as it is when it is one plain word, else JSON-quoted.
_PLAIN = re.compile(r"[^\s\"'=\\\x00-\x1f\x7f-\x9f]+")

# uvicorn's loggers: their lines go through Chronoq's handler; `uvicorn.access` is off, as
# Chronoq writes an access line of its own.
_SERVER_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.asgi")
_SERVER_ACCESS_LOGGER = "uvicorn.access"
ACCESS_LOGGER = "app.access"


def fields(record: logging.LogRecord) -> Iterator[tuple[str, object]]:
    """The record's own fields: what the code that logged it gave as `extra=`."""
    for key, value in vars(record).items():
        if key not in _STANDARD and not key.startswith("_"):
            yield key, value


def escape_controls(text: str, pattern: re.Pattern[str] = _CONTROL) -> str:
    """`text` with each control character (C0, DEL, C1; those of `pattern`) written as a
    `\\uXXXX` escape: safe to write to a terminal, and one line."""
    return pattern.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage().rstrip(),
        }
        entry.update(fields(record))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        line = json.dumps(entry, default=str, ensure_ascii=False)
        return escape_controls(line, _C1) if _C1.search(line) else line


def _text_value(value: object) -> str:
    text = str(value)
    if _PLAIN.fullmatch(text):
        return text
    return json.dumps(text, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """`<time> <LEVEL> <logger>: <message> key=value ...`, then the traceback if any; a
    value that is not one plain word is quoted, a field that is None left out."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        line = super().formatMessage(record).rstrip()  # the message ends the format
        extras = " ".join(
            f"{key}={_text_value(value)}" for key, value in fields(record) if value is not None
        )
        if extras:
            line = f"{line} {extras}"
        return escape_controls(line) if _CONTROL.search(line) else line


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


# Set on an exception the app has logged with its traceback (`logged`).
_LOGGED = "_chronoq_logged"


def logged(exc: BaseException) -> None:
    """Mark `exc` as logged with its traceback already: the server, which the app hands it
    on to, does not log it again (`_NotTwice`)."""
    setattr(exc, _LOGGED, True)


class _NotTwice(logging.Filter):
    """Drops a server's line about an exception the app has logged already (uvicorn's
    "Exception in ASGI application", after the app's "unexpected error on GET ..."): one
    traceback per failure."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (record.name.startswith("uvicorn") and getattr(exc, _LOGGED, False))


def adopt_server_loggers() -> None:
    """uvicorn's lines through the root's (Chronoq's) handler at the root's level: run as
    `uvicorn app.main:app`, uvicorn gave its loggers handlers and levels of its own before
    the app started. Its access log stays off (see `app.api.access_log`)."""
    for name in _SERVER_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.setLevel(logging.NOTSET)
        logger.propagate = True
    access = logging.getLogger(_SERVER_ACCESS_LOGGER)
    access.handlers.clear()
    access.propagate = False


def configure(
    level: str = "INFO",
    fmt: LogFormat = "text",
    secrets: Iterable[str] = (),
    *,
    access_log: bool = True,
) -> None:
    """Log to stderr at `level`; `secrets` (API keys) are masked wherever a line holds one;
    without `access_log`, requests are not logged (the `app.access` logger is off)."""
    root = logging.getLogger()
    handler = next((h for h in root.handlers if getattr(h, "_chronoq", False)), None)
    if handler is None:
        handler = logging.StreamHandler()
        handler._chronoq = True  # type: ignore[attr-defined]
        handler.addFilter(_NotTwice())
        root.addHandler(handler)
    inner = JsonFormatter() if fmt == "json" else TextFormatter()
    handler.setFormatter(_Redacting(inner, secrets))
    root.setLevel(level)
    adopt_server_loggers()
    logging.getLogger(ACCESS_LOGGER).setLevel(logging.NOTSET if access_log else logging.CRITICAL)
    logging.getLogger("aiormq").setLevel(max(logging.WARNING, root.level))
    # At DEBUG these log every statement with its parameters: targets' secrets included.
    for name in statement_loggers():
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    logging.getLogger("alembic.runtime.plugins").setLevel(max(logging.WARNING, root.level))
    # Each failed reconnect is an ERROR there; the RabbitMQ sink logs one warning instead.
    logging.getLogger("aiormq.connection").setLevel(logging.CRITICAL)
