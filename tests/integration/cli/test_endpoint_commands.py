"""`chronoq endpoint create|list|show|update|delete|rotate|enable|events|attempts`, over
HTTP (the harness's app served on 127.0.0.1, `CHRONOQ_URL`) and on the database
(break-glass), with the same output: every field set and shown, agreeing with /v1/endpoints;
a signing secret printed by the command that made it, once, and by no other; an update that
sends only what its options name; a removal refused while a schedule targets the endpoint;
the attempts that went to it, newest first. In-process (commands.in_process), but for one
case of the script itself."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from app.cli.operator.endpoints import SHOWN_ONCE
from tests.conftest import EMBEDDED_ONLY
from tests.integration.cli import commands
from tests.integration.cli.test_operator_commands import (
    UNREACHABLE,
    assert_aligned,
    chronoq,
    columns,
    one_line,
)
from tests.integration.cli.test_tenant_commands import fields
from tests.integration.client.test_endpoint_calls import served
from tests.integration.conftest import Harness
from tests.receiver import Reply

Run = Callable[..., Awaitable[subprocess.CompletedProcess[str]]]
SECRET = re.compile(rf"^{re.escape(SHOWN_ONCE)}: (whsec_\S+)$", re.MULTILINE)

EVERY_OPTION = [
    "--name",
    "billing",
    "--method",
    "PUT",
    "--header",
    "X-Team=billing",
    "--header",
    "Authorization=Bearer s3cret",
    "--timeout",
    "5",
    "--description",
    "Billing, EU",
    "--rate",
    "50",
    "--period",
    "2",
    "--burst",
    "60",
    "--parallelism",
    "4",
    "--ordering",
    "none",
    "--failure-threshold",
    "3",
    "--cooldown",
    "20",
    "--max-cooldown",
    "300",
    "--disable-after",
    "never",
]


@pytest.fixture(params=["http", "database"])
def backend(request: pytest.FixtureRequest) -> str:
    """What the commands run against: a running service, or its database."""
    param: str = request.param
    return param


@pytest.fixture
async def cli(backend: str, harness: Harness, database_url: str) -> Any:
    """The command, against the harness's app over HTTP or on its database."""
    if backend == "database":

        async def on_the_database(*args: str) -> subprocess.CompletedProcess[str]:
            return await commands.in_process_async(*args, timeout=60, DATABASE_URL=database_url)

        yield on_the_database
        return
    async with served(harness) as url:

        async def over_http(*args: str) -> subprocess.CompletedProcess[str]:
            return await commands.in_process_async(
                *args, timeout=60, CHRONOQ_URL=url, NO_PROXY="127.0.0.1"
            )

        yield over_http


async def ok(cli: Run, *args: str) -> str:
    result = await cli(*args)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


async def refused(cli: Run, *args: str, status: int = 1) -> str:
    result = await cli(*args)
    assert result.returncode == status, result.stdout + result.stderr
    return one_line(result.stderr)


async def create(
    cli: Run, harness: Harness, *options: str, path: str = "/endpoint"
) -> tuple[str, str]:
    """A new endpoint's id and its secret, as `create` printed them."""
    text = await ok(cli, "endpoint", "create", "--target-url", harness.receiver.url(path), *options)
    made = re.match(r"created endpoint (\S+) \(version 1\)\n\n", text)
    assert made is not None, text
    (secret,) = SECRET.findall(text)
    return made.group(1), secret


def described(text: str) -> dict[str, str]:
    """The field list of a command's text (after its headline, if any)."""
    return fields(text.split("\n\n")[-1])


