"""Secrets in responses (DESIGN 8): every response that shows a target redacts its signing
secret, credential headers and URL password; writes, the store and deliveries keep the real
values, and a PATCH that sends a redacted form back keeps the stored one."""

from __future__ import annotations

import base64
import logging
from typing import Any

import pytest
from standardwebhooks import Webhook

from app.api.target_schemas import EndpointTargetOut, TopicTargetOut, target_out
from app.domain.limits import STORED
from app.domain.target import RabbitMQTarget, WebhookTarget
from tests.integration.cli.test_operator_commands import as_json, ok
from tests.integration.conftest import Harness
from tests.receiver import Reply

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SHOWN = "whsec_…LaSw"
NEW_SECRET = "whsec_c2Vjb25kIHNlY3JldCBrZXkgZm9yIHRlc3Rz"
TOKEN = "Bearer s3cr3t-t0ken-value"
PASSWORD = "pa55-w0rd-value"
# Not due during a test: deliveries come from POST .../trigger after the change under test.
LATER = {"type": "once", "at": "2099-01-01T00:00:00Z"}


def url_with_password(harness: Harness, path: str = "/hook") -> str:
    return f"http://alice:{PASSWORD}@127.0.0.1:{harness.receiver.port}{path}"


async def patch(harness: Harness, schedule_id: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await harness.client.patch(f"/v1/schedules/{schedule_id}", json=body)
    assert response.status_code == 200, response.text
    assert SECRET not in response.text
    result: dict[str, Any] = response.json()
    return result


async def problem(harness: Harness, method: str, path: str, body: Any) -> dict[str, Any]:
    response = await harness.client.request(method, path, json=body)
    assert response.status_code == 422, response.text
    result: dict[str, Any] = response.json()
    return result


def pointers(problem: dict[str, Any]) -> list[str]:
    return [error["pointer"] for error in problem.get("errors", [])]


# -- the target's own signing secret ------------------------------------------------------


async def test_the_signing_secret_shows_redacted_in_every_response(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="app")
    harness.receiver.always("/gone", Reply(410, body="gone"))
    target = harness.webhook("/gone", signing_secret=SECRET)
    texts: list[str] = []

    created = await harness.client.post(
        "/v1/schedules",
        json={"event_type": "e", "target": target, "trigger": {"type": "immediate"}},
        headers={"Idempotency-Key": "k-1"},
    )
    replayed = await harness.client.post(
        "/v1/schedules",
        json={"event_type": "e", "target": target, "trigger": {"type": "immediate"}},
        headers={"Idempotency-Key": "k-1"},
    )
    assert (created.status_code, replayed.status_code) == (201, 200)
    schedule_id = created.json()["id"]
    batch = await harness.client.post(
        "/v1/schedules/batch",
        json={"items": [{"event_type": "e", "target": target, "trigger": {"type": "immediate"}}]},
    )
    assert batch.status_code == 201, batch.text
    texts += [created.text, replayed.text, batch.text]
    for path in ("/v1/schedules", f"/v1/schedules/{schedule_id}"):
        response = await harness.client.get(path)
        texts.append(response.text)
    patched = await harness.client.patch(
        f"/v1/schedules/{schedule_id}", json={"target": {**target, "timeout_seconds": 5}}
    )
    texts.append(patched.text)
    await harness.step()
    dead = await harness.client.get("/v1/dead-letters")
    (letter,) = [d for d in dead.json()["items"] if d["schedule_id"] == schedule_id]
    one = await harness.client.get(f"/v1/dead-letters/{letter['occurrence_id']}")
    texts += [dead.text, one.text]

    for text in texts:
        assert SECRET not in text
        assert SECRET.removeprefix("whsec_") not in text
    assert created.json()["target"]["signing_secret"] == SHOWN
    assert batch.json()["items"][0]["target"]["signing_secret"] == SHOWN
    assert patched.json()["target"]["signing_secret"] == SHOWN
    assert one.json()["target"]["signing_secret"] == SHOWN
    assert SECRET not in caplog.text


async def test_a_target_without_its_own_secret_shows_null(harness: Harness) -> None:
    created = await harness.create()

    assert created["target"]["signing_secret"] is None


async def test_a_malformed_signing_secret_is_a_422_naming_the_field_without_echoing_it(
    harness: Harness,
) -> None:
    secret = "whsec_not!base64"
    body = {"event_type": "e", "target": harness.webhook(signing_secret=secret)}
    body["trigger"] = {"type": "immediate"}

    refused = await problem(harness, "POST", "/v1/schedules", body)

    assert pointers(refused) == ["#/target/signing_secret"]
    assert secret not in str(refused)


async def test_a_redacted_secret_on_create_is_refused_naming_the_field(harness: Harness) -> None:
    body = {"event_type": "e", "target": harness.webhook(signing_secret=SHOWN)}
    body["trigger"] = {"type": "immediate"}

    refused = await problem(harness, "POST", "/v1/schedules", body)

    assert pointers(refused) == ["#/target/signing_secret"]


async def test_a_patch_sending_the_redacted_secret_back_keeps_the_stored_one(
    harness: Harness,
) -> None:
    created = await harness.create(target=harness.webhook(signing_secret=SECRET), trigger=LATER)
    shown = (await harness.get(f"/v1/schedules/{created['id']}"))["target"]

    patched = await patch(harness, created["id"], {"target": {**shown, "method": "PUT"}})
    await harness.client.post(f"/v1/schedules/{created['id']}/trigger")
    await harness.step()

    assert patched["target"]["signing_secret"] == SHOWN
    (request,) = harness.receiver.requests
    assert request.method == "PUT"
    assert Webhook(SECRET).verify(request.body, request.headers) == {"n": 1}


async def test_a_patch_with_a_new_secret_signs_with_the_new_one(harness: Harness) -> None:
    created = await harness.create(target=harness.webhook(signing_secret=SECRET), trigger=LATER)

    patched = await patch(
        harness, created["id"], {"target": harness.webhook(signing_secret=NEW_SECRET)}
    )
    await harness.client.post(f"/v1/schedules/{created['id']}/trigger")
    await harness.step()

    assert patched["target"]["signing_secret"] == "whsec_…" + NEW_SECRET[-4:]
    (request,) = harness.receiver.requests
    assert Webhook(NEW_SECRET).verify(request.body, request.headers) == {"n": 1}


async def test_a_patch_sending_another_redacted_form_is_refused(harness: Harness) -> None:
    created = await harness.create(target=harness.webhook(signing_secret=SECRET))

    refused = await problem(
        harness,
        "PATCH",
        f"/v1/schedules/{created['id']}",
        {"target": harness.webhook(signing_secret="whsec_…abcd")},
    )

    assert pointers(refused) == ["#/target/signing_secret"]


# -- credential headers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        # Proxy-Authorization is refused on webhooks (hop-by-hop); see the RabbitMQ case.
        "Authorization",
        "Cookie",
        "X-Api-Key",
        "x-auth-token",
        "Client-Secret",
        "X-Password",
        "X-Auth",
        "X-Credential",
        "Api-Signature",
        "X-Pass",
        "X-Session",
        "X-Amz-Security-Token",
        "X-Jwt",
        "X-Bearer",
        "X-Hmac",
        "X-Sig",
        "X-Otp",
        "X-Pwd",
    ],
)
async def test_a_credential_header_shows_redacted_and_is_delivered_as_written(
    harness: Harness, name: str
) -> None:
    created = await harness.create(
        target=harness.webhook(headers={name: TOKEN, "X-Tenant": "acme"})
    )
    fetched = await harness.get(f"/v1/schedules/{created['id']}")
    listed = (await harness.get("/v1/schedules"))["items"]
    await harness.step()

    for shown in (created["target"], fetched["target"], listed[0]["target"]):
        assert shown["headers"] == {name: "***", "X-Tenant": "acme"}
    (request,) = harness.receiver.requests
    assert request.headers[name] == TOKEN


