"""Logging setup: one line per event on stderr, readable text or JSON.

JSON lines carry `ts`, `level`, `logger`, `message` and the event's own fields (schedule
id, occurrence id, attempt, outcome, ...), given as `extra=` by the code that logs. No log
line carries a payload, a header value, a secret or a password: code logs ids and kinds of
failure, and URLs only through `redact_url`.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Literal

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


def configure(level: str = "INFO", fmt: LogFormat = "text") -> None:
    root = logging.getLogger()
    handler = next((h for h in root.handlers if getattr(h, "_chronoq", False)), None)
    if handler is None:
        handler = logging.StreamHandler()
        handler._chronoq = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.setLevel(level)
    logging.getLogger("aiormq").setLevel(max(logging.WARNING, root.level))
    logging.getLogger("alembic.runtime.plugins").setLevel(max(logging.WARNING, root.level))
    # Each failed reconnect is an ERROR there; the RabbitMQ sink logs one warning instead.
    logging.getLogger("aiormq.connection").setLevel(logging.CRITICAL)
