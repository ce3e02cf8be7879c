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
from app.domain.filters import ScheduleAfter, ScheduleSort
from app.domain.flow import KEY_PATTERN
from app.domain.ids import format_instant
from app.domain.tenants import TENANT_PATTERN

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


def decode_tenant(cursor: str | None) -> str | None:
    """A tenant's id: only one in the tenants' grammar was issued."""
    if cursor is None:
        return None
    (value,) = _decode(cursor, 1)
    if not TENANT_PATTERN.fullmatch(value):
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
        return _instant(instant), uuid.UUID(value)
    except (ValueError, OverflowError):
        raise _refused() from None


def _instant(text: str) -> datetime:
    at = datetime.fromisoformat(text)
    # Issued cursors carry UTC instants: a naive one was not issued here, and one whose
    # offset takes it past datetime's range (year 1 at +14:00) cannot be.
    if at.utcoffset() is None:
        raise ValueError("naive instant")
    return at.astimezone(UTC)


def schedule_key(after: ScheduleAfter) -> tuple[str, ...]:
    """The key a cursor of schedules carries when a page ends at `after`: newest-first
    cursors hold the id alone, as they always did; the other sorts' name their sort first,
    so that one is never read as another's."""
    if after.sort is ScheduleSort.NEXT_FIRE_AT:
        at = "" if after.next_fire_at is None else format_instant(after.next_fire_at)
        return after.sort.value, at, str(after.id)
    if after.sort is ScheduleSort.FAILURES:
        return after.sort.value, str(after.failures), str(after.id)
    return (str(after.id),)


def decode_schedule(cursor: str | None, sort: ScheduleSort) -> ScheduleAfter | None:
    """Where the page before ended, under `sort`: a cursor issued under another sort (or
    by no sort at all) is refused, naming `cursor`."""
    if cursor is None:
        return None
    if sort is ScheduleSort.CREATED:
        id_ = decode_id(cursor)
        assert id_ is not None
        return ScheduleAfter(sort, id_)
    issued_for, value, id_text = _decode(cursor, 3)
    if issued_for != sort.value:
        raise _refused()
    try:
        id_ = uuid.UUID(id_text)
        if sort is ScheduleSort.NEXT_FIRE_AT:
            at = None if value == "" else _instant(value)
            return ScheduleAfter(sort, id_, next_fire_at=at)
        if not value.isascii() or not value.isdigit() or len(value) > 10:
            raise ValueError("not a count")
        return ScheduleAfter(sort, id_, failures=int(value))
    except (ValueError, OverflowError):
        raise _refused() from None
