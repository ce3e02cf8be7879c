"""Query parameters that filter lists, with the same text rules as the fields they match: a
value no schedule can hold (a control character, NUL included, or a mile of text) is a 422
naming the parameter, never a statement the database refuses."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query
from pydantic import StringConstraints

from app.domain.filters import FAILING_WINDOW, ScheduleSort
from app.domain.limits import (
    MAX_LABEL_FILTERS,
    MAX_LABEL_KEY,
    MAX_LABEL_VALUE,
    Instant,
    at_most_items,
    one_line,
)

_LABEL_FILTER = MAX_LABEL_KEY + 1 + MAX_LABEL_VALUE  # key:value

EventTypeQuery = Annotated[
    str | None, Query(max_length=200, description="Only this event type"), one_line()
]
NameQuery = Annotated[
    str | None,
    Query(
        max_length=200,
        description="Only schedules of this name (compared in Unicode NFC: `café` written "
        "either way is one name)",
    ),
    one_line(),
]
NamePrefixQuery = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=200,
        description="Only schedules whose name starts with this text, as written (compared "
        "in Unicode NFC): `%` and `_` are characters, not wildcards",
    ),
    one_line(),
]
FailingQuery = Annotated[
    bool,
    Query(
        description="true: only failing schedules: those whose latest occurrences were "
        f"dead-lettered in a row (consecutive_failures > 0), or with a dead letter from the "
        f"last {FAILING_WINDOW.total_seconds() / 3600:g} hours still waiting (neither replayed "
        "nor discarded)"
    ),
]
FlowKeyQuery = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9._:-]+$",
        description="Only schedules of this flow key (1-128 of A-Z a-z 0-9 . _ : -)",
        examples=["customer-42"],
    ),
]
DueBeforeQuery = Annotated[
    Instant | None,
    Query(
        description="Only schedules with a pending occurrence due at or before this instant "
        "(RFC 3339 with an offset); with sort=next_fire_at, what fires next or is overdue",
        examples=["2026-01-01T00:00:00Z"],
    ),
]
ScheduleSortQuery = Annotated[
    ScheduleSort,
    Query(
        description="The order: created (newest first), next_fire_at (earliest next fire "
        "first, schedules with nothing pending last) or failures (most failures in a row "
        "first, then newest). A cursor belongs to the sort that issued it"
    ),
]
LabelQuery = Annotated[
    list[Annotated[str, StringConstraints(max_length=_LABEL_FILTER), one_line()]],
    Query(
        max_length=MAX_LABEL_FILTERS,
        description=f"key:value, repeatable (at most {MAX_LABEL_FILTERS})",
    ),
    at_most_items(MAX_LABEL_FILTERS, "label filters"),
]
