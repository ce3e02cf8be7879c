"""If-Match: the versions a client expects what it changes to be at."""

from __future__ import annotations

from typing import Any

from fastapi import Header


def if_match_header(what: str) -> Any:
    """The If-Match header of a route that changes `what`: `Annotated[str | None, ...]`."""
    return Header(
        alias="If-Match",
        max_length=1024,
        description=f'Change only if {what} is at this version: its ETag ("3"), or *',
    )


def versions(if_match: str | None) -> frozenset[int] | None:
    """The versions an If-Match header names; None for any (absent, or *). A weak or
    malformed tag names no version (If-Match compares strongly), so it never matches."""
    if if_match is None:
        return None
    tags = [tag.strip() for tag in if_match.split(",")]
    if "*" in tags:
        return None
    return frozenset(
        int(tag[1:-1])
        for tag in tags
        if len(tag) >= 3 and tag[0] == tag[-1] == '"' and tag[1:-1].isdigit() and len(tag) < 20
    )
