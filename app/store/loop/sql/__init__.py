"""The delivery loop's statements, named: one file per name and dialect
(`<name>.<dialect>.sql`), or one for every database where they write it alike
(`<name>.sql`), loaded once.

A file holds one statement, or several separated by a `;` at the end of a line, run in
order by the dialect that needs more than one (MySQL's claim has no UPDATE ... RETURNING).

Values the statements test or write (a status, an origin) are written in the text; what a
caller passes is a parameter. A list parameter is PostgreSQL's array (`= ANY(:ids)`: one
parameter and one cached plan whatever its length) and the others' list expanded in place
(`IN :ids`), as `listed` types it.
"""

from __future__ import annotations

import re
from enum import StrEnum
from functools import cache, lru_cache
from importlib import resources
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.types import TypeEngine

DIALECTS = ("postgresql", "sqlite", "mysql")
# Each statement's name, and the dialects it has a file of its own for
# (`<name>.<dialect>.sql`); `SHARED`: one file every database runs alike (`<name>.sql`);
# `REST` among dialects: one file (`<name>.sql`) for every database the tuple does not name.
# The loop runs each where its dialect asks for it: PostgreSQL records a settle's attempts
# in one statement from arrays, the others read the leases the settle holds, then insert.
SHARED: tuple[str, ...] = ()
REST = "*"
NAMES: dict[str, tuple[str, ...]] = {
    "claim": DIALECTS,
    # The claim's own follow-ups: first claims counted as firings (in steps: PostgreSQL's
    # claim counts them itself), recurring schedules' tallies, what its misfire policy drops,
    # leases that ran out on their last attempt, and rows that could not be planned.
    "count_fires": SHARED,
    "tick": SHARED,
    "tally": SHARED,
    "skip_claimed": SHARED,
    "dead_letter_expired": SHARED,
    "unplannable_dead": SHARED,
    "unplannable_retry": SHARED,
    "flow_due": DIALECTS,
    # The due keys from the due rows, a window of them (MySQL, with no partial index to
    # leave shelved and unkeyed rows out of, always walks the keys).
    "flow_due_window": ("postgresql", "sqlite"),
    # A page of keys with their earliest awake row, for the looks that put keys to sleep.
    "key_heads": DIALECTS,
    "start_mark": DIALECTS,
    "release": SHARED,
    "record_attempts": ("postgresql",),
    "settled_leases": ("sqlite", "mysql"),
    "record_attempt": SHARED,
    "hold": SHARED,
    "unhold": SHARED,
    "cancel_pending": SHARED,
    "cancel_callbacks": SHARED,
    # A settle's outcomes: PostgreSQL delivers the pairs of occurrence and lease token in one
    # statement that also restarts the failure counts; the others deliver by lease, then
    # restart. Retries and dead letters read the clock as each dialect does.
    "delivered_restarting": ("postgresql",),
    "delivered": SHARED,
    "restart_failures": SHARED,
    "retry": ("postgresql", REST),
    "dead": ("postgresql", REST),
    # Schedules finished: PostgreSQL reads, changes and records each kind in one statement;
    # the others read and lock (`finishing_*`), then change by key and record the events.
    "finish_one_shots": ("postgresql",),
    "finish_recurring": ("postgresql",),
    "finishing_one_shots": ("sqlite", "mysql"),
    "finishing_recurring": ("sqlite", "mysql"),
    "finish": SHARED,
    "finish_event": SHARED,
    # A batch's dead letters as their schedules see them: the failure callbacks they call
    # for, the count of dead letters in a row, the auto-pause it reaches, and the lock that
    # comes first.
    "reported_dead_letters": DIALECTS,
    "count_failures": ("postgresql", REST),
    "paused_by_failures": DIALECTS,
    "lock_before_pausing": DIALECTS,
    # Flow keys: the keyed claim's locked read of its keys, their attempts in flight (which
    # the API's figures read too), the candidates of each key (a part per key, joined
    # UNION ALL: `union_all`) and the tokens spent; what a settle or a hand-back gives back
    # to a key (a back-off, an unstarted attempt's token, a cancelled attempt's lease).
    "lock_keys": DIALECTS,
    "in_flight": SHARED,
    "flow_head": SHARED,
    "flow_due_rows": SHARED,
    "spend_tokens": ("mysql", REST),
    "back_off": ("mysql", REST),
    "still_held": SHARED,
    "give_back_tokens": ("mysql", REST),
    "end_cancelled_leases": ("postgresql", REST),
    # Keys paused or backing off hold their waiting rows out of the keyed claim's index;
    # the keys that may start again, the soonest a back-off of one ends, and the give-back.
    "shelve_keys": SHARED,
    "unshelving_keys": DIALECTS,
    "next_unshelve": SHARED,
    "unshelve_keys": SHARED,
    # Retention of ended schedules: those nothing has changed since the cutoff.
    "ended_schedules": DIALECTS,
}


def file_names() -> set[str]:
    """The files `NAMES` says there are."""
    return {
        f"{name}.sql" if dialect in ("", REST) else f"{name}.{dialect}.sql"
        for name, dialects in NAMES.items()
        for dialect in dialects or ("",)
    }


def dialects_of(name: str) -> tuple[str, ...]:
    """The dialects `name` is written for, by a file of their own or one they share."""
    dialects = NAMES[name]
    if not dialects or REST in dialects:
        return DIALECTS
    return dialects


