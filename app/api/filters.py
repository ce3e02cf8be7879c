"""Query parameters that filter lists, with the same text rules as the fields they match: a
value no schedule can hold (a control character, NUL included, or a mile of text) is a 422
naming the parameter, never a statement the database refuses."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query
from pydantic import StringConstraints

from app.domain.limits import (
    MAX_LABEL_FILTERS,
    MAX_LABEL_KEY,
    MAX_LABEL_VALUE,
    at_most_items,
    one_line,
)

_LABEL_FILTER = MAX_LABEL_KEY + 1 + MAX_LABEL_VALUE  # key:value

EventTypeQuery = Annotated[
    str | None, Query(max_length=200, description="Only this event type"), one_line()
]
NameQuery = Annotated[
    str | None, Query(max_length=200, description="Only schedules of this name"), one_line()
]
LabelQuery = Annotated[
    list[Annotated[str, StringConstraints(max_length=_LABEL_FILTER), one_line()]],
    Query(
        max_length=MAX_LABEL_FILTERS,
        description=f"key:value, repeatable (at most {MAX_LABEL_FILTERS})",
    ),
    at_most_items(MAX_LABEL_FILTERS, "label filters"),
]
