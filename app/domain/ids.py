"""Identifiers: UUIDv7 for schedules (time ordered), UUIDv5 for occurrences (stable per firing)."""

from __future__ import annotations

import itertools
import random
import uuid
from datetime import UTC, datetime, timedelta
from hashlib import sha1

# Fixed forever: changing it would change every occurrence id consumers dedupe on.
OCCURRENCE_NAMESPACE = uuid.UUID("5b0c2f6e-8d1a-4f3e-9c41-2d8f0a7b6e13")
_NAMESPACE_BYTES = OCCURRENCE_NAMESPACE.bytes
# A UUIDv5 is the first 128 bits of SHA-1(namespace + name) with its version (5) and
# variant (RFC 4122) bits set: these clear and set them (RFC 9562 section 5.5).
_VERSION_AND_VARIANT = (0xF000 << 64) | (0xC000 << 48)
_UUID5_BITS = (0x5000 << 64) | (0x8000 << 48)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)


def uuid7(now: datetime, random_bits: int) -> uuid.UUID:
    """A UUIDv7 from a wall-clock instant and 74 random bits (RFC 9562 section 5.7)."""
    # Exact integer milliseconds: a float timestamp can round two instants a millisecond
    # apart onto the same value and break the time order.
    millis = ((now - _EPOCH) // _MILLISECOND) & ((1 << 48) - 1)
    rand_a = (random_bits >> 62) & 0xFFF
    rand_b = random_bits & ((1 << 62) - 1)
    value = (millis << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    return uuid.UUID(int=value)


# An event id's random part: 32 bits of sequence, then 42 random ones (74 bits, what a
# UUIDv7 holds).
_SEQUENCE = itertools.count(random.SystemRandom().getrandbits(31))
_RANDOM = random.SystemRandom()


def event_id(at: datetime) -> uuid.UUID:
    """A UUIDv7 for an audit event at `at`, after every other this process made at `at`:
    the events one transaction writes at one instant read back in the order written."""
    sequence = next(_SEQUENCE) & 0xFFFFFFFF
    return uuid7(at, (sequence << 42) | _RANDOM.getrandbits(42))


def format_instant(instant: datetime) -> str:
    """RFC 3339 in UTC with microseconds, the canonical text of a fire instant."""
    # Same text as strftime("%Y-%m-%dT%H:%M:%S.%fZ"), at a fraction of the cost; an
    # instant already in UTC (every one the store reads) is not converted again.
    if instant.tzinfo is not UTC:
        instant = instant.astimezone(UTC)
    return instant.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def occurrence_id(schedule_id: uuid.UUID, fire_at: datetime) -> uuid.UUID:
    """The id of the firing of `schedule_id` at `fire_at`: the same inputs give the same id.

    `uuid.uuid5(OCCURRENCE_NAMESPACE, "<schedule id>/<format_instant(fire_at)>")`, computed
    without its per-call checks: a batch create and every recurring claim make one a row."""
    name = f"{schedule_id}/{format_instant(fire_at)}".encode()
    digest = int.from_bytes(sha1(_NAMESPACE_BYTES + name, usedforsecurity=False).digest()[:16])
    return uuid.UUID(int=digest & ~_VERSION_AND_VARIANT | _UUID5_BITS)


def gap_entry_id(schedule_id: uuid.UUID, jump_at: datetime) -> uuid.UUID:
    """The id of the record that wall times of `schedule_id` fell into the DST gap at
    `jump_at` (never the id of a firing: `jump_at` may be a real tick as well)."""
    return uuid.uuid5(OCCURRENCE_NAMESPACE, f"{schedule_id}/{format_instant(jump_at)}/dst_gap")
