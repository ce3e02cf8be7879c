"""Named dialect-specific statements, one file per name and dialect, loaded once.

A file holds one statement, or several separated by a `;` at the end of a line, run in
order by the dialect that needs more than one (MySQL's claim has no UPDATE ... RETURNING).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

import sqlalchemy as sa

NAMES = ("claim", "flow_due")
DIALECTS = ("postgresql", "sqlite", "mysql")

_END = re.compile(r";[ \t]*$", re.MULTILINE)


# The claim's files select unkeyed rows; the claim of keyed rows is the same statements
# over the rows the keyed claim chose, by id, as each key's limits allow
# (app/store/flow_claims.py). Every other condition of a claim still holds for them.
UNKEYED_ROWS = "o.flow_key IS NULL"
KEYED_ROWS = "o.occurrence_id IN :ids"


@cache
def queries(name: str, dialect: str, *, keyed: bool = False) -> tuple[sa.TextClause, ...]:
    """The statements of `name` written for `dialect` (file `<name>.<dialect>.sql`); with
    `keyed`, over the occurrences bound as `ids` instead of unkeyed ones (UNKEYED_ROWS, said
    once)."""
    source = resources.files(__package__).joinpath(f"{name}.{dialect}.sql").read_text("utf-8")
    if keyed:
        if source.count(UNKEYED_ROWS) != 1:
            raise ValueError(f"{name}.{dialect}.sql must say {UNKEYED_ROWS!r} exactly once")
        source = source.replace(UNKEYED_ROWS, KEYED_ROWS)
    # Comments are for readers; dropping them keeps a ":name" in prose from becoming a parameter.
    lines = [line for line in source.splitlines() if not line.lstrip().startswith("--")]
    parts = [part.strip() for part in _END.split("\n".join(lines))]
    return tuple(sa.text(part) for part in parts if part)


def query(name: str, dialect: str, *, keyed: bool = False) -> sa.TextClause:
    """The single statement of `name` written for `dialect` (`keyed`: as for `queries`)."""
    (statement,) = queries(name, dialect, keyed=keyed)
    return statement