async def test_create_takes_every_option_and_prints_its_secret_once(
    cli: Run, harness: Harness
) -> None:
    text = await ok(
        cli, "endpoint", "create", "--target-url", harness.receiver.url("/e"), *EVERY_OPTION
    )

    (secret,) = SECRET.findall(text)
    assert secret.startswith("whsec_")
    assert text.count(secret) == 1
    assert "s3cret" not in text
    endpoint_id = text.split()[2]
    stored = await harness.get(f"/v1/endpoints/{endpoint_id}")
    assert (stored["name"], stored["method"], stored["timeout_seconds"]) == ("billing", "PUT", 5)
    assert stored["headers"] == {"Authorization": "***", "X-Team": "billing"}
    assert stored["description"] == "Billing, EU"
    assert stored["flow"] == {
        "rate": 50,
        "period_seconds": 2.0,
        "burst": 60,
        "parallelism": 4,
        "ordering": "none",
    }
    assert stored["circuit"] == {
        "failure_threshold": 3,
        "cooldown_seconds": 20.0,
        "max_cooldown_seconds": 300.0,
        "disable_after_seconds": None,
    }
    shown = described(text)
    assert (shown["endpoint"], shown["name"], shown["method"]) == (endpoint_id, "billing", "PUT")
    assert shown["headers"] == "Authorization: ***, X-Team: billing"
    assert shown["flow"] == "50 per 2s, burst 60, parallelism 4, ordering none"
    assert shown["failure threshold"] == "3 in a row"
    assert shown["cooldown"] == "20s, doubling up to 300s"
    assert shown["disable after"] == "never"
    assert shown["signing secrets"].startswith("whsec_…" + secret[-4:] + " (newest, made ")


async def test_show_list_and_events_give_the_state_and_hints_never_a_secret(
    cli: Run, harness: Harness
) -> None:
    endpoint_id, secret = await create(cli, harness, "--name", "billing")
    await create(cli, harness, path="/other")

    shown = fields(await ok(cli, "endpoint", "show", endpoint_id))
    assert shown["state"] == "closed"
    assert (shown["consecutive failures"], shown["in flight"], shown["waiting"]) == ("0", "0", "0")
    assert shown["signing secrets"].startswith("whsec_…" + secret[-4:])
    assert (shown["flow"], shown["disable after"]) == ("no limits of its own", "432000s of outage")
    listed = await ok(cli, "endpoint", "list")
    titles, _, _ = columns(listed)
    assert titles == [
        "ID",
        "NAME",
        "STATE",
        "FAILURES",
        "IN FLIGHT",
        "WAITING",
        "URL",
        "SECRETS",
        "VERSION",
    ]
    first, second = assert_aligned(listed)
    assert first[:7] == [
        endpoint_id,
        "billing",
        "closed",
        "0",
        "0",
        "0",
        harness.receiver.url("/endpoint"),
    ]
    assert (first[7], first[8], second[1]) == ("whsec_…" + secret[-4:], "1", "-")
    # --format json is the API's answer.
    as_json = json.loads(await ok(cli, "endpoint", "show", endpoint_id, "--format", "json"))
    assert as_json == await harness.get(f"/v1/endpoints/{endpoint_id}")
    every = json.loads(await ok(cli, "endpoint", "list", "--all", "--format", "json"))
    assert every == (await harness.get("/v1/endpoints"))["items"]
    assert (await ok(cli, "endpoint", "list", "--limit", "1")).endswith(
        "(the first 1 endpoints, oldest first; more exist: raise --limit or pass --all)\n"
    )

    outputs = [
        await ok(cli, "endpoint", "show", endpoint_id),
        await ok(cli, "endpoint", "show", endpoint_id, "--format", "json"),
        await ok(cli, "endpoint", "list"),
        await ok(cli, "endpoint", "list", "--format", "json"),
        await ok(cli, "endpoint", "events", endpoint_id),
        await ok(cli, "endpoint", "events", endpoint_id, "--format", "json"),
        await ok(cli, "endpoint", "enable", endpoint_id),
        await ok(cli, "endpoint", "update", endpoint_id, "--timeout", "3"),
    ]
    assert not [text for text in outputs if secret in text]


