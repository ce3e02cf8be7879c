"""Limits on what clients send: strict JSON types, numbers and instants that leave room for
arithmetic, text that a header, a queue and the database can carry, and payloads that every
consumer can parse.

Every rule here guards input. A target or trigger read back from the database is validated
with `context=STORED` and trusted as it was written: a rule added later must not make a
schedule accepted under the rules of its day unreadable (to the API or to the claim).
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    Strict,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, InitErrorDetails, PydanticCustomError

from app.domain.spelling import invisible_character, nfc

# Instants: from the Unix epoch up to (not including) the year 9999 in UTC. The year left
# before datetime's end holds every addition to an accepted instant (an interval step is
# bounded separately, and no trigger fires at or after the horizon).
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
HORIZON = datetime(9999, 1, 1, tzinfo=UTC)
# Ten years of seconds: the longest interval and the longest relative delay.
MAX_PERIOD_SECONDS = 10 * 365 * 86400
# Counts (max_occurrences): well inside the 32-bit integer columns that store them.
MAX_COUNT = 1_000_000_000
MAX_PAYLOAD_DEPTH = 64
MAX_TIMEOUT_SECONDS = 3600.0
MAX_LABELS = 64
MAX_LABEL_KEY = 63
MAX_LABEL_VALUE = 255
MAX_LABEL_FILTERS = 20
MAX_HEADERS = 64
MAX_BATCH = 1000
MAX_HEADER_NAME = 256
MAX_HEADER_VALUE_BYTES = 8192
# AMQP short strings (the message type, exchange names) hold 255 bytes; table keys are cut
# to 128 bytes by the client library, so a longer key would arrive as another key.
MAX_SHORT_STRING_BYTES = 255
MAX_AMQP_HEADER_KEY_BYTES = 128
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

STORED: dict[str, Any] = {"stored": True}

_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_TAB = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


def on_input(info: ValidationInfo) -> bool:
    """Whether the value comes from a client (input rules apply) rather than the database."""
    context = info.context
    return not (isinstance(context, dict) and context.get("stored"))


def error_at(loc: tuple[str | int, ...], kind: str, message: str, value: Any) -> ValidationError:
    """A validation error at `loc` below the field being validated (pydantic prefixes the
    field's own location), so that a problem names the offending member itself."""
    detail = InitErrorDetails(type=PydanticCustomError(kind, message), loc=loc, input=value)
    return ValidationError.from_exception_data("input", [detail])


def has_surrogate(text: str) -> bool:
    """A lone UTF-16 surrogate (JSON "\\ud800") is not Unicode text: no encoder writes it."""
    return not text.isascii() and _SURROGATE.search(text) is not None


_SURROGATE_MESSAGE = "contains a lone UTF-16 surrogate, which is not Unicode text"


# A field's container with more members than this is over its own limit (labels, headers,
# a batch's items, replayed ids: 1000 at most), which refuses it without quoting a member:
# the walk below leaves it to that check rather than visit each of its members.
_WALKED_MEMBERS = MAX_BATCH


def _walked(item: Any) -> bool:
    return len(item) <= _WALKED_MEMBERS


def _holds_surrogate(value: Any) -> bool:
    """Whether any string or object key in `value` has a lone surrogate (`_surrogate_at`
    without keeping track of where: text that is all ASCII is passed over at once)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii() and _SURROGATE.search(item):
                return True
        elif isinstance(item, dict) and _walked(item):
            for key, child in item.items():
                if isinstance(key, str) and not key.isascii() and _SURROGATE.search(key):
                    return True
                if isinstance(child, str):
                    if not child.isascii() and _SURROGATE.search(child):
                        return True
                elif isinstance(child, dict | list | tuple):
                    stack.append(child)
        elif isinstance(item, list | tuple) and _walked(item):
            stack.extend(item)
    return False


def _surrogate_at(value: Any) -> tuple[str | int, ...] | None:
    """Where the first string (or object key) with a lone surrogate lies in `value`. A bad
    key is reported at its object: the key itself must not be echoed in the answer."""
    if not _holds_surrogate(value):
        return None
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if has_surrogate(item):
                return path
        elif isinstance(item, dict) and _walked(item):
            for key, child in item.items():
                if isinstance(key, str) and has_surrogate(key):
                    return path
                stack.append((child, (*path, key)))
        elif isinstance(item, list | tuple) and _walked(item):
            stack.extend((child, (*path, index)) for index, child in enumerate(item))
    return None


class InputModel(BaseModel):
    """A model of client input: strict JSON types (a number is never a string, a boolean
    never a number), finite numbers, no unknown fields, and only Unicode text.

    Request bodies are validated from the parsed JSON, so the per-field exceptions are
    explicit: instants (`Instant`) and ids (`Id`) come as their JSON form, a string.
    """

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    # Fields whose values check their own text (a payload walks itself once).
    _text_checked: ClassVar[frozenset[str]] = frozenset()
    # Each class's `_known_fields`, once computed.
    _known: ClassVar[frozenset[str] | None] = None

    @classmethod
    def _known_fields(cls) -> frozenset[str]:
        """The names a client may send: each field's, and its alias."""
        known = cls.__dict__.get("_known")
        if known is None:
            names = {*cls.model_fields}
            names.update(f.alias for f in cls.model_fields.values() if f.alias is not None)
            known = frozenset(names)
            cls._known = known
        return known

    @model_validator(mode="before")
    @classmethod
    def _unicode_text(cls, data: Any) -> Any:
        # Before anything else, so that no later error message can echo a lone surrogate.
        if isinstance(data, dict):
            checked = cls._text_checked
            for key, value in data.items():
                if isinstance(key, str) and has_surrogate(key):
                    raise error_at((), "string_unicode", f"a field name {_SURROGATE_MESSAGE}", {})
                if key in checked:
                    continue
                # Most values are plain text or scalars: those need no walk.
                where: tuple[str | int, ...] | None
                if isinstance(value, str):
                    where = () if has_surrogate(value) else None
                elif isinstance(value, dict | list | tuple):
                    where = _surrogate_at(value)
                else:
                    continue
                if where is not None:
                    raise error_at((key, *where), "string_unicode", _SURROGATE_MESSAGE, "")
        return data

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_fields(cls, data: Any) -> Any:
        # Defined last, so run first (pydantic runs the last "before" validator first),
        # before any field is validated, and in one pass at C speed: a body of 600,000
        # unknown names costs a set comparison, not 600,000 errors. Only the first unknown
        # name (in the order sent) is named.
        if isinstance(data, dict):
            known = cls._known_fields()
            if not data.keys() <= known:
                first = next(key for key in data if key not in known)
                if isinstance(first, str) and has_surrogate(first):
                    raise error_at((), "string_unicode", f"a field name {_SURROGATE_MESSAGE}", {})
                raise error_at((first,), "extra_forbidden", "Extra inputs are not permitted", 0)
        return data


class Shown:
    """Schema keywords for a rule that a validator (not a pydantic constraint) enforces, so
    that the document states it too: `Annotated[str, AfterValidator(...), Shown(pattern=...)]`.
    Unlike `Field(json_schema_extra=...)` it holds wherever the type is used, inside an
    optional or a container as well."""

    __slots__ = ("keywords",)

    def __init__(self, **keywords: Any) -> None:
        self.keywords = keywords

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        schema.update(self.keywords)
        return schema


# Text without control characters (`one_line`), and with a tab allowed, as JSON Schema
# patterns (ECMA 262 and Python read them alike).
ONE_LINE_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*$"
TABBED_LINE_PATTERN = r"^[^\x00-\x08\x0a-\x1f\x7f-\x9f]*$"

# -- instants and ids ----------------------------------------------------------------------


def _instant_text(value: Any, info: ValidationInfo) -> Any:
    if isinstance(value, datetime) or not on_input(info):
        return value
    if isinstance(value, str) and _RFC3339.match(value):
        return value
    raise PydanticCustomError(
        "datetime_type", "must be an RFC 3339 date-time string with an offset"
    )


def _instant_range(value: datetime, info: ValidationInfo) -> datetime:
    # Compared as aware instants, never converted first: 9999-12-31T23:59:59-14:00 is
    # beyond datetime's range once in UTC.
    if on_input(info) and not EARLIEST <= value < HORIZON:
        raise PydanticCustomError(
            "datetime_range",
            "must lie from 1970-01-01T00:00:00Z up to (not including) 9999-01-01T00:00:00Z",
        )
    return value


# The dates an instant may be written on: the years 1970-9998, and the day either side of
# them, which an offset can bring within the bound. The bound itself is on the instant in
# UTC, so an offset can also carry a time on those first and last days across it: the one
# part of the range a pattern does not say.
INSTANT_PATTERN = (
    r"^(?:1969-12-31|9999-01-01|"
    r"(?:19[7-9][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])-)"
)

Instant = Annotated[
    AwareDatetime,
    Strict(False),
    BeforeValidator(_instant_text),
    AfterValidator(_instant_range),
    Shown(pattern=INSTANT_PATTERN),
]
"""An RFC 3339 instant with an offset, within [1970-01-01Z, 9999-01-01Z)."""


Id = Annotated[uuid.UUID, Strict(False)]
"""A UUID, as its JSON form: a string."""


# -- numbers -------------------------------------------------------------------------------


def at_most(limit: float) -> Any:
    """An upper bound on input (a stored value is trusted as it was written); pair it with
    `Field(json_schema_extra={"maximum": limit})` so that the schema shows it."""

    def check(value: float, info: ValidationInfo) -> float:
        if on_input(info) and value > limit:
            raise PydanticCustomError(
                "less_than_equal", "must be at most {limit}", {"limit": f"{limit:g}"}
            )
        return value

    return AfterValidator(check)


def at_most_items(limit: int, what: str) -> Any:
    """A container (object or array) of at most `limit` members, counted before any member
    is validated: an oversize one is one error naming the field, where validating its
    members first would make an error of each (an 8 MiB body holds hundreds of thousands)
    and take seconds. Pair it with the `Field` constraint that shows the limit in the
    schema; a stored value is trusted as it was written."""

    def check(value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, dict | list) and len(value) > limit and on_input(info):
            raise PydanticCustomError(
                "too_long",
                "at most {limit} {what}, not {count}",
                {"limit": limit, "what": what, "count": len(value)},
            )
        return value

    return BeforeValidator(check)


# -- text ----------------------------------------------------------------------------------


def _text_problem(value: str, *, tab: bool, max_bytes: int | None) -> str | None:
    if (_CONTROL_BUT_TAB if tab else _CONTROL).search(value):
        return "contains a control character" + (" other than a tab" if tab else "")
    if max_bytes is not None and len(value.encode()) > max_bytes:
        return f"is longer than {max_bytes} bytes in UTF-8"
    return None


@dataclass(frozen=True, slots=True)
class _TextRule(AfterValidator):
    """The text rule as a validator that also shows its pattern in the schema (the byte
    limit a pattern cannot say; the character limits beside it bound it loosely)."""

    pattern: str = ONE_LINE_PATTERN

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        schema["pattern"] = self.pattern
        return schema


def _text_rule(*, tab: bool, max_bytes: int | None) -> Any:
    def check(value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, str) or not on_input(info):
            return value
        if problem := _text_problem(value, tab=tab, max_bytes=max_bytes):
            raise PydanticCustomError("string_text", f"the text {problem}")
        return value

    return _TextRule(check, TABBED_LINE_PATTERN if tab else ONE_LINE_PATTERN)


def one_line(max_bytes: int | None = None) -> Any:
    """Text without control characters: a name, a filter, a header or message property."""
    return _text_rule(tab=False, max_bytes=max_bytes)


def check_text(value: str, what: str, *, tab: bool = False, max_bytes: int | None = None) -> None:
    """The same rule inside a validator of a whole mapping; raises ValueError naming `what`."""
    if problem := _text_problem(value, tab=tab, max_bytes=max_bytes):
        raise ValueError(f"{what} {problem}")


EventType = Annotated[
    str, Field(min_length=1, max_length=200), one_line(max_bytes=MAX_SHORT_STRING_BYTES)
]
"""A schedule's event type: sent as the X-Event-Type header and the AMQP message type."""


def _nfc_text(value: Any) -> Any:
    return nfc(value) if isinstance(value, str) else value


def _visible(value: Any, info: ValidationInfo) -> Any:
    if isinstance(value, str) and on_input(info) and (found := invisible_character(value)):
        raise PydanticCustomError(
            "string_visible", f"the text contains an invisible character ({found})"
        )
    return value


# Found by what people type: kept in NFC (before its length is counted), with nothing that
# does not show (app.domain.spelling).
Name = Annotated[
    str,
    Field(min_length=1, max_length=200),
    one_line(),
    AfterValidator(_visible),
    BeforeValidator(_nfc_text),
]

FlowKeyName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9._:-]+$",
        description="A flow key (1-128 of A-Z a-z 0-9 . _ : -): the deliveries of every "
        "schedule naming it share its limits (PUT /v1/flow-keys/{key}); null: none",
        examples=["customer-42"],
    ),
]


