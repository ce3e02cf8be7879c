"""Opaque cursors: base64url of the last item's sort key."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import datetime

from app.domain.errors import InvalidInputError


def encode(*key: str) -> str:
    raw = json.dumps(list(key), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str, size: int) -> list[str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        key = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, TypeError):
        key = None
    if not isinstance(key, list) or len(key) != size or not all(isinstance(k, str) for k in key):
        raise InvalidInputError("cursor is not one this API issued", parameter="cursor")
    return key


def decode_id(cursor: str | None) -> uuid.UUID | None:
    if cursor is None:
        return None
    (value,) = _decode(cursor, 1)
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidInputError("cursor is not one this API issued", parameter="cursor") from None


def decode_instant_id(cursor: str | None) -> tuple[datetime, uuid.UUID] | None:
    if cursor is None:
        return None
    instant, value = _decode(cursor, 2)
    try:
        return datetime.fromisoformat(instant), uuid.UUID(value)
    except ValueError:
        raise InvalidInputError("cursor is not one this API issued", parameter="cursor") from None
