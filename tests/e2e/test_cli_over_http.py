"""The operator commands against a running service (`--url`/CHRONOQ_URL with an API key): the
same commands and output as on the database, the key's role applies, its name is the actor,
and every list pages through everything with --all."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.cli.operator.http_backend import HttpOperator
from chronoq.client import Client
from tests.e2e.processes import Service, Services, free_port
from tests.integration.cli import commands
from tests.integration.cli.test_terminal_text import HOSTILE, SHOWN, assert_no_control
from tests.receiver import Receiver, Reply

pytestmark = [pytest.mark.e2e]

WRITER = "3f9c2a7e61d84b0f9e5a"
READER = "b71e09c4d2a6f8e3c5d1"


@pytest.fixture
async def service(services: Services, tmp_path: Path) -> Service:
    return await services.start(
        "api",
        {
            "DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}",
            "CHRONOQ_API_KEYS": f"deploy-bot:{WRITER},dashboard:{READER}:read",
            "CHRONOQ_POLL_INTERVAL": "0.05",
        },
    )


async def cli(
    service: Service, *args: str, key: str | None = WRITER
) -> subprocess.CompletedProcess[str]:
    variables = {"CHRONOQ_URL": service.base_url}
    if key is not None:
        variables["CHRONOQ_API_KEY"] = key
    return await commands.in_process_async(*args, timeout=60, **variables)


async def ok(service: Service, *args: str) -> str:
    result = await cli(service, *args)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


async def as_json(service: Service, *args: str) -> Any:
    return json.loads(await ok(service, *args, "--format", "json"))


def one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("chronoq: ")
    return lines[0]


def client(service: Service, key: str = WRITER) -> Client:
    return Client(service.base_url, api_key=key, trust_env=False)


def spec(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "event_type": "report.due",
        "target": {"type": "webhook", "url": url},
        "trigger": {"type": "cron", "expression": "0 * * * *"},
        **extra,
    }


async def test_a_schedule_is_run_from_the_cli_with_the_key_as_actor(service: Service) -> None:
    with client(service) as api:
        made = api.create_schedule(
            spec(
                "http://127.0.0.1:9/hooks",
                name="hourly",
                target={
                    "type": "webhook",
                    "url": "http://127.0.0.1:9/hooks",
                    "signing_secret": "whsec_" + "c2VjcmV0LXNlY3JldC1zZWNyZXQ=",
                },
            )
        )
    sid = str(made.id)

    listed = await as_json(service, "list")
    assert [s["id"] for s in listed] == [sid]
    assert "hourly" in await ok(service, "inspect", sid)
    assert (await as_json(service, "pause", sid))["status"] == "paused"
    inspected = await ok(service, "inspect", sid)
    assert re.search(r"^paused\s+by deploy-bot at ", inspected, re.MULTILINE), inspected
    assert (await as_json(service, "resume", sid))["status"] == "pending"
    fired = await as_json(service, "trigger", sid)
    assert fired["origin"] == "trigger"

    patched = await as_json(
        service,
        "patch",
        sid,
        "--max-attempts",
        "3",
        "--label",
        "team:ops",
        "--target-url",
        "http://127.0.0.1:9/moved",
    )
    assert (patched["max_attempts"], patched["labels"]) == (3, {"team": "ops"})
    assert patched["target"]["url"] == "http://127.0.0.1:9/moved"
    assert patched["target"]["signing_secret"] is not None  # kept, shown redacted

    now = datetime.now(UTC) - timedelta(seconds=1)
    start = (now - timedelta(hours=3)).isoformat()
    filled = await as_json(service, "backfill", sid, "--from", start, "--to", now.isoformat())
    assert filled["created"] == 3

    assert (await as_json(service, "cancel", sid))["status"] == "cancelled"
    events = await as_json(service, "events", sid, "--all")
    assert {e["actor"] for e in events} == {"deploy-bot"}
    assert [e["kind"] for e in events][-1] == "cancelled"


async def test_dead_letters_are_listed_replayed_and_discarded_over_http(
    service: Service,
) -> None:
    async with Receiver() as receiver:
        receiver.always("/gone", Reply(410))
        with client(service) as api:
            made = [
                api.create_schedule(
                    spec(receiver.url("/gone"), trigger={"type": "immediate"}, max_attempts=1)
                )
                for _ in range(3)
            ]
            await receiver.wait_for(3, "/gone", timeout=30)
            deadline = time.monotonic() + 30
            while len(api.list_dead_letters().items) < 3:
                assert time.monotonic() < deadline, "the deliveries were not dead-lettered"
                await asyncio.sleep(0.05)

        dead = await as_json(service, "dead-letter", "list", "--all")
        assert {d["schedule_id"] for d in dead} == {str(s.id) for s in made}
        first, second, third = (d["occurrence_id"] for d in dead)

        assert "replayed occurrence" in await ok(service, "dead-letter", "replay", first)
        by_schedule = await as_json(
            service, "dead-letter", "replay", "--schedule-id", dead[1]["schedule_id"]
        )
        assert by_schedule["occurrence_ids"] == [second]
        assert "discarded" in await ok(service, "dead-letter", "discard", third)
        again = await cli(service, "dead-letter", "discard", third)
        assert again.returncode == 1
        assert third in one_line(again.stderr)

        attempts = await as_json(service, "attempts", first, "--all")
        assert (attempts[0]["attempt"], attempts[0]["outcome"]) == (1, "dead_lettered")


async def test_failing_schedules_are_found_over_http_and_dead_letters_name_them(
    service: Service,
) -> None:
    async with Receiver() as receiver:
        receiver.always("/down", Reply(503))
        with client(service) as api:
            broken = api.create_schedule(
                spec(
                    receiver.url("/down"),
                    name="billing-nightly",
                    trigger={"type": "interval", "every_seconds": 3600},
                    max_attempts=1,
                )
            )
            healthy = api.create_schedule(spec("http://127.0.0.1:9/h", name="billing-weekly"))
            api.create_schedule(spec("http://127.0.0.1:9/h", name="ops-hourly"))
            deadline = time.monotonic() + 30
            while not api.list_schedules(failing=True).items:
                assert time.monotonic() < deadline, "the delivery was not dead-lettered"
                await asyncio.sleep(0.05)
            assert [s.id for s in api.list_schedules(sort="failures", limit=1).items] == [broken.id]

    failing = await as_json(service, "list", "--failing")
    assert [(s["name"], s["consecutive_failures"]) for s in failing] == [("billing-nightly", 1)]
    billing = await as_json(service, "list", "--name-prefix", "billing-", "--all")
    assert {s["id"] for s in billing} == {str(broken.id), str(healthy.id)}
    by_failures = await as_json(service, "list", "--sort", "failures", "--all")
    assert by_failures[0]["id"] == str(broken.id)
    assert len(by_failures) == 3
    text = await ok(service, "dead-letter", "list")
    assert "SCHEDULE NAME" in text.splitlines()[0]
    assert "billing-nightly" in text.splitlines()[1]


async def test_flow_keys_are_set_paused_and_resumed_over_http(service: Service) -> None:
    created = await ok(service, "flow-key", "set", "customer-42", "--rate", "5")
    assert "created flow key customer-42 (version 1)" in created
    assert (await as_json(service, "flow-key", "pause", "customer-42"))["paused"] is True
    resumed = await as_json(service, "flow-key", "resume", "customer-42")
    assert (resumed["paused"], resumed["rate"], resumed["version"]) == (False, 5, 3)
    replaced = await ok(service, "flow-key", "set", "customer-42", "--parallelism", "2")
    assert "replaced the limits of flow key customer-42 (now version 4)" in replaced
    listed = await as_json(service, "flow-key", "list", "--all")
    assert [(k["key"], k["rate"], k["parallelism"]) for k in listed] == [("customer-42", None, 2)]
    cleared = await ok(service, "flow-key", "clear-backoff", "customer-42")
    assert cleared.startswith("flow key customer-42 has no back-off; nothing changed")
    # The key's schedules, by the list's filter (the client's and the CLI's alike), and
    # what waits on it (an hour off: nothing is claimed meanwhile).
    hourly = {"type": "once", "at": (datetime.now(UTC) + timedelta(hours=1)).isoformat()}
    with client(service) as api:
        mine = api.create_schedule(
            spec("http://127.0.0.1:9/x", trigger=hourly, flow_key="customer-42")
        )
        api.create_schedule(spec("http://127.0.0.1:9/x", trigger=hourly, flow_key="other"))
        assert [s.id for s in api.list_schedules(flow_key="customer-42").items] == [mine.id]
        waiting = list(api.iter_waiting_occurrences("customer-42", limit=1))
        assert [o.occurrence_id for o in waiting] == [mine.next_occurrence_id]
    of_key = await as_json(service, "list", "--flow-key", "customer-42")
    assert [s["id"] for s in of_key] == [str(mine.id)]


async def test_all_pages_through_every_schedule(service: Service) -> None:
    with client(service) as api:
        api.create_schedules([spec("http://127.0.0.1:9/h", name=f"s{n}") for n in range(520)])

    every = await as_json(service, "list", "--all")
    assert len({s["id"] for s in every}) == 520
    first = await ok(service, "list")
    assert "(the first 50 schedules; more match" in first


async def test_a_key_s_role_applies_and_a_missing_key_is_refused(
    service: Service, tmp_path: Path
) -> None:
    with client(service) as api:
        sid = str(api.create_schedule(spec("http://127.0.0.1:9/h")).id)
    key_file = tmp_path / "reader.key"
    key_file.write_text(READER + "\n", encoding="utf-8")

    looked = await cli(service, "list", "--api-key-file", str(key_file), key=None)
    assert looked.returncode == 0, looked.stderr
    refused = await cli(service, "pause", sid, "--api-key-file", str(key_file), key=None)
    assert refused.returncode == 1
    assert "403" in one_line(refused.stderr)
    anonymous = await cli(service, "list", key=None)
    assert anonymous.returncode == 1
    assert "401" in one_line(anonymous.stderr)
    with client(service) as api:
        assert api.get_schedule(sid).status == "pending"


async def test_mistakes_are_usage_errors_and_change_nothing(service: Service) -> None:
    with client(service) as api:
        made = api.create_schedule(spec("http://127.0.0.1:9/h"))
    sid = str(made.id)

    bad = await cli(service, "patch", sid, "--max-attempts", "0")
    assert bad.returncode == 2
    assert "argument --max-attempts" in one_line(bad.stderr)
    refused = await cli(service, "patch", sid, "--target-url", "http://169.254.169.254/")
    assert refused.returncode == 2
    assert "argument --target-url" in one_line(refused.stderr)
    with client(service) as api:
        assert api.get_schedule(sid).version == made.version

    both = await cli(service, "list", "--url", service.base_url, "--conn", "sqlite:///x.db")
    assert both.returncode == 2
    assert "not both" in one_line(both.stderr)
    nowhere = await commands.in_process_async(
        "list", "--url", f"http://127.0.0.1:{free_port()}", timeout=60
    )
    assert nowhere.returncode == 1
    assert "cannot reach http://127.0.0.1:" in one_line(nowhere.stderr)


async def test_a_receiver_s_control_characters_reach_the_terminal_escaped_over_http(
    service: Service,
) -> None:
    async with Receiver() as receiver:
        receiver.always("/evil", Reply(500, body=HOSTILE))
        with client(service) as api:
            made = api.create_schedule(
                spec(receiver.url("/evil"), trigger={"type": "immediate"}, max_attempts=1)
            )
            deadline = time.monotonic() + 30
            while not api.list_dead_letters().items:
                assert time.monotonic() < deadline, "the delivery was not dead-lettered"
                await asyncio.sleep(0.05)
            (dead,) = api.list_dead_letters().items

    for args in (
        ("inspect", str(made.id)),
        ("dead-letter", "list"),
        ("attempts", str(dead.occurrence_id)),
    ):
        text = await ok(service, *args)
        assert_no_control(text)
        assert SHOWN in text, args


async def test_a_401_names_the_setting_and_the_option_that_give_the_key(
    service: Service, tmp_path: Path
) -> None:
    anonymous = await cli(service, "list", key=None)
    assert anonymous.returncode == 1
    line = one_line(anonymous.stderr)
    assert "401" in line
    assert "set CHRONOQ_API_KEY, or pass --api-key-file FILE" in line
    assert "Bearer" not in line

    wrong = await cli(service, "list", key="not-a-key-the-service-knows")
    assert wrong.returncode == 1
    assert "refused the API key of CHRONOQ_API_KEY (401" in one_line(wrong.stderr)

    key_file = tmp_path / "stale.key"
    key_file.write_text("0123456789abcdef-stale\n", encoding="utf-8")
    stale = await cli(service, "list", "--api-key-file", str(key_file), key=None)
    assert stale.returncode == 1
    assert f"refused the API key of --api-key-file {key_file} (401" in one_line(stale.stderr)
    assert "0123456789abcdef-stale" not in stale.stderr


async def test_tenant_picks_the_tenant_every_command_acts_in(service: Service) -> None:
    with client(service) as api:
        api.put_tenant("acme", {"display_name": "Acme"})
        ours = str(api.create_schedule(spec("http://127.0.0.1:9/h", name="ours")).id)
    with Client(service.base_url, api_key=WRITER, trust_env=False, tenant="acme") as acme:
        theirs = str(acme.create_schedule(spec("http://127.0.0.1:9/h", name="theirs")).id)

    listed = await as_json(service, "list", "--tenant", "acme")
    assert [s["id"] for s in listed] == [theirs]
    assert [s["id"] for s in await as_json(service, "list")] == [ours]
    missing = await cli(service, "pause", ours, "--tenant", "acme")
    assert missing.returncode == 1
    assert one_line(missing.stderr) == f"chronoq: schedule {ours} does not exist"
    paused = await as_json(service, "pause", theirs, "--tenant", "acme")
    assert paused["status"] == "paused"
    await ok(service, "flow-key", "set", "shared", "--rate", "5", "--tenant", "acme")
    assert await as_json(service, "flow-key", "list", "--all") == []
    unknown = await cli(service, "list", "--tenant", "nobody")
    assert unknown.returncode == 1
    assert "tenant nobody does not exist" in one_line(unknown.stderr)
    bad = await cli(service, "list", "--tenant", "Not A Tenant")
    assert bad.returncode == 2
    assert "argument --tenant" in one_line(bad.stderr)


async def test_tenants_and_their_keys_are_managed_over_http(service: Service) -> None:
    created = await ok(service, "tenant", "set", "acme", "--display-name", "Acme")
    assert created.startswith("created tenant acme (version 1)")
    replaced = await as_json(service, "tenant", "set", "acme", "--display-name", "Acme Inc")
    assert (replaced["display_name"], replaced["version"]) == ("Acme Inc", 2)
    assert [t["id"] for t in await as_json(service, "tenant", "list", "--all")] == [
        "acme",
        "default",
    ]
    assert (await as_json(service, "tenant", "show", "acme"))["display_name"] == "Acme Inc"
    limited = await ok(service, "tenant", "set", "acme", "--max-schedules", "5")
    assert "max schedules              5" in limited
    assert "max creates per minute     no limit" in limited
    bad = await cli(service, "tenant", "set", "acme", "--max-schedules", "0")
    assert bad.returncode == 2
    assert "argument --max-schedules" in one_line(bad.stderr)

    made = await as_json(service, "tenant", "key", "create", "acme", "ci", "--role", "read")
    secret = made["key"]
    shown = await ok(service, "tenant", "key", "create", "acme", "deploy")
    assert "Store it now: it is shown this once." in shown
    with Client(service.base_url, api_key=secret, trust_env=False) as reader:
        assert reader.list_schedules().items == []
    listed = await ok(service, "tenant", "key", "list", "acme")
    assert "ci" in listed
    assert made["prefix"] in listed
    assert secret not in listed
    revoked = await ok(service, "tenant", "key", "revoke", "acme", made["id"])
    assert revoked.startswith(f"revoked key {made['id']} of tenant acme")

    def refused() -> bool:
        answer = httpx.get(
            f"{service.base_url}/v1/schedules",
            headers={"Authorization": f"Bearer {secret}"},
            trust_env=False,
        )
        return answer.status_code == 401

    deadline = time.monotonic() + 10
    while not refused():
        assert time.monotonic() < deadline, "the revoked key still works"
        await asyncio.sleep(0.1)

    bad = await cli(service, "tenant", "key", "create", "acme", "has space")
    assert bad.returncode == 2
    assert "argument NAME" in one_line(bad.stderr)
    deleted = await ok(service, "tenant", "delete", "acme")
    assert deleted.startswith("deleted tenant acme")
    gone = await cli(service, "tenant", "show", "acme")
    assert gone.returncode == 1
    assert one_line(gone.stderr) == "chronoq: tenant acme does not exist"

    # Each change is in the tenant's audit events, by the key's name, and they outlive it.
    events = await as_json(service, "tenant", "events", "acme", "--all")
    assert [(e["kind"], e["version"], e["actor"], e["key_name"]) for e in events] == [
        ("created", 1, "deploy-bot", None),
        ("updated", 2, "deploy-bot", None),
        ("updated", 3, "deploy-bot", None),
        ("key_created", None, "deploy-bot", "ci"),
        ("key_created", None, "deploy-bot", "deploy"),
        ("key_revoked", None, "deploy-bot", "ci"),
        ("deleted", None, "deploy-bot", None),
    ]
    assert [e["fields"] for e in events[1:3]] == [["display_name"], ["display_name", "quotas"]]
    with client(service, READER) as reader:  # an operator's read key reads them too
        assert [e.id for e in reader.iter_tenant_events("acme")] == [
            uuid.UUID(e["id"]) for e in events
        ]
    lines = (await ok(service, "tenant", "events", "acme", "--limit", "2")).splitlines()
    assert re.split(r"\s{2,}", lines[0]) == ["AT", "KIND", "VERSION", "ACTOR", "FIELDS", "KEY"]
    assert re.split(r"\s{2,}", lines[2])[1:] == [
        "updated",
        "2",
        "deploy-bot",
        "display_name",
        "-",
    ]
    assert lines[-1] == "(the first 2 events, oldest first; more exist: raise --limit or --all)"
    never = await cli(service, "tenant", "events", "nobody")
    assert never.returncode == 1
    assert one_line(never.stderr) == "chronoq: tenant nobody does not exist"
    # Its events target goes over HTTP too, and a pause and a resume keep it.
    told = await as_json(
        service, "tenant", "set", "acme", "--events-url", "http://127.0.0.1:9/events"
    )
    assert told["events_target"]["url"] == "http://127.0.0.1:9/events"
    await ok(service, "tenant", "pause", "acme")
    await ok(service, "tenant", "resume", "acme")
    kept = (await as_json(service, "tenant", "show", "acme"))["events_target"]
    assert kept["url"] == "http://127.0.0.1:9/events"


def fields(text: str) -> dict[str, str]:
    """A field list's values by name (`render.fields`: name, two spaces or more, value)."""
    return dict(re.split(r"\s{2,}", line, maxsplit=1) for line in text.splitlines() if line)


