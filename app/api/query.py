"""Query parameters a /v1 operation does not declare are refused, never ignored: a
misspelt filter (`?staus=paused`) would otherwise list everything, and the client would
act on the wrong rows."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from app.api.problems import UnknownParametersError

API_PREFIX = "/v1/"


def _query_names(dependant: Dependant) -> Iterator[str]:
    for field in dependant.query_params:
        yield field.alias
    for sub in dependant.dependencies:
        yield from _query_names(sub)


async def declared_query_only(request: Request) -> None:
    """Refuse a /v1 request that has query parameters its operation does not declare (422
    naming each). The docs, the console and the health routes are not checked."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or not route.path.startswith(API_PREFIX):
        return
    if not request.query_params:
        return
    # Read from the operation's dependency tree (a few fields), only when there is a query.
    declared = frozenset(_query_names(route.dependant))
    unknown = sorted({name for name in request.query_params if name not in declared})
    if unknown:
        raise UnknownParametersError(unknown, sorted(declared))