async def test_rotate_prints_the_new_secret_once_and_show_neither(
    cli: Run, harness: Harness
) -> None:
    endpoint_id, first = await create(cli, harness)

    text = await ok(cli, "endpoint", "rotate", endpoint_id, "--overlap", "3600")

    (second,) = SECRET.findall(text)
    assert (text.count(second), second != first, first in text) == (1, True, False)
    assert re.match(
        rf"rotated the signing secret of endpoint {endpoint_id} \(version 2\): the earlier "
        r"secrets sign beside it until \S+Z\n",
        text,
    ), text
    shown = await ok(cli, "endpoint", "show", endpoint_id)
    assert first not in shown
    assert second not in shown
    hints = fields(shown)["signing secrets"]
    assert hints.startswith(f"whsec_…{first[-4:]} (signs until ")
    assert f"; whsec_…{second[-4:]} (newest, made " in hints

    # The document as the API answers it: the new secret's value in the newest entry only.
    alone = json.loads(
        await ok(cli, "endpoint", "rotate", endpoint_id, "--overlap", "0", "--format", "json")
    )
    (newest,) = alone["signing_secrets"]
    assert newest["secret"].startswith("whsec_")
    assert newest["secret"] not in await ok(cli, "endpoint", "show", endpoint_id)
    kinds = json.loads(await ok(cli, "endpoint", "events", endpoint_id, "--format", "json"))
    assert [e["kind"] for e in kinds] == ["created", "secret_rotated", "secret_rotated"]
    too_long = await refused(cli, "endpoint", "rotate", endpoint_id, "--overlap", "-1", status=2)
    assert "argument --overlap" in too_long


async def test_update_sends_only_what_its_options_name(cli: Run, harness: Harness) -> None:
    endpoint_id, _ = await create(
        cli,
        harness,
        "--name",
        "billing",
        "--rate",
        "5",
        "--parallelism",
        "2",
        "--failure-threshold",
        "3",
        "--header",
        "Authorization=Bearer s3cret",
    )

    # The flow limits and the circuit are merged into those read, not replaced.
    text = await ok(cli, "endpoint", "update", endpoint_id, "--burst", "7", "--cooldown", "60")

    assert text.startswith(f"updated endpoint {endpoint_id} (now version 2): circuit, flow\n\n")
    stored = await harness.get(f"/v1/endpoints/{endpoint_id}")
    assert stored["flow"] == {
        "rate": 5,
        "period_seconds": 1.0,
        "burst": 7,
        "parallelism": 2,
        "ordering": "none",
    }
    assert (stored["circuit"]["failure_threshold"], stored["circuit"]["cooldown_seconds"]) == (
        3,
        60.0,
    )
    assert (stored["name"], stored["headers"]) == ("billing", {"Authorization": "***"})

    stale = await refused(
        cli, "endpoint", "update", endpoint_id, "--timeout", "3", "--if-match", "1"
    )
    assert f"endpoint {endpoint_id} was not updated" in stale
    assert (await harness.get(f"/v1/endpoints/{endpoint_id}"))["timeout_seconds"] == 10.0
    cleared = await ok(
        cli, "endpoint", "update", endpoint_id, "--if-match", "2", "--name", "", "--clear-flow"
    )
    assert described(cleared)["flow"] == "no limits of its own"
    stored = await harness.get(f"/v1/endpoints/{endpoint_id}")
    assert (stored["name"], stored["flow"], stored["version"]) == (None, None, 3)
    moved = await ok(
        cli, "endpoint", "update", endpoint_id, "--target-url", harness.receiver.url("/moved")
    )
    assert described(moved)["url"] == harness.receiver.url("/moved")
    events = json.loads(await ok(cli, "endpoint", "events", endpoint_id, "--format", "json"))
    assert [e["detail"] for e in events[1:]] == [
        {"fields": ["flow", "circuit"]},
        {"fields": ["name", "flow"]},
        {"fields": ["url"]},
    ]

    nothing = await refused(cli, "endpoint", "update", endpoint_id, status=2)
    assert "nothing to change" in nothing
    bad = await refused(cli, "endpoint", "update", endpoint_id, "--rate", "0", status=2)
    assert bad.startswith("chronoq: argument --rate: ")
    # fifo means one at a time: the merged limits are checked as a whole.
    fifo = await refused(
        cli, "endpoint", "update", endpoint_id, "--ordering", "fifo", "--parallelism", "2", status=2
    )
    assert fifo.startswith("chronoq: argument --parallelism: ")
    assert (await harness.get(f"/v1/endpoints/{endpoint_id}"))["version"] == 4