async def test_a_tenant_set_takes_every_field_and_show_and_list_say_them(
    service: Service,
) -> None:
    made = await ok(
        service,
        "tenant",
        "set",
        "acme",
        "--display-name",
        "Acme",
        "--weight",
        "7",
        "--paused",
        "--max-schedules",
        "100",
        "--max-creates-per-minute",
        "60",
        "--max-deliveries-per-second",
        "20",
        "--max-in-flight",
        "4",
        "--retention-seconds",
        "86400",
    )
    assert made.startswith("created tenant acme (version 1)\n\n")
    with Client(service.base_url, api_key=WRITER, trust_env=False, tenant="acme") as acme:
        acme.create_schedule(spec("http://127.0.0.1:9/h", name="one"))

    shown = fields(await ok(service, "tenant", "show", "acme"))
    assert shown["weight"] == "7"
    assert shown["paused"].startswith("yes")
    assert shown["max schedules"] == "100"
    assert shown["max creates per minute"] == "60"
    assert shown["max deliveries per second"] == "20"
    assert shown["max in flight"] == "4"
    assert shown["retention"] == "86400 seconds"
    assert (shown["schedules"], shown["pending occurrences"]) == ("1", "1")
    assert (shown["in flight"], shown["dead letters"]) == ("0", "0")
    assert "waiting" in shown
    document = await as_json(service, "tenant", "show", "acme")
    assert (document["weight"], document["paused"], document["retention_seconds"]) == (
        7,
        True,
        86400,
    )
    assert document["quotas"] == {
        "max_schedules": 100,
        "max_creates_per_minute": 60,
        "max_deliveries_per_second": 20,
        "max_in_flight": 4,
    }
    assert document["usage"]["schedules"] == 1
    listed = (await ok(service, "tenant", "list")).splitlines()
    titles = ["TENANT", "DISPLAY NAME", "WEIGHT", "PAUSED", "VERSION", "CREATED"]
    assert re.split(r"\s{2,}", listed[0]) == titles
    assert re.split(r"\s{2,}", listed[1])[:5] == ["acme", "Acme", "7", "yes", "1"]
    assert re.split(r"\s{2,}", listed[2])[:5] == ["default", "-", "1", "no", "1"]

    # A set is whole: what it leaves out goes back to its default, the pause included.
    replaced = await as_json(service, "tenant", "set", "acme", "--retention-seconds", "0")
    assert (replaced["version"], replaced["weight"], replaced["paused"]) == (2, 1, False)
    assert set(replaced["quotas"].values()) == {None}
    assert replaced["retention_seconds"] == 0
    assert fields(await ok(service, "tenant", "show", "acme"))["retention"] == "forever (0)"


