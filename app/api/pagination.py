"""Opaque cursors: base64url of the last item's sort key.

A cursor comes back from the client, so it is input like any other: anything but a key this
API could have issued (a tampered, truncated or oversized one) is a 422 naming `cursor`.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from datetime import UTC, datetime

from app.domain.errors import InvalidInputError
from app.domain.flow import KEY_PATTERN

# An issued cursor is under 100 characters (an instant and a UUID); this leaves room and
# keeps the decoder away from anything large or deeply nested.
MAX_CURSOR_LENGTH = 256


def encode(*key: str) -> str:
    raw = json.dumps(list(key), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _refused() -> InvalidInputError:
    return InvalidInputError("cursor is not one this API issued", parameter="cursor")


def _decode(cursor: str, size: int) -> list[str]:
    if len(cursor) > MAX_CURSOR_LENGTH:
        raise _refused()
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        key = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, TypeError, RecursionError, binascii.Error):
        key = None
    if not isinstance(key, list) or len(key) != size or not all(isinstance(k, str) for k in key):
        raise _refused()
    return key


def decode_key(cursor: str | None) -> str | None:
    """A flow key's name: only one in the keys' alphabet was issued."""
    if cursor is None:
        return None
    (value,) = _decode(cursor, 1)
    if not KEY_PATTERN.fullmatch(value):
        raise _refused()
    return value


def decode_id(cursor: str | None) -> uuid.UUID | None:
    if cursor is None:
        return None
    (value,) = _decode(cursor, 1)
    try:
        return uuid.UUID(value)
    except ValueError:
        raise _refused() from None


def decode_instant_id(cursor: str | None) -> tuple[datetime, uuid.UUID] | None:
    if cursor is None:
        return None
    instant, value = _decode(cursor, 2)
    try:
        at, id_ = datetime.fromisoformat(instant), uuid.UUID(value)
        # Issued cursors carry UTC instants: a naive one was not issued here, and one
        # whose offset takes it past datetime's range (year 1 at +14:00) cannot be.
        if at.utcoffset() is None:
            raise ValueError("naive instant")
        return at.astimezone(UTC), id_
    except (ValueError, OverflowError):
        raise _refused() from None