async def test_the_url_password_shows_redacted_and_is_delivered_as_written(
    harness: Harness,
) -> None:
    created = await harness.create(target={"type": "webhook", "url": url_with_password(harness)})
    await harness.step()

    port = harness.receiver.port
    assert created["target"]["url"] == f"http://alice:***@127.0.0.1:{port}/hook"
    assert PASSWORD not in str(await harness.get(f"/v1/schedules/{created['id']}"))
    (request,) = harness.receiver.requests
    basic = base64.b64decode(request.headers["Authorization"].removeprefix("Basic ")).decode()
    assert basic == f"alice:{PASSWORD}"


async def test_secret_query_parameters_show_redacted_and_are_delivered_as_written(
    harness: Harness,
) -> None:
    query = f"token={PASSWORD}&page=2&api_key={PASSWORD}x&X-Session=s3ss"
    created = await harness.create(target=harness.webhook(f"/hook?{query}"))
    fetched = await harness.get(f"/v1/schedules/{created['id']}")
    listed = (await harness.get("/v1/schedules"))["items"]
    await harness.step()

    port = harness.receiver.port
    shown = f"http://127.0.0.1:{port}/hook?token=***&page=2&api_key=***&X-Session=***"
    for target in (created["target"], fetched["target"], listed[0]["target"]):
        assert target["url"] == shown
    assert PASSWORD not in str(listed)
    assert "s3ss" not in str(listed)
    (request,) = harness.receiver.requests
    assert request.query == query