# Each refused before anything is sent; one served replica answers them all.
BAD_TENANT_VALUES = [
    (["--weight", "0"], "--weight", "a weight is 1 to 100, not 0"),
    (["--weight", "101"], "--weight", "a weight is 1 to 100, not 101"),
    (["--max-in-flight", "0"], "--max-in-flight", "1 to 100,000"),
    (["--max-deliveries-per-second", "x"], "--max-deliveries-per-second", "not a whole"),
    (["--retention-seconds", "-1"], "--retention-seconds", "0 keeps forever"),
]


async def test_a_tenant_set_refuses_a_bad_value_naming_its_option(service: Service) -> None:
    for args, option, message in BAD_TENANT_VALUES:
        refused = await cli(service, "tenant", "set", "acme", *args)

        assert refused.returncode == 2, args
        line = one_line(refused.stderr)
        assert f"argument {option}: " in line, args
        assert message in line, args
        gone = await cli(service, "tenant", "show", "acme")
        assert one_line(gone.stderr) == "chronoq: tenant acme does not exist"


async def test_the_default_tenant_refuses_a_pause_and_delivery_quotas_naming_them(
    service: Service,
) -> None:
    for option in ("--paused", "--max-in-flight 3", "--max-deliveries-per-second 3"):
        refused = await cli(service, "tenant", "set", "default", *option.split())
        assert refused.returncode == 2, option
        line = one_line(refused.stderr)
        assert line.startswith(f"chronoq: argument {option.split()[0]}: "), line
        assert "the default tenant is never paused and has no delivery quotas" in line

    paused = await cli(service, "tenant", "pause", "default")
    assert paused.returncode == 2
    assert one_line(paused.stderr).startswith(
        "chronoq: tenant default was not paused (field paused): the default tenant is never paused"
    )
    resumed = await ok(service, "tenant", "resume", "default")
    assert resumed.startswith("tenant default is not paused (version 1); nothing changed")
    assert (await as_json(service, "tenant", "show", "default"))["version"] == 1


