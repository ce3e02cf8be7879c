"""Input limits: bounded numbers and instants, strict JSON types, text a header or a queue can
carry, payloads every consumer parses; and no accepted value overflows later arithmetic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from app.api.schedule_schemas import BatchCreate
from app.domain.limits import (
    EARLIEST,
    HORIZON,
    MAX_COUNT,
    MAX_PAYLOAD_DEPTH,
    MAX_PERIOD_SECONDS,
    MAX_SHOWN_DEPTH,
    STORED,
    has_surrogate,
    shown_payload,
)
from app.domain.misfire import Rules, plan
from app.domain.schedule import SchedulePatch, ScheduleSpec
from app.domain.target import Target, WebhookTarget
from app.domain.trigger import Trigger, count_ticks, fire_times, next_fire_after, resolve

TRIGGER: TypeAdapter[Trigger] = TypeAdapter(Trigger)
TARGET: TypeAdapter[Target] = TypeAdapter(Target)
MICROSECOND = timedelta(microseconds=1)
LAST = HORIZON - MICROSECOND
# The most a fire instant ever gets added to it: a day of jitter, a DST shift.
ADDED = timedelta(days=1, hours=3)


def refusal(adapter: TypeAdapter[Any], value: Any) -> list[tuple[Any, ...]]:
    """The locations of the errors validating `value`, as FastAPI does (from parsed JSON)."""
    with pytest.raises(ValidationError) as raised:
        adapter.validate_python(value)
    return [tuple(error["loc"]) for error in raised.value.errors()]


def spec(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "event_type": "invoice.due",
        "payload": {"invoice": 42},
        "target": {"type": "webhook", "url": "http://127.0.0.1:9/hook"},
        "trigger": {"type": "immediate"},
    }
    return {**body, **changes}


SPEC: TypeAdapter[ScheduleSpec] = TypeAdapter(ScheduleSpec)
PATCH: TypeAdapter[SchedulePatch] = TypeAdapter(SchedulePatch)
BATCH: TypeAdapter[BatchCreate] = TypeAdapter(BatchCreate)


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


# -- instants -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "instant",
    [
        "1970-01-01T00:00:00Z",
        "1970-01-01T14:00:00+14:00",
        "9998-12-31T23:59:59.999999Z",
        "9998-12-31T09:59:59.999999-14:00",
    ],
)
def test_instants_at_the_edges_of_the_range_are_accepted(instant: str) -> None:
    accepted = TRIGGER.validate_python({"type": "once", "at": instant})

    assert accepted.type == "once"
    assert accepted.at == datetime.fromisoformat(instant), "the instant, to the microsecond"


@pytest.mark.parametrize(
    "instant",
    [
        "1969-12-31T23:59:59.999999Z",
        "1970-01-01T13:59:59+14:00",
        "9999-01-01T00:00:00Z",
        "9999-12-31T23:59:59-14:00",  # beyond datetime itself once in UTC
        "0001-01-01T00:00:00+14:00",  # before datetime itself once in UTC
    ],
)
def test_instants_outside_the_range_are_refused(instant: str) -> None:
    assert refusal(TRIGGER, {"type": "once", "at": instant}) == [("once", "at")]


@pytest.mark.parametrize("value", [4102444800, 4102444800.5, "4102444800", True])
def test_an_instant_is_an_rfc_3339_string_not_a_number(value: Any) -> None:
    assert refusal(TRIGGER, {"type": "once", "at": value}) == [("once", "at")]


@pytest.mark.parametrize(
    ("trigger", "field"),
    [
        ({"type": "interval", "every_seconds": 60, "start_at": "1960-01-01T00:00:00Z"}, "start_at"),
        ({"type": "interval", "every_seconds": 60, "end_at": "9999-06-01T00:00:00Z"}, "end_at"),
        (
            {"type": "cron", "expression": "* * * * *", "start_at": "0001-01-01T00:00:00Z"},
            "start_at",
        ),
        ({"type": "cron", "expression": "* * * * *", "end_at": "9999-12-31T00:00:00Z"}, "end_at"),
    ],
)
def test_trigger_bounds_lie_in_the_range(trigger: dict[str, Any], field: str) -> None:
    assert refusal(TRIGGER, trigger) == [(trigger["type"], field)]


# -- numbers ------------------------------------------------------------------------------


@pytest.mark.parametrize("every", [MAX_PERIOD_SECONDS + 1, 1e18, 1e300, float("inf")])
def test_an_interval_is_at_most_ten_years(every: float) -> None:
    assert refusal(TRIGGER, {"type": "interval", "every_seconds": every}) == [
        ("interval", "every_seconds")
    ]


def test_an_interval_of_ten_years_is_accepted() -> None:
    accepted = TRIGGER.validate_python({"type": "interval", "every_seconds": MAX_PERIOD_SECONDS})

    assert accepted.type == "interval"
    assert accepted.every_seconds == MAX_PERIOD_SECONDS


@pytest.mark.parametrize("delay", [MAX_PERIOD_SECONDS + 1, 1e18, float("nan")])
def test_a_delay_is_at_most_ten_years(delay: float) -> None:
    assert refusal(TRIGGER, {"type": "once", "delay_seconds": delay}) == [("once", "delay_seconds")]


@pytest.mark.parametrize(
    ("changes", "loc"),
    [
        ({"max_occurrences": MAX_COUNT + 1}, ("max_occurrences",)),
        ({"max_occurrences": 2**63}, ("max_occurrences",)),
        ({"max_attempts": 1001}, ("max_attempts",)),
        ({"max_catchup": 1001}, ("max_catchup",)),
        ({"jitter_seconds": 86401}, ("jitter_seconds",)),
        ({"jitter_seconds": float("inf")}, ("jitter_seconds",)),
        ({"misfire_grace_seconds": 86400 * 365 + 1}, ("misfire_grace_seconds",)),
        (
            {"target": {"type": "webhook", "url": "http://h/", "timeout_seconds": 3601}},
            ("target", "webhook", "timeout_seconds"),
        ),
        (
            {"target": {"type": "webhook", "url": "http://h/", "timeout_seconds": 0}},
            ("target", "webhook", "timeout_seconds"),
        ),
    ],
)
def test_every_number_of_a_schedule_is_bounded_on_create_and_patch(
    changes: dict[str, Any], loc: tuple[Any, ...]
) -> None:
    assert refusal(SPEC, spec(**changes)) == [loc]
    assert refusal(PATCH, changes) == [loc]


# -- strict JSON types --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "loc"),
    [
        ({"max_attempts": "5"}, ("max_attempts",)),
        ({"max_attempts": 5.0}, ("max_attempts",)),
        ({"max_attempts": True}, ("max_attempts",)),
        ({"jitter_seconds": "1.5"}, ("jitter_seconds",)),
        ({"jitter_seconds": False}, ("jitter_seconds",)),
        ({"name": 5}, ("name",)),
        ({"labels": {"team": 5}}, ("labels", "team")),
        (
            {"trigger": {"type": "interval", "every_seconds": "60"}},
            ("trigger", "interval", "every_seconds"),
        ),
    ],
)
def test_a_value_of_another_json_type_is_refused_not_coerced(
    changes: dict[str, Any], loc: tuple[Any, ...]
) -> None:
    assert refusal(SPEC, spec(**changes)) == [loc]


def test_integers_are_numbers_where_a_number_is_expected() -> None:
    accepted = SPEC.validate_python(
        spec(jitter_seconds=5, trigger={"type": "interval", "every_seconds": 60})
    )

    assert accepted.jitter_seconds == 5.0


def test_instants_come_as_strings_and_keep_their_offset() -> None:
    trigger = TRIGGER.validate_python({"type": "once", "at": "2031-01-01T09:00:00+02:00"})

    assert trigger.at == datetime(2031, 1, 1, 7, tzinfo=UTC)  # type: ignore[union-attr]
    assert trigger.at.utcoffset() == timedelta(hours=2)  # type: ignore[union-attr]


# -- text ---------------------------------------------------------------------------------


@pytest.mark.parametrize("char", ["\x00", "\x0b", "\x0c", "\r", "\n", "\x1b", "\x7f", "\x85"])
def test_a_header_value_with_a_control_character_is_refused(char: str) -> None:
    target = {"type": "webhook", "url": "http://h/", "headers": {"X-A": f"a{char}b"}}

    assert refusal(TARGET, target) == [("webhook", "headers")]


def test_a_header_value_may_hold_a_tab() -> None:
    target = TARGET.validate_python(
        {"type": "webhook", "url": "http://h/", "headers": {"X-A": "a\tb"}}
    )

    assert isinstance(target, WebhookTarget)
    assert target.headers == {"X-A": "a\tb"}, "the tab is kept as it was sent"


@pytest.mark.parametrize("char", ["\x00", "\r", "\n", "\t", "\x1f"])
def test_an_event_type_with_a_control_character_is_refused(char: str) -> None:
    assert refusal(SPEC, spec(event_type=f"a{char}b")) == [("event_type",)]


def test_an_event_type_fits_an_amqp_short_string() -> None:
    SPEC.validate_python(spec(event_type="é" * 127))  # 254 bytes

    assert refusal(SPEC, spec(event_type="é" * 128)) == [("event_type",)]


@pytest.mark.parametrize(
    "labels",
    [
        {f"k{i}": "v" for i in range(65)},
        {"k" * 64: "v"},
        {"": "v"},
        {"a:b": "v"},
        {"k": "v" * 256},
        {"k": "a\x00b"},
        {"a\nb": "v"},
    ],
)
def test_labels_keep_to_their_limits(labels: dict[str, str]) -> None:
    assert refusal(SPEC, spec(labels=labels)) == [("labels",)]
    assert refusal(PATCH, {"labels": labels}) == [("labels",)]


def test_labels_at_their_limits_are_accepted() -> None:
    labels = {f"{i:02d}" + "k" * 61: "v" * 255 for i in range(64)}

    assert SPEC.validate_python(spec(labels=labels)).labels == labels


@pytest.mark.parametrize(
    ("where", "value", "loc"),
    [
        ("event_type", "\ud800", ("event_type",)),
        ("name", "a\udfff", ("name",)),
        ("labels", {"team": "\ud800"}, ("labels", "team")),
        ("labels", {"\ud800": "v"}, ("labels",)),
        ("payload", {"a": [1, "\ud800"]}, ("payload", "a", 1)),
        ("payload", {"a": {"\ud800": 1}}, ("payload", "a")),
        ("trigger", {"type": "\ud800"}, ("trigger", "type")),
        (
            "target",
            {"type": "webhook", "url": "http://h/", "headers": {"X-A": "\ud800"}},
            ("target", "headers", "X-A"),
        ),
    ],
)
def test_a_lone_surrogate_is_refused_where_it_is(
    where: str, value: Any, loc: tuple[Any, ...]
) -> None:
    assert refusal(SPEC, spec(**{where: value})) == [loc]


@pytest.mark.parametrize(
    ("value", "loc"),
    [
        ([["ok", "\ud800"]], ("extra", 0, 1)),
        ({"a": [{"b": "\udfff"}]}, ("extra", "a", 0, "b")),
        ({"a": ("ok", "é\ud800")}, ("extra", "a", 1)),
    ],
)
def test_an_unknown_field_holding_a_lone_surrogate_is_refused_as_unknown_without_its_value(
    value: Any, loc: tuple[Any, ...]
) -> None:
    # Unknown names are refused before any value is looked at, and the error carries none.
    with pytest.raises(ValidationError) as raised:
        SPEC.validate_python(spec(extra=value))
    (error,) = raised.value.errors()
    assert (error["loc"], error["type"]) == (loc[:1], "extra_forbidden")
    assert not has_surrogate(str(error["input"]))


@pytest.mark.parametrize(
    ("where", "body", "loc"),
    [
        ("top level", spec(**{f"u{n}": n for n in range(1000)}), ("u0",)),
        (
            "trigger",
            spec(trigger={"type": "immediate", "b": 1, "a": 2}),
            ("trigger", "immediate", "b"),
        ),
        (
            "target",
            spec(target={"type": "webhook", "url": "http://h/", "zz": 1}),
            ("target", "webhook", "zz"),
        ),
    ],
)
def test_only_the_first_unknown_field_of_an_object_is_named(
    where: str, body: dict[str, Any], loc: tuple[Any, ...]
) -> None:
    assert refusal(SPEC, body) == [loc]


def test_text_beyond_ascii_without_surrogates_is_accepted_everywhere() -> None:
    target = {"type": "webhook", "url": "http://h/", "headers": {"X-Team": "café ☕"}}
    labels = {"équipe": "日本", "team": "\u2028"}

    accepted = SPEC.validate_python(
        spec(name="Café ☕", event_type="facture.émise", labels=labels, target=target)
    )

    assert (accepted.name, accepted.labels) == ("Café ☕", labels)


def test_a_lone_surrogate_in_an_unknown_field_name_is_refused_without_echoing_it() -> None:
    with pytest.raises(ValidationError) as raised:
        SPEC.validate_python({**spec(), "\ud800": 1})

    (error,) = raised.value.errors()
    assert error["loc"] == ()
    assert "\ud800" not in error["msg"]


# -- webhook URLs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://2130706433/",
        "http://0177.0.0.1/",
        "http://127.1/",
        "http://0x7f.0.0.1/",
        "http://0x7f000001/",
        "http://127.0.0.01/",
        "http://127.0.0.1./",
        "http://1.2.3.4.5/",
        "http://256.0.0.1/",
        "http://example.123/",
        "http://127.0.0.1:65536/",
        "http://exa mple.com/",
        "http://example.com/a\x00b",
    ],
)
def test_a_webhook_url_with_a_non_canonical_or_broken_host_is_refused(url: str) -> None:
    assert refusal(TARGET, {"type": "webhook", "url": url}) == [("webhook", "url")]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://10.1.2.3:8080/x",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "https://api.example.com/hook",
        "http://1password.example/",
        "http://localhost:9/",
    ],
)
def test_a_webhook_url_with_a_canonical_host_is_accepted(url: str) -> None:
    accepted = TARGET.validate_python({"type": "webhook", "url": url})

    assert accepted.type == "webhook"
    assert accepted.url == url, "a canonical URL is kept as written"


# -- RabbitMQ targets ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"k": 2**63},
        {"k": -(2**63) - 1},
        {"k" * 129: 1},
        {"": 1},
        {"a\x00": 1},
        {"k": "a\x00b"},
        {"k": float("nan")},
        {f"k{i}": 1 for i in range(65)},
    ],
)
def test_rabbitmq_headers_an_amqp_table_cannot_carry_are_refused(headers: dict[str, Any]) -> None:
    target = {"type": "rabbitmq", "routing_key": "jobs", "headers": headers}

    assert refusal(TARGET, target)[0][:2] == ("rabbitmq", "headers")


def test_rabbitmq_headers_at_their_limits_are_accepted() -> None:
    headers = {"k" * 128: 2**63 - 1, "low": -(2**63), "text": "a\tb", "flag": True, "none": None}

    accepted = TARGET.validate_python(
        {"type": "rabbitmq", "routing_key": "jobs", "headers": headers}
    )

    assert accepted.type == "rabbitmq"
    assert accepted.headers == headers
    assert [type(value) for value in accepted.headers.values()] == [
        type(value) for value in headers.values()
    ], "no value coerced (True stays a bool, not 1)"


def test_an_exchange_name_fits_an_amqp_short_string() -> None:
    target = {"type": "rabbitmq", "exchange": "é" * 128, "routing_key": "jobs"}

    assert refusal(TARGET, target) == [("rabbitmq",)]


# -- payloads -----------------------------------------------------------------------------


def test_a_payload_nests_at_most_64_deep() -> None:
    deepest = nested(MAX_PAYLOAD_DEPTH)
    assert SPEC.validate_python(spec(payload=deepest)).payload == deepest
    inside = {"a": nested(MAX_PAYLOAD_DEPTH - 1)}
    assert SPEC.validate_python(spec(payload=inside)).payload == inside

    assert refusal(SPEC, spec(payload=nested(MAX_PAYLOAD_DEPTH + 1))) == [("payload",)]
    assert refusal(PATCH, {"payload": nested(300)}) == [("payload",)]
    assert refusal(SPEC, spec(payload=nested(5000))) == [("payload",)]


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param({"a": "[" * 500 + "{" * 500}, id="brackets in text are no nesting"),
        pytest.param([[], {}] * 500, id="many members, two levels"),
        pytest.param({"k": [nested(MAX_PAYLOAD_DEPTH - 2)] * 50}, id="wide at the limit"),
    ],
)
def test_a_payload_with_many_arrays_or_brackets_but_shallow_is_accepted_and_shown(
    payload: Any,
) -> None:
    assert SPEC.validate_python(spec(payload=payload)).payload == payload
    assert shown_payload(payload) == payload


def test_a_deep_payload_is_refused_among_many_shallow_members() -> None:
    payload = {"wide": [[]] * 500, "deep": nested(MAX_PAYLOAD_DEPTH)}

    assert refusal(SPEC, spec(payload=payload)) == [("payload",)]
    assert shown_payload({"wide": [[]] * 500, "deep": nested(MAX_SHOWN_DEPTH)}) is None


@pytest.mark.parametrize(
    ("payload", "loc"),
    [
        ({"a": float("nan")}, ("payload", "a")),
        ({"a": [0, float("inf")]}, ("payload", "a", 1)),
        (float("-inf"), ("payload",)),
        ({"a": {1, 2}}, ("payload", "a")),
    ],
)
def test_a_payload_that_is_not_json_is_refused_naming_its_path(
    payload: Any, loc: tuple[Any, ...]
) -> None:
    assert refusal(SPEC, spec(payload=payload)) == [loc]


def test_a_stored_payload_is_shown_unless_no_response_could_carry_it() -> None:
    assert shown_payload(nested(MAX_SHOWN_DEPTH)) == nested(MAX_SHOWN_DEPTH)
    assert shown_payload(nested(MAX_SHOWN_DEPTH + 1)) is None
    assert shown_payload({"a": "\ud800"}) is None
    assert shown_payload({"\ud800": 1}) is None
    nan = shown_payload({"a": float("nan")})  # shown; the response encoder writes null
    assert set(nan) == {"a"}
    assert shown_payload(None) is None
    assert shown_payload("text") == "text"


# -- stored definitions are trusted --------------------------------------------------------


def test_a_stored_trigger_reads_back_under_the_rules_of_its_day() -> None:
    stored = '{"type":"interval","every_seconds":1e18,"start_at":"0001-01-01T00:00:00Z"}'

    trigger = TRIGGER.validate_json(stored, strict=False, context=STORED)

    assert trigger.every_seconds == 1e18  # type: ignore[union-attr]


@pytest.mark.parametrize("stored_first", [True, False])
def test_a_url_is_judged_by_the_rules_of_where_it_comes_from_whatever_came_before(
    stored_first: bool,
) -> None:
    # Refused from a client (not dotted-quad), read back as it was stored: in either order,
    # and again and again (a batch names one URL many times).
    url = "http://2130706433:8080/" if stored_first else "http://0x7f.0.0.1:8080/"
    target = {"type": "webhook", "url": url}
    for _ in range(3):
        if stored_first:
            assert TARGET.validate_python(target, context=STORED).url == url  # type: ignore[union-attr]
        assert refusal(TARGET, target) == [("webhook", "url")]
        if not stored_first:
            assert TARGET.validate_python(target, context=STORED).url == url  # type: ignore[union-attr]


def test_a_refused_url_is_refused_at_every_item_of_a_batch_that_names_it() -> None:
    bad = {"type": "webhook", "url": "http://127.1/"}
    items = [spec(target=bad), spec(), spec(target=bad)]

    assert refusal(BATCH, {"items": items}) == [
        ("items", 0, "target", "webhook", "url"),
        ("items", 2, "target", "webhook", "url"),
    ]


def test_a_stored_target_reads_back_under_the_rules_of_its_day() -> None:
    stored = (
        '{"type":"webhook","url":"http://2130706433:99999/","timeout_seconds":86400,'
        '"headers":{"X-A":"a\\u000bb"}}'
    )

    target = TARGET.validate_json(stored, strict=False, context=STORED)

    assert target.timeout_seconds == 86400  # type: ignore[union-attr]


# -- no accepted value overflows later arithmetic ------------------------------------------

EXTREMES = [
    pytest.param({"type": "once", "at": "9998-12-31T23:59:59.999999Z"}, id="once at the end"),
    pytest.param({"type": "once", "delay_seconds": MAX_PERIOD_SECONDS}, id="longest delay"),
    pytest.param(
        {
            "type": "interval",
            "every_seconds": MAX_PERIOD_SECONDS,
            "start_at": "9998-12-31T23:59:59.999999Z",
        },
        id="longest interval from the last instant",
    ),
    pytest.param(
        {"type": "interval", "every_seconds": 1, "start_at": "1970-01-01T00:00:00Z"},
        id="shortest interval from the first instant",
    ),
    pytest.param(
        {"type": "cron", "expression": "59 23 31 12 *", "timezone": "Etc/GMT+12"},
        id="cron at the year's end, west of UTC",
    ),
    pytest.param(
        {"type": "cron", "expression": "0 0 29 2 *", "start_at": "9990-01-01T00:00:00Z"},
        id="leap day cron near the end",
    ),
    pytest.param(
        {
            "type": "cron",
            "expression": "30 2 * * *",
            "timezone": "America/New_York",
            "dst_gap": "skip",
            "start_at": "9998-01-01T00:00:00Z",
        },
        id="DST cron in the last year",
    ),
]


@pytest.mark.parametrize("spec_", EXTREMES)
def test_no_accepted_trigger_fires_past_the_horizon_or_raises(spec_: dict[str, Any]) -> None:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    trigger = resolve(TRIGGER.validate_python(spec_), now)

    times = fire_times(trigger, datetime(9998, 6, 1, tzinfo=UTC), 100, now)
    times += fire_times(trigger, now, 100, now)
    assert all(EARLIEST <= t < HORIZON for t in times)
    for t in times:
        assert t + ADDED > t  # what jitter or a DST shift adds cannot overflow
    assert next_fire_after(trigger, LAST) is None
    assert count_ticks(trigger, datetime(9998, 1, 1, tzinfo=UTC), LAST, 10_000) >= 0
    if times:
        rules = Rules(policy="skip", grace_seconds=86400 * 365, max_catchup=1000)
        plan(trigger, rules, times[-1], LAST)


def test_a_preview_stops_at_the_horizon_instead_of_overflowing() -> None:
    trigger = resolve(
        TRIGGER.validate_python(
            {
                "type": "interval",
                "every_seconds": MAX_PERIOD_SECONDS,
                "start_at": "9960-01-01T00:00:00Z",
            }
        ),
        datetime(2026, 12, 1, tzinfo=UTC),
    )

    times = fire_times(
        trigger, datetime(9959, 1, 1, tzinfo=UTC), 100, datetime(2026, 1, 1, tzinfo=UTC)
    )

    assert 0 < len(times) < 100
    assert times[-1] < HORIZON <= times[-1] + timedelta(seconds=MAX_PERIOD_SECONDS)


def test_an_offset_instant_at_the_end_converts_to_utc() -> None:
    trigger = TRIGGER.validate_python({"type": "once", "at": "9998-12-31T09:59:59-14:00"})

    assert trigger.at.astimezone(UTC) == datetime(9998, 12, 31, 23, 59, 59, tzinfo=UTC)  # type: ignore[union-attr]
    assert trigger.at.tzinfo is not None  # type: ignore[union-attr]