async def test_short_secret_query_parameters_show_redacted_and_are_delivered_as_written(
    harness: Harness,
) -> None:
    query = f"sig={PASSWORD}1&jwt={PASSWORD}2&pwd={PASSWORD}3&code={PASSWORD}4&design=d"
    created = await harness.create(target=harness.webhook(f"/hook?{query}"))
    listed = (await harness.get("/v1/schedules"))["items"]
    await harness.step()

    port = harness.receiver.port
    shown = f"http://127.0.0.1:{port}/hook?sig=***&jwt=***&pwd=***&code=***&design=d"
    assert created["target"]["url"] == listed[0]["target"]["url"] == shown
    assert PASSWORD not in str(listed)
    (request,) = harness.receiver.requests
    assert request.query == query


async def test_a_url_user_without_a_password_shows_redacted_and_is_delivered_as_written(
    harness: Harness,
) -> None:
    port = harness.receiver.port
    created = await harness.create(
        target={"type": "webhook", "url": f"http://{PASSWORD}@127.0.0.1:{port}/hook"},
        trigger=LATER,
    )
    shown = (await harness.get(f"/v1/schedules/{created['id']}"))["target"]
    # Sent back as shown, the placeholder keeps the stored user.
    patched = await patch(harness, created["id"], {"target": shown, "payload": {"n": 2}})
    await harness.client.post(f"/v1/schedules/{created['id']}/trigger")
    await harness.step()

    assert created["target"]["url"] == shown["url"] == f"http://***@127.0.0.1:{port}/hook"
    assert patched["target"]["url"] == shown["url"]
    assert PASSWORD not in str(await harness.get(f"/v1/schedules/{created['id']}"))
    (request,) = harness.receiver.requests
    basic = base64.b64decode(request.headers["Authorization"].removeprefix("Basic ")).decode()
    assert basic == f"{PASSWORD}:"


async def test_a_patch_sending_a_redacted_query_value_back_keeps_the_stored_one(
    harness: Harness,
) -> None:
    created = await harness.create(
        target=harness.webhook(f"/hook?token={PASSWORD}&page=1"), trigger=LATER
    )
    shown = (await harness.get(f"/v1/schedules/{created['id']}"))["target"]

    changed = {**shown, "url": shown["url"].replace("page=1", "page=2")}
    patched = await patch(harness, created["id"], {"target": changed})
    await harness.client.post(f"/v1/schedules/{created['id']}/trigger")
    await harness.step()

    assert patched["target"]["url"].endswith("/hook?token=***&page=2")
    (request,) = harness.receiver.requests
    assert request.query == f"token={PASSWORD}&page=2"