async def test_a_paused_tenant_holds_its_deliveries_until_it_is_resumed(
    service: Service,
) -> None:
    await ok(service, "tenant", "set", "acme", "--weight", "3", "--max-in-flight", "2")
    paused = await ok(service, "tenant", "pause", "acme")
    assert paused.startswith(
        "paused tenant acme (version 2): none of its deliveries starts (they wait, nothing "
        "is skipped) until `chronoq tenant resume acme`\n\n"
    )
    again = await as_json(service, "tenant", "pause", "acme")
    assert (again["version"], again["paused"]) == (2, True)
    assert (await ok(service, "tenant", "pause", "acme")).startswith(
        "tenant acme is already paused (version 2); nothing changed"
    )

    async with Receiver() as receiver:
        with Client(service.base_url, api_key=WRITER, trust_env=False, tenant="acme") as acme:
            acme.create_schedule(spec(receiver.url("/held"), trigger={"type": "immediate"}))
        deadline = time.monotonic() + 30
        while (await as_json(service, "tenant", "show", "acme"))["usage"]["waiting"] < 1:
            assert time.monotonic() < deadline, "the occurrence never waited"
            await asyncio.sleep(0.1)
        await asyncio.sleep(1)  # twenty polls of the service: nothing of the tenant starts
        assert receiver.on("/held") == []

        resumed = await as_json(service, "tenant", "resume", "acme")
        # Only `paused` changed: the rest of the tenant is as it was.
        assert (resumed["version"], resumed["paused"], resumed["weight"]) == (3, False, 3)
        assert resumed["quotas"]["max_in_flight"] == 2
        await receiver.wait_for(1, "/held", timeout=30)
    assert (await ok(service, "tenant", "resume", "acme")).startswith(
        "tenant acme is not paused (version 3); nothing changed"
    )