def listed(name: str, dialect: str, type_: TypeEngine[Any]) -> sa.BindParameter[Any]:
    """The list parameter `name` of a named statement of `dialect`, its elements of `type_`
    (PostgreSQL's an array, the others' a list expanded in place)."""
    if dialect == "postgresql":
        return sa.bindparam(name, type_=postgresql.ARRAY(type_))
    return sa.bindparam(name, expanding=True, type_=type_)


def typed(statement: sa.TextClause, *params: sa.BindParameter[Any]) -> sa.TextClause:
    """`statement` with each of `params` it takes typed (the ones it does not take left out)."""
    return statement.bindparams(*(p for p in params if p.key in statement._bindparams))


_END = re.compile(r";[ \t]*$", re.MULTILINE)


class Finished(StrEnum):
    """The schedules a finish changes: one-shots with nothing left pending (completed, or
    failed if their firing was dead-lettered), or recurring ones with nothing left pending
    (completed). `finish_<kind>` and `finishing_<kind>` are its statements."""

    ONE_SHOTS = "one_shots"
    RECURRING = "recurring"


class ClaimRows(StrEnum):
    """Which rows a claim statement selects: unkeyed rows never attempted (`fresh`: a tick
    or a trigger on its first claim), unkeyed rows attempted before (`again`: retries,
    replays, lost leases), or the keyed rows the keyed claim chose, by id, as each key's
    limits allow (`chosen`, app/store/loop/flow_claims.py). Each of the first two has a partial
    index of its own, so that a replay of thousands never stands in the way of first
    attempts; every other condition of a claim holds for all three."""

    FRESH = "fresh"
    AGAIN = "again"
    CHOSEN = "chosen"
    # The rows of flow keys without limits (bound as `keys`), claimed as unkeyed rows are:
    # those no pause, back-off or sleep has shelved, in due order from the index of the
    # keys' open rows (`KEYED_OPEN`), so that a claim reads what it takes, not every row
    # due of its keys.
    FREE = "free"


# The claim's files say which rows they select once, as UNKEYED_ROWS; each kind of claim is
# the same statements over its own rows.
UNKEYED_ROWS = "o.flow_key IS NULL"
CLAIM_ROWS = {
    ClaimRows.FRESH: "o.flow_key IS NULL AND o.first_attempt_at IS NULL",
    ClaimRows.AGAIN: "o.flow_key IS NULL AND o.first_attempt_at IS NOT NULL",
    ClaimRows.CHOSEN: "o.occurrence_id IN :ids",
    ClaimRows.FREE: "o.flow_key IS NOT NULL AND NOT o.shelved AND o.flow_key IN :keys",
}
# PostgreSQL takes a list as one array parameter: one statement text, and one cached plan,
# whatever the list's length (a list expanded in place is a new statement for each length).
CLAIM_ROWS_OF: dict[str, dict[ClaimRows, str]] = {
    "postgresql": {
        ClaimRows.CHOSEN: "o.occurrence_id = ANY(:ids)",
        ClaimRows.FREE: "o.flow_key IS NOT NULL AND NOT o.shelved AND o.flow_key = ANY(:keys)",
    }
}


@cache
def queries(name: str, dialect: str, *, rows: ClaimRows | None = None) -> tuple[sa.TextClause, ...]:
    """The statements of `name` written for `dialect` (file `<name>.<dialect>.sql`, else
    `<name>.sql`); with `rows`, a claim's, over those rows (`CLAIM_ROWS`, in place of
    UNKEYED_ROWS, said once)."""
    folder = resources.files(__package__)
    own = folder.joinpath(f"{name}.{dialect}.sql")
    source = (own if own.is_file() else folder.joinpath(f"{name}.sql")).read_text("utf-8")
    if rows is not None:
        if source.count(UNKEYED_ROWS) != 1:
            raise ValueError(f"{name}.{dialect}.sql must say {UNKEYED_ROWS!r} exactly once")
        source = source.replace(
            UNKEYED_ROWS, CLAIM_ROWS_OF.get(dialect, {}).get(rows, CLAIM_ROWS[rows])
        )
    # Comments are for readers; dropping them keeps a ":name" in prose from becoming a parameter.
    lines = [line for line in source.splitlines() if not line.lstrip().startswith("--")]
    parts = [part.strip() for part in _END.split("\n".join(lines))]
    return tuple(sa.text(part) for part in parts if part)


def query(name: str, dialect: str, *, rows: ClaimRows | None = None) -> sa.TextClause:
    """The single statement of `name` written for `dialect` (`rows`: as for `queries`)."""
    (statement,) = queries(name, dialect, rows=rows)
    return statement


# A parameter's every use in a statement's text (not the start of a longer name).
def _parameter(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![:\w]):{name}\b")


@lru_cache(maxsize=256)
def union_all(parts: tuple[str, ...], dialect: str, *, numbered: tuple[str, ...]) -> sa.TextClause:
    """One statement of the single statements named `parts` (each a SELECT of the same
    columns) of `dialect`, UNION ALL, in order; the i-th's parameters of `numbered` are
    renamed `<name>_<i>`, the others are the same parameter in every part."""
    texts = []
    for n, name in enumerate(parts):
        text = query(name, dialect).text
        for parameter in numbered:
            text = _parameter(parameter).sub(f":{parameter}_{n}", text)
        texts.append(text)
    return sa.text("\nUNION ALL\n".join(texts))
