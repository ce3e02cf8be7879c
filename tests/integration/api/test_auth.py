"""API keys through the HTTP API: who gets in, what a read key may do, what is recorded."""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.conftest import Harness

WRITER = "0123456789abcdef-writer"
READER = "0123456789abcdef-reader"
KEYS = f"deploy-bot:{WRITER},dash.board:{READER}:read"
# One header per scheme, Basic first: a browser answers only a header's first challenge.
CHALLENGES = ['Basic realm="chronoq"', 'Bearer realm="chronoq"']


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def basic(key: str, user: str = "anyone") -> dict[str, str]:
    token = base64.b64encode(f"{user}:{key}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def spec(harness: Harness, **extra: Any) -> dict[str, Any]:
    return {
        "event_type": "test.event",
        "payload": {"n": 1},
        "target": harness.webhook(),
        "trigger": {"type": "once", "delay_seconds": 3600},
        **extra,
    }


async def read(harness: Harness, path: str, key: str) -> dict[str, Any]:
    response = await harness.client.get(path, headers=bearer(key))
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def assert_unauthorized(response: Any) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers.get_list("www-authenticate") == CHALLENGES
    assert response.json()["status"] == 401


@pytest.mark.parametrize(
    "headers",
    [
        {},
        bearer("not-a-key-this-service-knows"),
        bearer(WRITER + "x"),
        {"Authorization": "Bearer"},
        {"Authorization": "Token " + WRITER},
        {"Authorization": WRITER},
        {"Authorization": "Basic not-base64!"},
        {"Authorization": "Basic " + base64.b64encode(WRITER.encode()).decode()},
    ],
    ids=["none", "unknown", "longer", "empty", "scheme", "bare", "bad-basic", "basic-no-colon"],
)
async def test_a_request_without_a_valid_key_is_401_with_a_challenge(
    make_harness: Callable[..., Any], headers: dict[str, str]
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        for method, path in [("GET", "/v1/schedules"), ("POST", "/v1/schedules")]:
            response = await h.client.request(method, path, headers=headers, json={})
            assert_unauthorized(response)


async def test_an_unknown_route_is_401_too_so_nothing_is_learned_without_a_key(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        assert_unauthorized(await h.client.get("/v1/nowhere"))
        assert_unauthorized(await h.client.get("/ui"))


@pytest.mark.parametrize("headers", [bearer(WRITER), basic(WRITER), basic(WRITER, user="")])
async def test_bearer_and_basic_with_the_key_as_password_both_get_in(
    make_harness: Callable[..., Any], headers: dict[str, str]
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        created = await h.client.post("/v1/schedules", json=spec(h), headers=headers)
        assert created.status_code == 201, created.text
        listed = await h.client.get("/v1/schedules", headers=headers)
        assert listed.status_code == 200
        assert [s["id"] for s in listed.json()["items"]] == [created.json()["id"]]


async def test_the_bearer_scheme_is_case_insensitive(make_harness: Callable[..., Any]) -> None:
    async with make_harness(api_keys=KEYS) as h:
        response = await h.client.get(
            "/v1/schedules", headers={"Authorization": f"bearer {WRITER}"}
        )
        assert response.status_code == 200


async def test_a_read_key_reads_but_every_change_is_403(make_harness: Callable[..., Any]) -> None:
    async with make_harness(api_keys=KEYS) as h:
        made = await h.client.post("/v1/schedules", json=spec(h), headers=bearer(WRITER))
        schedule_id = made.json()["id"]
        for path in ["/v1/schedules", f"/v1/schedules/{schedule_id}", "/v1/dead-letters"]:
            assert (await h.client.get(path, headers=bearer(READER))).status_code == 200
            assert (await h.client.head(path, headers=bearer(READER))).status_code != 403
        changes: list[tuple[str, str, dict[str, Any] | None]] = [
            ("POST", "/v1/schedules", spec(h)),
            ("POST", "/v1/schedules/batch", {"items": [spec(h)]}),
            ("PATCH", f"/v1/schedules/{schedule_id}", {"max_attempts": 2}),
            ("DELETE", f"/v1/schedules/{schedule_id}", None),
            ("POST", f"/v1/schedules/{schedule_id}/pause", None),
            ("POST", "/v1/dead-letters/replay", {"ids": []}),
        ]
        for method, path, body in changes:
            response = await h.client.request(method, path, json=body, headers=basic(READER))
            assert response.status_code == 403, (method, path, response.text)
            assert response.headers["content-type"] == "application/problem+json"
            assert "dash.board" in response.json()["detail"]
        after = await read(h, f"/v1/schedules/{schedule_id}", READER)
        assert (after["status"], after["max_attempts"]) == ("pending", made.json()["max_attempts"])


@pytest.mark.parametrize(
    "path", ["/healthz", "/readyz", "/metrics", "/docs", "/redoc", "/openapi.json"]
)
async def test_probes_metrics_and_docs_stay_open(
    make_harness: Callable[..., Any], path: str
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        response = await h.client.get(path)
        assert response.status_code == 200, response.text


async def test_the_docs_assets_stay_open(make_harness: Callable[..., Any]) -> None:
    async with make_harness(api_keys=KEYS) as h:
        response = await h.client.get("/docs/oauth2-redirect")
        assert response.status_code == 200


async def test_created_by_is_the_key_name_on_create_and_batch_create(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        one = await h.client.post("/v1/schedules", json=spec(h), headers=bearer(WRITER))
        batch = await h.client.post(
            "/v1/schedules/batch", json={"items": [spec(h), spec(h)]}, headers=basic(WRITER)
        )
        assert one.json()["created_by"] == "deploy-bot"
        assert [s["created_by"] for s in batch.json()["items"]] == ["deploy-bot"] * 2
        stored = await read(h, f"/v1/schedules/{one.json()['id']}", READER)
        assert stored["created_by"] == "deploy-bot"


async def test_created_by_is_null_when_no_keys_are_set(harness: Harness) -> None:
    one = await harness.create(trigger={"type": "once", "delay_seconds": 60})
    batch = await harness.client.post("/v1/schedules/batch", json={"items": [spec(harness)]})

    assert one["created_by"] is None
    assert batch.json()["items"][0]["created_by"] is None
    assert (await harness.get(f"/v1/schedules/{one['id']}"))["created_by"] is None


async def test_without_keys_the_api_is_open(harness: Harness) -> None:
    response = await harness.client.get("/v1/schedules", headers=bearer("anything-at-all-1234"))

    assert response.status_code == 200


async def test_a_key_never_appears_in_a_response_or_a_log_line(
    make_harness: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []
    async with make_harness(api_keys=KEYS) as h:
        for headers in [bearer(WRITER), basic(READER), bearer(WRITER[:-1] + "?"), {}]:
            for method, path, body in [
                ("POST", "/v1/schedules", spec(h)),
                ("POST", "/v1/schedules", {"bad": True}),
                ("GET", "/v1/schedules?limit=0", None),
                ("GET", "/v1/schedules/not-a-uuid", None),
                ("DELETE", "/v1/dead-letters/x", None),
            ]:
                response = await h.client.request(method, path, json=body, headers=headers)
                seen.append(response.text)
                seen.extend(f"{k}: {v}" for k, v in response.headers.items())
    text = "\n".join([*seen, caplog.text, *(str(r.__dict__) for r in caplog.records)])
    for key in (WRITER, READER, WRITER[:-1]):
        assert key not in text


async def test_the_api_keys_file_is_read(make_harness: Callable[..., Any], tmp_path: Any) -> None:
    keys = tmp_path / "keys"
    keys.write_text(f"# operators\n\nci-runner:{WRITER}\n")
    async with make_harness(api_keys_file=keys) as h:
        created = await h.client.post("/v1/schedules", json=spec(h), headers=bearer(WRITER))
        assert created.json()["created_by"] == "ci-runner"
        assert_unauthorized(await h.client.get("/v1/schedules", headers=bearer(READER)))


# -- idempotency keys are per API key -------------------------------------------------------

OTHER_WRITER = "0123456789abcdef-other-writer"


async def test_an_idempotency_key_is_scoped_to_the_api_key_that_used_it(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(api_keys=f"{KEYS},ops:{OTHER_WRITER}") as h:
        once = {"Idempotency-Key": "order-7781"}
        mine, theirs = spec(h, payload={"n": 1}), spec(h, payload={"n": 2})

        first = await h.client.post("/v1/schedules", json=mine, headers=bearer(WRITER) | once)
        other = await h.client.post(
            "/v1/schedules", json=theirs, headers=bearer(OTHER_WRITER) | once
        )
        same_body = await h.client.post(
            "/v1/schedules", json=mine, headers=bearer(OTHER_WRITER) | {"Idempotency-Key": "k2"}
        )
        again = await h.client.post("/v1/schedules", json=mine, headers=bearer(WRITER) | once)
        theirs_again = await h.client.post(
            "/v1/schedules", json=theirs, headers=bearer(OTHER_WRITER) | once
        )
        conflict = await h.client.post("/v1/schedules", json=theirs, headers=bearer(WRITER) | once)

        assert (first.status_code, other.status_code, same_body.status_code) == (201, 201, 201)
        assert other.json()["id"] != first.json()["id"]
        assert (other.json()["payload"], other.json()["created_by"]) == ({"n": 2}, "ops")
        assert (again.status_code, again.json()["id"]) == (200, first.json()["id"])
        assert (theirs_again.status_code, theirs_again.json()["id"]) == (200, other.json()["id"])
        assert conflict.status_code == 409, conflict.text
        listed = (await read(h, "/v1/schedules", READER))["items"]
        assert len(listed) == 3


async def test_another_api_key_with_the_same_idempotency_key_and_body_gets_its_own_schedule(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(api_keys=f"{KEYS},ops:{OTHER_WRITER}") as h:
        once = {"Idempotency-Key": "k" * 255}  # the longest key the header takes
        body = spec(h)

        first = await h.client.post("/v1/schedules", json=body, headers=bearer(WRITER) | once)
        other = await h.client.post("/v1/schedules", json=body, headers=bearer(OTHER_WRITER) | once)
        replayed = await h.client.post(
            "/v1/schedules", json=body, headers=bearer(OTHER_WRITER) | once
        )

        assert (first.status_code, other.status_code, replayed.status_code) == (201, 201, 200)
        assert first.json()["id"] != other.json()["id"]
        assert replayed.json()["id"] == other.json()["id"]
        assert (first.json()["created_by"], other.json()["created_by"]) == ("deploy-bot", "ops")
