"""`chronoq topic put|list|show|delete` and `chronoq subscription
create|list|show|update|delete`, over HTTP (the harness's app served on 127.0.0.1,
`CHRONOQ_URL`) and on the database (break-glass), with the same output: every field set and
shown, agreeing with /v1/topics and /v1/subscriptions; a change under a stale version
refused; a subscription naming a topic or an endpoint the tenant does not have refused
naming the option; a topic's removal refused while a schedule targets it; the dead letters
of a fan-out listed and replayed by subscription, endpoint and time. In-process
(commands.in_process), but for one case of the script itself."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from tests.conftest import EMBEDDED_ONLY
from tests.integration.cli import commands
from tests.integration.cli.test_endpoint_commands import Run, backend, cli, ok, refused
from tests.integration.cli.test_operator_commands import (
    UNREACHABLE,
    assert_aligned,
    chronoq,
    columns,
    one_line,
)
from tests.integration.cli.test_tenant_commands import fields
from tests.integration.conftest import Harness
from tests.receiver import Reply

__all__ = ["backend", "cli"]  # the fixtures, shared with the endpoint commands' cases

UNKNOWN = "0b8a3b0e-8a58-4bb5-9c8e-0f8f3a1c2d4e"


def described(text: str) -> dict[str, str]:
    """The field list of a command's text (after its headline, if any)."""
    return fields(text.split("\n\n")[-1])


async def an_endpoint(harness: Harness, path: str = "/endpoint") -> str:
    response = await harness.client.post("/v1/endpoints", json={"url": harness.receiver.url(path)})
    assert response.status_code == 201, response.text
    made: str = response.json()["id"]
    return made


async def subscribe(cli: Run, *options: str) -> str:
    """A new subscription's id, as `create` printed it."""
    text = await ok(cli, "subscription", "create", *options)
    made = re.match(r"created subscription (\S+) \(version 1\): ", text)
    assert made is not None, text
    return made.group(1)


async def test_a_topic_is_put_shown_listed_replaced_and_deleted(cli: Run, harness: Harness) -> None:
    text = await ok(cli, "topic", "put", "billing", "--description", "Billing events")

    assert text.startswith("created topic billing (version 1)\n\n")
    shown = described(text)
    assert (shown["topic"], shown["description"], shown["subscriptions"], shown["version"]) == (
        "billing",
        "Billing events",
        "0",
        "1",
    )
    # --format json is the API's answer.
    as_json = json.loads(await ok(cli, "topic", "show", "billing", "--format", "json"))
    assert as_json == await harness.get("/v1/topics/billing")
    assert fields(await ok(cli, "topic", "show", "billing")) == shown
    await ok(cli, "topic", "put", "alerts")

    listed = await ok(cli, "topic", "list")
    titles, _, _ = columns(listed)
    assert titles == ["NAME", "SUBSCRIPTIONS", "VERSION", "UPDATED AT", "DESCRIPTION"]
    first, second = assert_aligned(listed)
    assert (first[:3], first[4]) == (["alerts", "0", "1"], "-")
    assert (second[:3], second[4]) == (["billing", "0", "1"], "Billing events")
    assert (await ok(cli, "topic", "list", "--limit", "1")).endswith(
        "(the first 1 topics, in name order; more exist: raise --limit or pass --all)\n"
    )

    stale = await refused(cli, "topic", "put", "billing", "--if-match", "2")
    assert "topic billing was not replaced" in stale
    replaced = await ok(cli, "topic", "put", "billing", "--if-match", "1")
    assert replaced.startswith("replaced topic billing (now version 2)\n\n")
    assert described(replaced)["description"] == "-"
    bad = await refused(cli, "topic", "put", "billing", "--description", "two\nlines", status=2)
    assert bad.startswith("chronoq: argument --description: ")
    name = await refused(cli, "topic", "show", "no/slash", status=2)
    assert "is not a topic name" in name

    assert "9" in await refused(cli, "topic", "delete", "billing", "--if-match", "9")
    deleted = await ok(cli, "topic", "delete", "billing", "--if-match", "2")
    assert deleted == "deleted topic billing and its subscriptions\n"
    missing = await refused(cli, "topic", "show", "billing")
    assert missing.startswith("chronoq: topic billing not found")
    every = json.loads(await ok(cli, "topic", "list", "--all", "--format", "json"))
    assert every == (await harness.get("/v1/topics"))["items"]
    assert [t["name"] for t in every] == ["alerts"]


