"""Tenant keys (DESIGN section 14): API keys made over the API, each acting in its own
tenant only. A key is 256 random bits, shown once when it is made and stored only as its
SHA-256 (a key of that strength needs no slow hash: no dictionary reaches it); a request
presents the key, and the digest finds its row.

Invariant: a revoked or expired key authorises nothing; a replica may go on accepting a
revoked key for at most `CACHE_SECONDS` (the time its memory of a lookup lasts)."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from app.domain.errors import InvalidInputError

KEY_NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
KEY_NAME_ALPHABET = "1-64 of A-Z a-z 0-9 _ . -"
# What a tenant key starts with, and how much of it a listing shows to tell keys apart.
KEY_MARK = "cq_"
PREFIX_LENGTH = len(KEY_MARK) + 8
# How long a replica keeps what a lookup of a key found (revocations hold within this).
CACHE_SECONDS = 2.0
# `last_used_at` is written at most this often a key (a read must not write every time).
LAST_USED_EVERY_SECONDS = 60.0


class KeyRole(StrEnum):
    WRITE = "write"
    READ = "read"


def check_key_name(name: str) -> str:
    if not KEY_NAME_PATTERN.fullmatch(name):
        raise InvalidInputError(f"a key's name is {KEY_NAME_ALPHABET}", pointer="#/name")
    return name


def new_secret() -> str:
    """A fresh key: the mark, then 32 random bytes in base64url."""
    return KEY_MARK + base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()


def digest_of(secret: str) -> str:
    """What the store keeps of a key: its SHA-256, in hex."""
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()


def actor_of(tenant: str, name: str) -> str:
    """How audit events name a tenant key: its tenant, then its name."""
    return f"{tenant}/{name}"


@dataclass(frozen=True, slots=True)
class TenantKey:
    """A tenant key as stored, without its secret."""

    id: uuid.UUID
    tenant: str
    name: str
    role: KeyRole
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None

    def valid_at(self, now: datetime) -> bool:
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)
