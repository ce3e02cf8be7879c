"""When the client sends a call again: after a 503 or a failed connection, as many times as
it may, after the service's Retry-After; never a change that a second send could make twice.

The service here is a script of answers (httpx.MockTransport): what is tested is the
client's reading of them, and how long it waits is read off the pauses it asks for.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from app.client import (
    Client,
    FieldError,
    ForbiddenError,
    UnavailableError,
    UnreachableError,
    ValidationError,
    calls,
)
from app.client import clients as client_module

ID = "0b8a3b0e-8a58-4bb5-9c8e-0f8f3a1c2d4e"
SCHEDULE: dict[str, Any] = {
    "id": ID,
    "name": None,
    "event_type": "e",
    "payload": None,
    "target": {
        "type": "webhook",
        "url": "http://127.0.0.1:9/h",
        "method": "POST",
        "headers": {},
        "timeout_seconds": 10.0,
        "signing_secret": None,
    },
    "trigger": {"type": "immediate"},
    "max_attempts": 5,
    "labels": {},
    "jitter_seconds": 0.0,
    "misfire_policy": "fire_once",
    "misfire_grace_seconds": 60.0,
    "max_catchup": 100,
    "max_occurrences": None,
    "status": "pending",
    "next_fire_at": None,
    "next_occurrence_id": None,
    "attempts": 0,
    "last_error": None,
    "fire_count": 0,
    "last_fired_at": None,
    "skipped_count": 0,
    "last_skip_reason": None,
    "created_at": "2026-12-01T08:00:00Z",
    "updated_at": "2026-12-01T08:00:00Z",
    "version": 1,
    "created_by": None,
    "pause_after_failures": None,
    "pause_reason": None,
    "consecutive_failures": 0,
    "flow_key": None,
    "retry": None,
    "on_failure": None,
}


def unavailable(retry_after: str | None = "1") -> httpx.Response:
    headers = {"Content-Type": "application/problem+json"}
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    body = {"type": "about:blank", "title": "Service Unavailable", "status": 503, "detail": "db"}
    return httpx.Response(503, headers=headers, content=json.dumps(body))


class Script:
    """Answers in order; records each request and each pause the client asks for."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    asked: list[float] = []
    monkeypatch.setattr(client_module, "time", SimpleNamespace(sleep=asked.append))
    return asked


@pytest.fixture
def client() -> Iterator[Callable[..., tuple[Client, Script]]]:
    made: list[Client] = []

    def build(*answers: httpx.Response | Exception, **options: Any) -> tuple[Client, Script]:
        script = Script(*answers)
        chronoq = Client("http://chronoq.test", transport=httpx.MockTransport(script), **options)
        made.append(chronoq)
        return chronoq, script

    yield build
    for chronoq in made:
        chronoq.close()


def test_a_read_is_sent_again_after_each_503_waiting_what_retry_after_says(
    client: Callable[..., tuple[Client, Script]], pauses: list[float]
) -> None:
    chronoq, script = client(unavailable("2"), unavailable("0"), httpx.Response(200, json=SCHEDULE))

    schedule = chronoq.get_schedule(ID)

    assert str(schedule.id) == ID
    assert len(script.requests) == 3
    assert pauses == [2.0, 0.0]


def test_a_long_retry_after_is_capped(
    client: Callable[..., tuple[Client, Script]], pauses: list[float]
) -> None:
    chronoq, _ = client(unavailable("3600"), httpx.Response(200, json=SCHEDULE))
    chronoq.get_schedule(ID)
    assert pauses == [client_module.MAX_PAUSE]


def test_without_retry_after_the_pause_is_jittered_under_a_doubling_ceiling(
    client: Callable[..., tuple[Client, Script]], pauses: list[float]
) -> None:
    chronoq, _ = client(
        unavailable(None), unavailable(None), unavailable(None), httpx.Response(200, json=SCHEDULE)
    )
    chronoq.get_schedule(ID)
    assert len(pauses) == 3
    for tries, pause in enumerate(pauses, start=1):
        assert 0 <= pause <= min(0.5 * 2**tries, client_module.MAX_PAUSE)


def test_the_last_503_is_raised_once_the_retries_are_spent(
    client: Callable[..., tuple[Client, Script]], pauses: list[float]
) -> None:
    chronoq, script = client(*(unavailable("0") for _ in range(3)), retries=2)
    with pytest.raises(UnavailableError) as refused:
        chronoq.list_schedules()
    assert refused.value.retry_after == 0.0
    assert len(script.requests) == 3


