"""What the operator commands that send a body share: a body read by the API's own model
before anything is sent, each refusal naming the option that gave the field; a version for
--if-match; and the service's refusal of an If-Match raised as the database backend raises
it, so both backends answer a stale version alike."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from app.cli.operator.http_backend import domain_error
from app.client import errors as problems
from app.domain.errors import InvalidInputError

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


def version_arg(text: str) -> int:
    """--if-match's version: a whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"a version is 1 or more, not {value}")
    return value


def option_pointer(loc: tuple[int | str, ...], options: Mapping[str, str]) -> str:
    """The pointer of a refused field, as far as an option gave it (a part inside a field,
    say a header's own name or a list's index, is the field's option's)."""
    pointer = "#" + "".join(f"/{part}" for part in loc)
    while pointer not in options and pointer.count("/") > 1:
        pointer = pointer.rsplit("/", 1)[0]
    return pointer


def checked_body(
    model: type[M],
    body: dict[str, Any],
    options: Mapping[str, str],
    also: Callable[[M], object] = lambda _: None,
) -> M:
    """`body` read by the API's own model, and checked further by `also` as the service
    checks it; a refusal is an InvalidInputError whose pointer names an option's field."""
    try:
        found = model.model_validate(body)
        also(found)
    except ValidationError as exc:
        first = exc.errors()[0]
        detail = first["msg"].removeprefix("Value error, ")
        raise InvalidInputError(detail, pointer=option_pointer(first["loc"], options)) from None
    except InvalidInputError as exc:
        loc = tuple((exc.pointer or "#").removeprefix("#").strip("/").split("/"))
        raise InvalidInputError(exc.detail, pointer=option_pointer(loc, options)) from None
    return found


async def if_match_as_domain(call: Awaitable[T]) -> T:
    """`call`, with the service's refusal of its If-Match raised as the domain's error, as
    the database backend raises it."""
    try:
        return await call
    except problems.PreconditionFailedError as problem:
        raise domain_error(problem) from None