async def test_a_subscription_is_made_shown_listed_updated_and_deleted(
    cli: Run, harness: Harness
) -> None:
    endpoint_id = await an_endpoint(harness)
    await ok(cli, "topic", "put", "billing")
    await ok(cli, "topic", "put", "alerts")

    text = await ok(
        cli,
        "subscription",
        "create",
        "--topic",
        "billing",
        "--endpoint",
        endpoint_id,
        "--event-type",
        "invoice.*",
        "--event-type",
        "refund.?",
        "--match",
        "region=eu",
        "--match",
        "region=us",
        "--match",
        "count=5",
        "--match",
        'code="5"',
        "--match",
        "vip=true",
        "--match",
        "note=null",
    )

    made = re.match(r"created subscription (\S+) \(version 1\): ", text)
    assert made is not None, text
    subscription_id = made.group(1)
    stored = await harness.get(f"/v1/subscriptions/{subscription_id}")
    assert (stored["topic"], stored["endpoint_id"], stored["event_types"]) == (
        "billing",
        endpoint_id,
        ["invoice.*", "refund.?"],
    )
    # A field given again is one of its values; a value is JSON when it is a number,
    # true, false or null (or a JSON string), else text.
    assert stored["match"] == {
        "region": ["eu", "us"],
        "count": 5,
        "code": "5",
        "vip": True,
        "note": None,
    }
    shown = described(text)
    assert (shown["subscription"], shown["topic"], shown["endpoint"]) == (
        subscription_id,
        "billing",
        endpoint_id,
    )
    assert shown["event types"] == "invoice.*, refund.?"
    assert shown["match"] == ('code: "5"; count: 5; note: null; region: "eu" | "us"; vip: true')
    as_json = json.loads(await ok(cli, "subscription", "show", subscription_id, "--format", "json"))
    assert as_json == stored
    assert fields(await ok(cli, "subscription", "show", subscription_id)) == shown
    assert fields(await ok(cli, "topic", "show", "billing"))["subscriptions"] == "1"

    other = await subscribe(cli, "--topic", "alerts", "--endpoint", endpoint_id)
    listed = await ok(cli, "subscription", "list")
    titles, _, _ = columns(listed)
    assert titles == ["ID", "TOPIC", "ENDPOINT", "EVENT TYPES", "MATCH", "VERSION"]
    first, second = assert_aligned(listed)
    assert (first[0], first[1], first[2], first[5]) == (
        subscription_id,
        "billing",
        endpoint_id,
        "1",
    )
    assert second == [other, "alerts", endpoint_id, "every event type", "any payload", "1"]
    of_alerts = json.loads(
        await ok(cli, "subscription", "list", "--topic", "alerts", "--format", "json")
    )
    assert of_alerts == (await harness.get("/v1/subscriptions?topic=alerts"))["items"]
    assert [s["id"] for s in of_alerts] == [other]
    assert await ok(cli, "subscription", "list", "--topic", "none") == (
        "no subscriptions of none\n"
    )
    assert (await ok(cli, "subscription", "list", "--limit", "1")).endswith(
        "(the first 1 subscriptions, oldest first; more exist: raise --limit or pass --all)\n"
    )

    stale = await refused(
        cli, "subscription", "update", subscription_id, "--topic", "alerts", "--if-match", "2"
    )
    assert f"subscription {subscription_id} was not updated" in stale
    updated = await ok(
        cli,
        "subscription",
        "update",
        subscription_id,
        "--topic",
        "alerts",
        "--clear-event-types",
        "--if-match",
        "1",
    )
    assert updated.startswith(
        f"updated subscription {subscription_id} (now version 2): event_types, topic\n\n"
    )
    stored = await harness.get(f"/v1/subscriptions/{subscription_id}")
    assert (stored["topic"], stored["event_types"], stored["version"]) == ("alerts", None, 2)
    assert stored["match"]["region"] == ["eu", "us"]  # left as it was
    matched = await ok(cli, "subscription", "update", subscription_id, "--match", "tier=gold")
    assert described(matched)["match"] == 'tier: "gold"'
    cleared = await ok(cli, "subscription", "update", subscription_id, "--clear-match")
    assert (described(cleared)["match"], described(cleared)["version"]) == ("any payload", "4")
    nothing = await refused(cli, "subscription", "update", subscription_id, status=2)
    assert "nothing to change" in nothing
    both = await refused(
        cli, "subscription", "update", subscription_id, "--clear-match", "--match", "a=1", status=2
    )
    assert both.startswith("chronoq: argument --clear-match: ")

    assert "9" in await refused(cli, "subscription", "delete", subscription_id, "--if-match", "9")
    deleted = await ok(cli, "subscription", "delete", subscription_id, "--if-match", "4")
    assert deleted.startswith(f"deleted subscription {subscription_id}: ")
    missing = await refused(cli, "subscription", "show", subscription_id)
    assert missing.startswith(f"chronoq: subscription {subscription_id} not found")
    remaining = json.loads(await ok(cli, "subscription", "list", "--all", "--format", "json"))
    assert [s["id"] for s in remaining] == [other]