def _labels(value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
    if not on_input(info):
        return value
    labels: dict[str, str] = {}
    for given, given_text in value.items():
        # In NFC, as names are (app.domain.spelling).
        key, text = nfc(given), nfc(given_text)
        if not key or len(key) > MAX_LABEL_KEY or ":" in key:
            raise ValueError(f"label key {key!r} must be 1-{MAX_LABEL_KEY} characters without ':'")
        check_text(key, f"label key {key!r}")
        if found := invisible_character(key):
            raise ValueError(f"label key {key!r} contains an invisible character ({found})")
        if key in labels:
            raise ValueError(f"label key {key!r} is given twice (once written otherwise)")
        if len(text) > MAX_LABEL_VALUE:
            raise ValueError(f"label {key!r} is longer than {MAX_LABEL_VALUE} characters")
        check_text(text, f"label {key!r}")
        if found := invisible_character(text):
            raise ValueError(f"label {key!r} contains an invisible character ({found})")
        labels[key] = text
    return dict(sorted(labels.items()))


Labels = Annotated[
    dict[str, str],
    Field(max_length=MAX_LABELS),
    at_most_items(MAX_LABELS, "labels"),
    AfterValidator(_labels),
    Shown(
        propertyNames={
            "minLength": 1,
            "maxLength": MAX_LABEL_KEY,
            "pattern": r"^[^:\x00-\x1f\x7f-\x9f]*$",
        },
        additionalProperties={
            "type": "string",
            "maxLength": MAX_LABEL_VALUE,
            "pattern": ONE_LINE_PATTERN,
        },
    ),
]
"""At most 64 labels; keys of 1-63 characters without ':', values of up to 255. Kept in
key order: every store answers with them in the same order (PostgreSQL's JSONB and MySQL's
JSON reorder keys their own ways)."""


# -- payloads ------------------------------------------------------------------------------

_JSON_SCALARS = (str, int, float, bool, type(None))
# The deepest payload a response shows: rows written before the input limit, or around the
# API, may nest deeper than 64 levels, and the JSON encoder of responses stops near 250
# (a payload sits a few levels down in a page of schedules).
MAX_SHOWN_DEPTH = 200


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than `limit` levels deep in `value`."""
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


# The C encoder, each made once (json.dumps with arguments makes one for every call).
_ENCODERS = {
    allow_nan: json.JSONEncoder(
        ensure_ascii=False, allow_nan=allow_nan, check_circular=False
    ).encode
    for allow_nan in (False, True)
}


def _json_text(value: Any, *, allow_nan: bool) -> str | None:
    """`value` as JSON text (the C encoder: fast), or None unless it is JSON that encodes
    as UTF-8."""
    try:
        text = _ENCODERS[allow_nan](value)
        if not text.isascii():
            text.encode()  # a lone surrogate is no UTF-8
    except (ValueError, TypeError, RecursionError):  # NaN, a surrogate, not JSON, too deep
        return None
    return text


def _nests_deeper(value: Any, text: str, limit: int) -> bool:
    """`_deeper_than` of `value` whose JSON text is `text`: each level of nesting opens
    with a [ or a {, so a text with no more of them than `limit` needs no walk."""
    return text.count("[") + text.count("{") > limit and _deeper_than(value, limit)


def _json_payload(value: Any) -> Any:
    """A JSON value that every consumer can parse back: nested at most 64 arrays and objects
    deep, finite numbers only (NaN and Infinity are not JSON), only Unicode text."""
    text = _json_text(value, allow_nan=False)
    if text is not None:
        if _nests_deeper(value, text, MAX_PAYLOAD_DEPTH):
            raise _depth_error()
        return value
    # Something is wrong: find the first offending member, to name it.
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 1, ())]
    while stack:
        item, depth, path = stack.pop()
        if not isinstance(item, dict | list):
            _json_scalar(item, path)
            continue
        if depth > MAX_PAYLOAD_DEPTH:
            raise _depth_error()
        children = item.items() if isinstance(item, dict) else enumerate(item)
        for key, child in children:
            if isinstance(key, str) and has_surrogate(key):
                raise error_at(path, "string_unicode", f"a key {_SURROGATE_MESSAGE}", None)
            stack.append((child, depth + 1, (*path, key)))
    raise error_at((), "json_type", "is not a JSON value", None)


def _depth_error() -> ValidationError:
    message = f"nests arrays and objects more than {MAX_PAYLOAD_DEPTH} levels deep"
    return error_at((), "json_depth", message, None)


def _json_scalar(item: Any, path: tuple[str | int, ...]) -> None:
    if isinstance(item, float):
        if not math.isfinite(item):
            raise error_at(path, "finite_number", "NaN and Infinity are not JSON numbers", None)
    elif isinstance(item, str):
        if has_surrogate(item):
            raise error_at(path, "string_unicode", _SURROGATE_MESSAGE, None)
    elif not isinstance(item, _JSON_SCALARS):
        raise error_at(path, "json_type", "is not a JSON value", None)


JsonPayload = Annotated[Any, AfterValidator(_json_payload)]
"""Any JSON value, within the limits every consumer can parse (see `_json_payload`)."""


def shown_payload(value: Any) -> Any:
    """A stored payload as a response shows it: itself, or None when no JSON response could
    carry it (nested more than 200 levels deep, or not Unicode text). Only rows written
    around the API, or before its limits, can be like that; deliveries still send them as
    stored. NaN and Infinity (stored by older versions) are shown as null by the encoder."""
    text = _json_text(value, allow_nan=True)
    if text is not None and not _nests_deeper(value, text, MAX_SHOWN_DEPTH):
        return value
    return None


def without_null(names: Sequence[str]) -> Callable[[dict[str, Any]], None]:
    """A model's `json_schema_extra` for a PATCH whose fields `names` may be left out but
    never set to null (the service refuses null, naming the field): their schema offers
    no null and no default."""

    def strip(schema: dict[str, Any]) -> None:
        for name in names:
            prop = schema["properties"][name]
            prop.pop("default", None)
            options = [o for o in prop.pop("anyOf", []) if o.get("type") != "null"]
            if len(options) == 1:
                prop.update(options[0])
            elif options:
                prop["anyOf"] = options

    return strip