async def test_rabbitmq_target_headers_with_credential_names_show_redacted() -> None:
    target = RabbitMQTarget(
        type="rabbitmq",
        routing_key="jobs",
        headers={"x-session": "s", "X-Signature": "sig", "x-auth": "a", "x-kind": "report"},
    )

    shown_target = target_out(target)
    assert not isinstance(shown_target, EndpointTargetOut | TopicTargetOut)
    assert shown_target.headers == {
        "x-session": "***",
        "X-Signature": "***",
        "x-auth": "***",
        "x-kind": "report",
    }


async def test_dead_letters_show_the_target_redacted(harness: Harness) -> None:
    harness.receiver.always("/gone", Reply(410))
    target = harness.webhook("/gone", headers={"X-Api-Key": TOKEN})
    target["url"] = url_with_password(harness, "/gone")
    created = await harness.create(target=target)
    await harness.step()

    letter = await harness.get(f"/v1/dead-letters/{created['next_occurrence_id']}")
    listed = (await harness.get("/v1/dead-letters"))["items"]

    for shown in (letter["target"], listed[0]["target"]):
        assert shown["headers"] == {"X-Api-Key": "***"}
        assert shown["url"].startswith("http://alice:***@")
    assert TOKEN not in str(listed)
    assert PASSWORD not in str(listed)


async def test_a_get_modify_patch_round_trip_keeps_the_real_values(harness: Harness) -> None:
    target = {
        "type": "webhook",
        "url": url_with_password(harness),
        "headers": {"X-Api-Key": TOKEN, "X-Tenant": "acme"},
        "signing_secret": SECRET,
    }
    created = await harness.create(target=target, trigger=LATER)
    shown = (await harness.get(f"/v1/schedules/{created['id']}"))["target"]

    changed = {**shown, "headers": {**shown["headers"], "X-Tenant": "beta"}, "method": "PUT"}
    changed["url"] = changed["url"] + "?page=2"
    patched = await patch(harness, created["id"], {"target": changed})
    await harness.client.post(f"/v1/schedules/{created['id']}/trigger")
    await harness.step()

    assert patched["target"] == changed
    (request,) = harness.receiver.requests
    assert (request.method, request.path, request.query) == ("PUT", "/hook", "page=2")
    assert request.headers["X-Api-Key"] == TOKEN
    assert request.headers["X-Tenant"] == "beta"
    basic = base64.b64decode(request.headers["Authorization"].removeprefix("Basic ")).decode()
    assert basic == f"alice:{PASSWORD}"
    assert Webhook(SECRET).verify(request.body, request.headers) == {"n": 1}


async def test_a_patch_sending_a_new_header_value_replaces_the_stored_one(
    harness: Harness,
) -> None:
    created = await harness.create(
        target=harness.webhook(headers={"Authorization": TOKEN}),
        trigger=LATER,
    )

    await patch(
        harness, created["id"], {"target": harness.webhook(headers={"Authorization": "Bearer 2"})}
    )
    await harness.client.post(f"/v1/schedules/{created['id']}/trigger")
    await harness.step()

    (request,) = harness.receiver.requests
    assert request.headers["Authorization"] == "Bearer 2"


async def test_placeholders_do_not_follow_the_target_to_another_address(
    harness: Harness,
) -> None:
    created = await harness.create(target=harness.webhook(headers={"Authorization": TOKEN}))
    shown = (await harness.get(f"/v1/schedules/{created['id']}"))["target"]
    elsewhere = {**shown, "url": "http://127.0.0.2:9/hook"}

    refused = await problem(
        harness, "PATCH", f"/v1/schedules/{created['id']}", {"target": elsewhere}
    )

    assert pointers(refused) == ["#/target/headers/Authorization"]
    kept = await harness.get(f"/v1/schedules/{created['id']}")
    assert kept["target"]["url"] == shown["url"]