async def test_a_subscription_naming_a_missing_topic_or_endpoint_is_refused(
    cli: Run, harness: Harness
) -> None:
    endpoint_id = await an_endpoint(harness)
    await ok(cli, "topic", "put", "billing")

    no_topic = await refused(
        cli, "subscription", "create", "--topic", "missing", "--endpoint", endpoint_id, status=2
    )
    assert no_topic.startswith("chronoq: argument --topic: topic missing does not exist")
    no_endpoint = await refused(
        cli, "subscription", "create", "--topic", "billing", "--endpoint", UNKNOWN, status=2
    )
    assert no_endpoint.startswith(f"chronoq: argument --endpoint: endpoint {UNKNOWN} ")
    assert await ok(cli, "subscription", "list") == "no subscriptions\n"

    made = await subscribe(cli, "--topic", "billing", "--endpoint", endpoint_id)
    moved = await refused(cli, "subscription", "update", made, "--endpoint", UNKNOWN, status=2)
    assert moved.startswith("chronoq: argument --endpoint: ")
    gone = await refused(cli, "subscription", "update", made, "--topic", "missing", status=2)
    assert gone.startswith("chronoq: argument --topic: ")
    assert (await harness.get(f"/v1/subscriptions/{made}"))["version"] == 1


async def test_a_topic_is_deleted_only_once_no_schedule_targets_it(
    cli: Run, harness: Harness
) -> None:
    endpoint_id = await an_endpoint(harness)
    await ok(cli, "topic", "put", "billing")
    made = await subscribe(cli, "--topic", "billing", "--endpoint", endpoint_id)
    target = {"type": "topic", "topic": "billing"}
    schedule = await harness.create(target=target, trigger={"type": "once", "delay_seconds": 3600})
    inspected = fields((await ok(cli, "inspect", schedule["id"])).split("\n\n")[0])
    assert inspected["target"] == "topic billing"

    conflict = await refused(cli, "topic", "delete", "billing")
    assert schedule["id"] in conflict
    assert (await harness.get("/v1/topics/billing"))["subscriptions"] == 1

    await harness.client.delete(f"/v1/schedules/{schedule['id']}")
    await ok(cli, "topic", "delete", "billing")
    missing = await refused(cli, "subscription", "show", made)
    assert missing.startswith(f"chronoq: subscription {made} not found")
    assert await ok(cli, "topic", "list") == "no topics\n"


