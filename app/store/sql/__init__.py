"""Named dialect-specific statements, one file per name and dialect, loaded once."""

from __future__ import annotations

from functools import cache
from importlib import resources

import sqlalchemy as sa

NAMES = ("claim",)
DIALECTS = ("postgresql", "sqlite")


@cache
def query(name: str, dialect: str) -> sa.TextClause:
    """The statement `name` written for `dialect` (files `<name>.<dialect>.sql`)."""
    source = resources.files(__package__).joinpath(f"{name}.{dialect}.sql").read_text("utf-8")
    # Comments are for readers; dropping them keeps a ":name" in prose from becoming a parameter.
    lines = [line for line in source.splitlines() if not line.lstrip().startswith("--")]
    return sa.text("\n".join(lines))