@pytest.mark.parametrize(
    ("target", "pointer"),
    [
        ({"headers": {"Authorization": TOKEN}}, "#/target/headers/Authorization"),
        ({"headers": {"X-Api-Key": TOKEN}}, "#/target/headers/X-Api-Key"),
        ({"url": "URL_WITH_PASSWORD"}, "#/target/url"),
        ({"url": f"/hook?token={PASSWORD}"}, "#/target/url"),
    ],
)
async def test_placeholders_do_not_follow_the_target_to_another_path_on_its_host(
    harness: Harness, target: dict[str, Any], pointer: str
) -> None:
    # A second writer points the target at a path of the same host that echoes what it is
    # sent, sending the placeholders back: the stored credentials must not go there.
    url = target.get("url", "/hook")
    url = url_with_password(harness) if url == "URL_WITH_PASSWORD" else harness.receiver.url(url)
    created = await harness.create(target={**harness.webhook(), **target, "url": url})
    shown = (await harness.get(f"/v1/schedules/{created['id']}"))["target"]
    echo = {**shown, "url": shown["url"].replace("/hook", "/echo")}

    refused = await problem(harness, "PATCH", f"/v1/schedules/{created['id']}", {"target": echo})
    await harness.client.post(f"/v1/schedules/{created['id']}/trigger")
    await harness.step()

    assert pointers(refused) == [pointer]
    assert (await harness.get(f"/v1/schedules/{created['id']}"))["target"] == shown
    assert harness.receiver.on("/echo") == []


async def test_the_signing_secret_placeholder_stays_with_the_target_s_origin(
    harness: Harness,
) -> None:
    created = await harness.create(target=harness.webhook(signing_secret=SECRET), trigger=LATER)
    shown = (await harness.get(f"/v1/schedules/{created['id']}"))["target"]
    elsewhere = {**shown, "url": "http://127.0.0.2:9/hook"}

    refused = await problem(
        harness, "PATCH", f"/v1/schedules/{created['id']}", {"target": elsewhere}
    )
    moved = await patch(
        harness, created["id"], {"target": {**shown, "url": harness.receiver.url("/other")}}
    )
    await harness.client.post(f"/v1/schedules/{created['id']}/trigger")
    await harness.step()

    assert pointers(refused) == ["#/target/signing_secret"]
    assert moved["target"]["signing_secret"] == SHOWN
    (request,) = harness.receiver.on("/other")
    assert Webhook(SECRET).verify(request.body, request.headers) == {"n": 1}


@pytest.mark.parametrize(
    ("target", "pointer"),
    [
        ({"headers": {"Authorization": "***"}}, "#/target/headers/Authorization"),
        ({"url": "http://alice:***@127.0.0.1:9/hook"}, "#/target/url"),
    ],
)
async def test_a_placeholder_on_create_is_refused_naming_the_field(
    harness: Harness, target: dict[str, Any], pointer: str
) -> None:
    body = {"event_type": "e", "target": {**harness.webhook(), **target}}
    body["trigger"] = {"type": "immediate"}

    refused = await problem(harness, "POST", "/v1/schedules", body)

    assert pointers(refused) == [pointer]


async def test_a_placeholder_in_a_batch_is_refused_naming_the_item(harness: Harness) -> None:
    item = {"event_type": "e", "trigger": {"type": "immediate"}}
    items = [
        {**item, "target": harness.webhook()},
        {**item, "target": harness.webhook(signing_secret=SHOWN)},
    ]

    refused = await problem(harness, "POST", "/v1/schedules/batch", {"items": items})

    assert pointers(refused) == ["#/items/1/target/signing_secret"]