async def test_dead_letter_list_and_replay_take_the_fan_out_filters(
    cli: Run, harness: Harness
) -> None:
    harness.receiver.always("/down", Reply(503))
    endpoint_id = await an_endpoint(harness, "/down")
    await ok(cli, "topic", "put", "billing")
    first = await subscribe(cli, "--topic", "billing", "--endpoint", endpoint_id)
    second = await subscribe(cli, "--topic", "billing", "--endpoint", endpoint_id)
    before = (datetime.now(UTC) - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    schedule = await harness.create(target={"type": "topic", "topic": "billing"}, max_attempts=1)

    async def dead() -> bool:
        found = await harness.get("/v1/dead-letters")
        return len(found["items"]) == 2

    await harness.step_until(dead)

    of_first = json.loads(
        await ok(cli, "dead-letter", "list", "--subscription", first, "--format", "json")
    )
    assert len(of_first) == 1
    assert of_first == (await harness.get(f"/v1/dead-letters?subscription_id={first}"))["items"]
    assert of_first[0]["schedule_id"] == schedule["id"]
    of_endpoint = json.loads(
        await ok(
            cli,
            "dead-letter",
            "list",
            "--endpoint",
            endpoint_id,
            "--dead-lettered-after",
            before,
            "--format",
            "json",
        )
    )
    assert len(of_endpoint) == 2
    assert await ok(cli, "dead-letter", "list", "--endpoint", UNKNOWN) == "no dead letters match\n"
    later = "2099-01-01T00:00:00Z"
    assert (
        await ok(cli, "dead-letter", "list", "--dead-lettered-after", later)
        == "no dead letters match\n"
    )
    naive = await refused(
        cli, "dead-letter", "list", "--dead-lettered-after", "2026-12-07T09:00:00", status=2
    )
    assert "has no offset" in naive

    replayed = await ok(cli, "dead-letter", "replay", "--subscription", second)
    assert replayed == (
        "replayed 1 dead letter(s) matching the filters: attempts reset to 0, due now\n"
    )
    none = await ok(
        cli, "dead-letter", "replay", "--endpoint", endpoint_id, "--dead-lettered-after", later
    )
    assert none.startswith("replayed 0 dead letter(s) matching the filters")
    left = json.loads(
        await ok(cli, "dead-letter", "list", "--endpoint", endpoint_id, "--format", "json")
    )
    assert [d["occurrence_id"] for d in left] == [of_first[0]["occurrence_id"]]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--match", "no-equals"], "argument --match: 'no-equals' is not FIELD=VALUE"),
        (["--match", "=1"], "argument --match: '=1' is not FIELD=VALUE"),
        (["--event-type", "a["], "argument --event-type: "),
        (["--event-type", "a", "--event-type", "a"], "argument --event-type: "),
        (["--endpoint", "nope"], "argument --endpoint: 'nope' is not a UUID"),
        (["--topic", "a b"], "argument --topic: 'a b' is not a topic name"),
    ],
)
async def test_a_bad_value_is_a_usage_error_found_before_anything_is_opened(
    options: list[str], message: str
) -> None:
    wanted = {"--topic": "billing", "--endpoint": UNKNOWN}
    for name in options[::2]:
        wanted.pop(name, None)
    given = [part for pair in wanted.items() for part in pair]
    args = ["subscription", "create", *given, *options]
    result = await chronoq(*args, database_url=UNREACHABLE)
    assert result.returncode == 2, result.stderr
    assert one_line(result.stderr).startswith(f"chronoq: {message}")


async def test_the_commands_act_in_the_tenant_named(cli: Run, harness: Harness) -> None:
    assert (await harness.client.put("/v1/tenants/acme", json={})).status_code == 201
    await ok(cli, "topic", "put", "billing", "--tenant", "acme")

    assert await ok(cli, "topic", "list") == "no topics\n"
    assert "topic billing not found" in await refused(cli, "topic", "show", "billing")
    listed = json.loads(await ok(cli, "topic", "list", "--tenant", "acme", "--format", "json"))
    assert [t["name"] for t in listed] == ["billing"]


@EMBEDDED_ONLY
def test_the_script_runs_the_topic_commands(database_url: str) -> None:
    result = commands.chronoq("topic", "list", DATABASE_URL=database_url)
    assert (result.returncode, result.stdout, result.stderr) == (0, "no topics\n", "")
    result = commands.chronoq("subscription", "list", DATABASE_URL=database_url)
    assert (result.returncode, result.stdout, result.stderr) == (0, "no subscriptions\n", "")
