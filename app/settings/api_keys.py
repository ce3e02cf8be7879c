"""API keys as the settings configure them: `name:key` or `name:key:read`."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from app.settings.errors import SettingsError

# An API key's name (what is recorded as `created_by`) and the key itself (never recorded).
API_KEY_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
API_KEY = re.compile(r"[!-~]{16,}")  # printable, no space; `:` and `,` are refused apart


@dataclass(frozen=True)
class ApiKey:
    """One configured API key: its name is what is recorded, the key never is."""

    name: str
    key: str = dataclasses.field(repr=False)
    read_only: bool = False


def parse_api_key(entry: str, where: str) -> ApiKey:
    """`name:key` or `name:key:read`; a SettingsError names `where`, never the key."""
    parts = entry.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "read"):
        raise SettingsError(f"{where}: expected name:key or name:key:read")
    name, key = parts[0], parts[1]
    if not API_KEY_NAME.fullmatch(name):
        raise SettingsError(f"{where}: the name must be 1 to 64 of A-Z a-z 0-9 _ . -")
    if not API_KEY.fullmatch(key):
        raise SettingsError(
            f"{where}: the key must be at least 16 printable characters, "
            "with no ':', ',' or whitespace"
        )
    return ApiKey(name=name, key=key, read_only=len(parts) == 3)