async def test_delete_is_refused_while_a_schedule_targets_the_endpoint(
    cli: Run, harness: Harness
) -> None:
    endpoint_id, _ = await create(cli, harness)
    target = {"type": "endpoint", "endpoint_id": endpoint_id}
    schedule = await harness.create(target=target, trigger={"type": "once", "delay_seconds": 3600})
    inspected = fields((await ok(cli, "inspect", schedule["id"])).split("\n\n")[0])
    assert inspected["target"] == f"endpoint {endpoint_id}"

    conflict = await refused(cli, "endpoint", "delete", endpoint_id)
    assert schedule["id"] in conflict
    assert (await harness.get(f"/v1/endpoints/{endpoint_id}"))["version"] == 1

    await harness.client.delete(f"/v1/schedules/{schedule['id']}")
    stale = await refused(cli, "endpoint", "delete", endpoint_id, "--if-match", "9")
    assert "9" in stale
    deleted = await ok(cli, "endpoint", "delete", endpoint_id, "--if-match", "1")
    assert deleted == f"deleted endpoint {endpoint_id} and its secrets\n"
    missing = await refused(cli, "endpoint", "show", endpoint_id)
    assert missing.startswith(f"chronoq: endpoint {endpoint_id} not found")
    events = await ok(cli, "endpoint", "events", endpoint_id)
    assert [row[1] for row in assert_aligned(events)] == ["created", "deleted"]


async def test_enable_closes_a_circuit_the_failures_opened(
    cli: Run, harness: Harness, backend: str
) -> None:
    harness.receiver.always("/down", Reply(503))
    endpoint_id, _ = await create(cli, harness, "--failure-threshold", "1", path="/down")
    target = {"type": "endpoint", "endpoint_id": endpoint_id}
    await harness.create(target=target, max_attempts=1)
    assert await harness.step() == 1

    opened = fields(await ok(cli, "endpoint", "show", endpoint_id))
    assert re.fullmatch(r"open: no delivery starts before the probe at \S+Z", opened["state"])
    assert opened["consecutive failures"] == "1"
    assert "open" in assert_aligned(await ok(cli, "endpoint", "list"))[0]

    text = await ok(cli, "endpoint", "enable", endpoint_id)

    assert text.startswith(f"enabled endpoint {endpoint_id}: its circuit is closed")
    assert (described(text)["state"], described(text)["consecutive failures"]) == ("closed", "0")
    rows = assert_aligned(await ok(cli, "endpoint", "events", endpoint_id))
    assert [row[1] for row in rows] == ["created", "opened", "enabled"]
    # The circuit's own changes are the system's; the enable, the caller's (no API key: -).
    assert [row[2] for row in rows] == [
        "cli" if backend == "database" else "-",
        "system",
        "cli" if backend == "database" else "-",
    ]