def test_rabbitmq_target_headers_show_redacted() -> None:
    headers: dict[str, str | int | float | bool | None] = {
        "x-api-key": "k3y",
        "Proxy-Authorization": "Basic eDp5",
        "x-tenant": "acme",
        "x-count": 3,
    }
    target = RabbitMQTarget(type="rabbitmq", routing_key="jobs", headers=headers)

    shown = target_out(target)

    assert not isinstance(shown, EndpointTargetOut | TopicTargetOut)
    assert shown.headers == {
        "x-api-key": "***",
        "Proxy-Authorization": "***",
        "x-tenant": "acme",
        "x-count": 3,
    }
    assert target.headers == headers


# -- credentials in the URL and in a header -------------------------------------------------


@pytest.mark.parametrize(
    ("userinfo", "name"),
    [
        (f"alice:{PASSWORD}@", "Authorization"),
        (f"alice:{PASSWORD}@", "authorization"),
        ("alice@", "Authorization"),
        ("@", "AUTHORIZATION"),
    ],
)
async def test_a_url_with_userinfo_and_an_authorization_header_is_refused_naming_the_header(
    harness: Harness, userinfo: str, name: str
) -> None:
    url = harness.receiver.url().replace("http://", f"http://{userinfo}")
    target = {**harness.webhook(), "url": url, "headers": {name: TOKEN}}
    body = {"event_type": "e", "target": target, "trigger": {"type": "immediate"}}

    refused = await problem(harness, "POST", "/v1/schedules", body)

    assert pointers(refused) == [f"#/target/headers/{name}"]
    assert PASSWORD not in str(refused)
    assert TOKEN not in str(refused)
    assert (await harness.get("/v1/schedules"))["items"] == []


async def test_a_patch_adding_userinfo_to_a_target_with_an_authorization_header_is_refused(
    harness: Harness,
) -> None:
    created = await harness.create(target=harness.webhook(headers={"Authorization": TOKEN}))

    refused = await problem(
        harness,
        "PATCH",
        f"/v1/schedules/{created['id']}",
        {
            "target": harness.webhook(headers={"Authorization": TOKEN})
            | {"url": url_with_password(harness)}
        },
    )

    assert pointers(refused) == ["#/target/headers/Authorization"]
    kept = await harness.get(f"/v1/schedules/{created['id']}")
    assert kept["target"]["url"] == harness.receiver.url()


def test_a_stored_target_with_userinfo_and_an_authorization_header_still_reads() -> None:
    stored = {
        "type": "webhook",
        "url": f"http://alice:{PASSWORD}@127.0.0.1:9/hook",
        "headers": {"Authorization": TOKEN},
    }

    target = WebhookTarget.model_validate(stored, context=STORED)

    assert target.headers == {"Authorization": TOKEN}


# -- the operator CLI ------------------------------------------------------------------------


async def test_the_operator_cli_prints_targets_redacted(
    harness: Harness, database_url: str
) -> None:
    target = {
        "type": "webhook",
        "url": url_with_password(harness) + f"?page=2&token={PASSWORD}&sig={PASSWORD}",
        "headers": {"X-Credential": TOKEN, "X-Jwt": TOKEN},
        "signing_secret": SECRET,
    }
    created = await harness.create(target=target, trigger=LATER)

    listed = await as_json("list", database_url=database_url)
    inspected = await as_json("inspect", created["id"], database_url=database_url)
    text = await ok("inspect", created["id"], database_url=database_url)
    table = await ok("list", database_url=database_url)

    assert inspected["schedule"] == await harness.get(f"/v1/schedules/{created['id']}")
    assert listed[0]["target"] == inspected["schedule"]["target"]
    for output in (str(listed), str(inspected), text, table):
        assert SECRET not in output
        assert TOKEN not in output
        assert PASSWORD not in output
    assert "alice:***@" in text
    assert "?page=2&token=***&sig=***" in text
    assert inspected["schedule"]["target"]["headers"] == {"X-Credential": "***", "X-Jwt": "***"}