async def test_a_tenant_pause_refuses_a_change_made_after_its_read(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ok(service, "tenant", "set", "acme", "--display-name", "Acme")
    read = HttpOperator.tenant

    async def read_then_changed(self: HttpOperator, tenant: str) -> Any:
        found = await read(self, tenant)
        # Another operator's change lands between the command's read and its put.
        async with httpx.AsyncClient(trust_env=False) as other:
            answer = await other.put(
                f"{service.base_url}/v1/tenants/{tenant}",
                json={"display_name": "Theirs", "weight": 9},
                headers={"Authorization": f"Bearer {WRITER}"},
            )
        assert answer.status_code == 200, answer.text
        return found

    monkeypatch.setattr(HttpOperator, "tenant", read_then_changed)
    refused = await cli(service, "tenant", "pause", "acme")
    monkeypatch.undo()

    assert refused.returncode == 1
    assert one_line(refused.stderr) == (
        "chronoq: tenant acme changed after it was read (the tenant is at version 2; If-Match "
        'named "1"): it was not paused; run the command again'
    )
    # The other operator's change stands, and nothing was paused.
    after = await as_json(service, "tenant", "show", "acme")
    assert (after["version"], after["display_name"], after["weight"], after["paused"]) == (
        2,
        "Theirs",
        9,
        False,
    )