async def test_attempts_list_what_the_endpoint_answered_newest_first(
    cli: Run, harness: Harness
) -> None:
    harness.receiver.script("/endpoint", Reply(503, body="busy"))
    endpoint_id, _ = await create(cli, harness)
    assert await ok(cli, "endpoint", "attempts", endpoint_id) == (
        f"no attempts went to endpoint {endpoint_id} yet\n"
    )
    target = {"type": "endpoint", "endpoint_id": endpoint_id}
    schedule = await harness.create(target=target, trigger={"type": "immediate"})
    occurrence_id = str(schedule["next_occurrence_id"])

    async def delivered() -> bool:
        found = await harness.get(f"/v1/occurrences/{occurrence_id}")
        return bool(found["status"] == "delivered")

    await harness.step_until(delivered)

    text = await ok(cli, "endpoint", "attempts", endpoint_id)

    titles, _, _ = columns(text)
    assert titles == [
        "STARTED AT",
        "ATTEMPT",
        "OUTCOME",
        "STATUS",
        "DURATION",
        "OCCURRENCE ID",
        "ERROR",
    ]
    newest, oldest = assert_aligned(text)
    assert newest[1:4] == ["2", "delivered", "200"]
    assert (newest[5], newest[6]) == (occurrence_id, "-")
    assert oldest[1:4] == ["1", "retry", "503"]
    assert oldest[5] == occurrence_id
    assert "busy" in oldest[6]
    assert re.fullmatch(r"\d+ ms", newest[4]), newest
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", newest[0]), newest
    # --format json is the API's answer.
    as_json = json.loads(await ok(cli, "endpoint", "attempts", endpoint_id, "--format", "json"))
    listed = await harness.get(f"/v1/endpoints/{endpoint_id}/attempts")
    assert as_json == listed["items"]
    assert [(a["attempt"], a["status_code"]) for a in as_json] == [(2, 200), (1, 503)]
    every = json.loads(
        await ok(cli, "endpoint", "attempts", endpoint_id, "--all", "--format", "json")
    )
    assert every == as_json
    first = await ok(cli, "endpoint", "attempts", endpoint_id, "--limit", "1")
    table, footer = first.split("\n\n")
    assert [row[1:4] for row in assert_aligned(table)] == [["2", "delivered", "200"]]
    assert footer == ("(the first 1 attempts, newest first; more exist: raise --limit or --all)\n")

    unknown = "0b8a3b0e-8a58-4bb5-9c8e-0f8f3a1c2d4e"
    missing = await refused(cli, "endpoint", "attempts", unknown)
    assert missing.startswith(f"chronoq: endpoint {unknown} not found")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--rate", "0"], "argument --rate: "),
        (["--burst", "3"], "argument --burst: a burst needs a rate"),
        (["--cooldown", "60", "--max-cooldown", "30"], "argument --max-cooldown: "),
        (["--header", "Host=evil"], "argument --header: "),
        (["--header", "no-equals"], "argument --header: 'no-equals' is not NAME=VALUE"),
        (["--timeout", "soon"], "argument --timeout: "),
        (["--disable-after", "10"], "argument --disable-after: "),
        (["--description", "two\nlines"], "argument --description: "),
    ],
)
async def test_a_bad_value_is_a_usage_error_found_before_anything_is_opened(
    options: list[str], message: str
) -> None:
    args = ["endpoint", "create", "--target-url", "http://127.0.0.1:9/x", *options]
    result = await chronoq(*args, database_url=UNREACHABLE)
    assert result.returncode == 2, result.stderr
    assert one_line(result.stderr).startswith(f"chronoq: {message}")


async def test_a_denied_address_is_refused_naming_the_option(cli: Run) -> None:
    denied = await refused(
        cli, "endpoint", "create", "--target-url", "http://169.254.169.254/latest", status=2
    )
    assert denied.startswith("chronoq: argument --target-url: ")
    assert "denied" in denied
    assert await ok(cli, "endpoint", "list") == "no endpoints\n"


async def test_the_commands_act_in_the_tenant_named(cli: Run, harness: Harness) -> None:
    assert (await harness.client.put("/v1/tenants/acme", json={})).status_code == 201
    endpoint_id, _ = await create(cli, harness, "--tenant", "acme")

    assert await ok(cli, "endpoint", "list") == "no endpoints\n"
    assert f"endpoint {endpoint_id} not found" in await refused(
        cli, "endpoint", "show", endpoint_id
    )
    listed = json.loads(await ok(cli, "endpoint", "list", "--tenant", "acme", "--format", "json"))
    assert [e["id"] for e in listed] == [endpoint_id]


@EMBEDDED_ONLY
def test_the_script_runs_the_endpoint_commands(database_url: str) -> None:
    result = commands.chronoq("endpoint", "list", DATABASE_URL=database_url)
    assert (result.returncode, result.stdout, result.stderr) == (0, "no endpoints\n", "")