def test_a_change_without_a_guard_is_sent_once(
    client: Callable[..., tuple[Client, Script]], pauses: list[float]
) -> None:
    """A replay's answer lost to a 503 from a proxy may have been carried out: sending it
    again could deliver twice, so the 503 is the caller's to judge."""
    chronoq, script = client(unavailable("0"))
    with pytest.raises(UnavailableError):
        chronoq.replay_dead_letter(ID)
    assert len(script.requests) == 1
    assert pauses == []


def test_a_create_carries_an_idempotency_key_and_is_sent_again_under_it(
    client: Callable[..., tuple[Client, Script]], pauses: list[float]
) -> None:
    chronoq, script = client(
        httpx.ReadTimeout("lost"), httpx.Response(201, json=SCHEDULE), retries=1
    )
    chronoq.create_schedule({"event_type": "e"})
    keys = [r.headers["Idempotency-Key"] for r in script.requests]
    assert len(keys) == 2
    assert keys[0] == keys[1]
    assert len(keys[0]) == 36


def test_a_guarded_change_is_sent_again_after_a_lost_answer(
    client: Callable[..., tuple[Client, Script]], pauses: list[float]
) -> None:
    """A repeat of a change under If-Match is a 412 at worst, never a second change."""
    chronoq, script = client(httpx.ReadError("reset"), httpx.Response(200, json=SCHEDULE))
    chronoq.pause_schedule(ID, if_match=4)
    assert [r.headers["If-Match"] for r in script.requests] == ['"4"', '"4"']


def test_an_answer_lost_on_an_unguarded_change_is_an_unreachable_service(
    client: Callable[..., tuple[Client, Script]], pauses: list[float]
) -> None:
    chronoq, script = client(httpx.ReadError("reset"))
    with pytest.raises(UnreachableError, match=r"chronoq\.test"):
        chronoq.trigger_schedule(ID)
    assert len(script.requests) == 1


def test_a_connection_never_made_is_tried_again_for_any_call(
    client: Callable[..., tuple[Client, Script]], pauses: list[float]
) -> None:
    chronoq, script = client(
        httpx.ConnectError("refused"),
        httpx.Response(200, json={"occurrence_id": ID, "status": "pending"}),
    )
    accepted = chronoq.replay_dead_letter(ID)
    assert accepted.status == "pending"
    assert len(script.requests) == 2


def test_a_422_carries_each_field_error(client: Callable[..., tuple[Client, Script]]) -> None:
    body = {
        "type": "https://chronoq.dev/problems/validation",
        "title": "Unprocessable Content",
        "status": 422,
        "detail": "1 field is invalid",
        "errors": [
            {"field": "trigger.expression", "pointer": "#/trigger/expression", "detail": "bad"},
            {"field": "limit", "parameter": "limit", "detail": "too big"},
            "not an object",
        ],
    }
    chronoq, _ = client(httpx.Response(422, json=body))
    with pytest.raises(ValidationError) as refused:
        chronoq.list_schedules(limit=10_000)
    assert refused.value.errors == (
        FieldError("trigger.expression", "bad", pointer="#/trigger/expression"),
        FieldError("limit", "too big", parameter="limit"),
    )
    assert refused.value.type == body["type"]
    assert "1 field is invalid" in str(refused.value)


def test_a_refusal_that_is_not_json_still_names_its_status(
    client: Callable[..., tuple[Client, Script]],
) -> None:
    chronoq, _ = client(httpx.Response(403, text="<html>denied by the proxy</html>"))
    with pytest.raises(ForbiddenError) as refused:
        chronoq.get_schedule(ID)
    assert refused.value.status == 403
    assert "denied by the proxy" in refused.value.detail


def test_the_key_is_sent_as_a_bearer_token(
    client: Callable[..., tuple[Client, Script]], tmp_path: Any
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("ck_secret\n")
    chronoq, script = client(httpx.Response(200, json=SCHEDULE), api_key_file=key_file)
    chronoq.get_schedule(ID)
    assert script.requests[0].headers["Authorization"] == "Bearer ck_secret"
    assert script.requests[0].headers["User-Agent"].startswith("chronoq-client")


def test_path_segments_are_escaped() -> None:
    call = calls.get_flow_key("a/b?c")
    assert call.path == "/v1/flow-keys/a%2Fb%3Fc"
