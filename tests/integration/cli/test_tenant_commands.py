"""`chronoq tenant set|show|list|pause|resume|events` on the database (break-glass): every
field of a tenant set and shown, agreeing with /v1/tenants on the same data; an events
target set (a webhook, its signing secret shown by its hint only, or an endpoint), kept by
pause and resume and removed by a set without it; a pause that
holds the tenant's deliveries until it is resumed, under If-Match of the version read; each
change in the tenant's audit events, by "cli". In-process (commands.in_process). The same
commands over HTTP: tests/e2e/test_cli_over_http.py."""

from __future__ import annotations

import base64
import re
import uuid

import pytest

from app.cli.operator.database_backend import DatabaseOperator
from app.cli.operator.tenants import set_paused
from app.domain.errors import InvalidInputError, PreconditionFailedError
from app.domain.tenants import Tenant, TenantSpec
from app.service.dead_letters import DeadLetterService
from app.service.flow_keys import FlowKeyService
from app.service.occurrences import OccurrenceService
from app.service.schedules import ScheduleService
from app.service.tenants import TenantService
from tests.integration.cli.test_operator_commands import (
    UNREACHABLE,
    as_json,
    chronoq,
    ok,
    one_line,
)
from tests.integration.conftest import Harness

EVERY_OPTION = [
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
]


def fields(text: str) -> dict[str, str]:
    """A field list's values by name (name, two spaces or more, value)."""
    return dict(re.split(r"\s{2,}", line, maxsplit=1) for line in text.splitlines() if line)


# A Standard Webhooks secret, and the hint that responses show for it.
SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
HINT = "whsec_…" + SECRET[-4:]


async def create_in(harness: Harness, tenant: str) -> None:
    body = {
        "event_type": "test.event",
        "target": harness.webhook(),
        "trigger": {"type": "immediate"},
    }
    response = await harness.client.post(
        "/v1/schedules", json=body, headers={"Chronoq-Tenant": tenant}
    )
    assert response.status_code == 201, response.text


async def test_set_takes_every_field_and_show_and_list_say_them(
    harness: Harness, database_url: str
) -> None:
    made = await ok("tenant", "set", "acme", *EVERY_OPTION, database_url=database_url)
    assert made.startswith("created tenant acme (version 1)\n\n")
    await create_in(harness, "acme")

    stored = await harness.get("/v1/tenants/acme")
    assert (stored["weight"], stored["paused"], stored["retention_seconds"]) == (7, True, 86400)
    assert stored["quotas"] == {
        "max_schedules": 100,
        "max_creates_per_minute": 60,
        "max_deliveries_per_second": 20,
        "max_in_flight": 4,
    }
    shown = fields(await ok("tenant", "show", "acme", database_url=database_url))
    assert shown["weight"] == "7"
    assert shown["paused"] == "yes: its deliveries wait until `chronoq tenant resume acme`"
    assert shown["max schedules"] == "100"
    assert shown["max creates per minute"] == "60"
    assert shown["max deliveries per second"] == "20"
    assert shown["max in flight"] == "4"
    assert shown["retention"] == "86400 seconds"
    assert shown["events target"] == "none"
    assert (shown["schedules"], shown["pending occurrences"], shown["waiting"]) == ("1", "1", "1")
    assert (shown["in flight"], shown["dead letters"]) == ("0", "0")
    # --format json is the API's answer.
    assert await as_json("tenant", "show", "acme", database_url=database_url) == (
        await harness.get("/v1/tenants/acme")
    )
    listed = (await ok("tenant", "list", database_url=database_url)).splitlines()
    assert re.split(r"\s{2,}", listed[0]) == [
        "TENANT",
        "DISPLAY NAME",
        "WEIGHT",
        "PAUSED",
        "VERSION",
        "CREATED",
    ]
    assert re.split(r"\s{2,}", listed[1])[:5] == ["acme", "Acme", "7", "yes", "1"]
    assert re.split(r"\s{2,}", listed[2])[:5] == ["default", "-", "1", "no", "1"]

    # A set is whole: what it leaves out goes to its default, the pause included.
    replaced = await ok("tenant", "set", "acme", database_url=database_url)
    assert replaced.startswith("replaced tenant acme (version 2)\n\n")
    shown = fields(replaced.split("\n\n")[1])
    assert (shown["weight"], shown["paused"], shown["max in flight"]) == ("1", "no", "no limit")
    assert shown["retention"] == "the service's (CHRONOQ_SCHEDULE_RETENTION)"


async def test_a_paused_tenant_delivers_nothing_until_it_is_resumed(
    harness: Harness, database_url: str
) -> None:
    await ok(
        "tenant", "set", "acme", "--weight", "3", "--max-in-flight", "2", database_url=database_url
    )
    paused = await ok("tenant", "pause", "acme", database_url=database_url)
    assert paused.startswith(
        "paused tenant acme (version 2): none of its deliveries starts (they wait, nothing is "
        "skipped) until `chronoq tenant resume acme`\n\n"
    )
    again = await ok("tenant", "pause", "acme", database_url=database_url)
    assert again.startswith("tenant acme is already paused (version 2); nothing changed")

    await create_in(harness, "acme")
    assert await harness.step() == 0
    assert harness.receiver.requests == []
    shown = fields(await ok("tenant", "show", "acme", database_url=database_url))
    assert (shown["paused"][:3], shown["waiting"]) == ("yes", "1")

    resumed = await as_json("tenant", "resume", "acme", database_url=database_url)
    # Only `paused` changed: the rest of the tenant is as it was.
    assert (resumed["version"], resumed["paused"], resumed["weight"]) == (3, False, 3)
    assert resumed["quotas"]["max_in_flight"] == 2
    assert await harness.step() == 1
    assert len(harness.receiver.requests) == 1
    again = await ok("tenant", "resume", "acme", database_url=database_url)
    assert again.startswith("tenant acme is not paused (version 3); nothing changed")


async def test_the_default_tenant_is_never_paused_and_resuming_it_changes_nothing(
    harness: Harness, database_url: str
) -> None:
    refused = await chronoq("tenant", "pause", "default", database_url=database_url)
    assert refused.returncode == 2
    assert one_line(refused.stderr).startswith(
        "chronoq: tenant default was not paused (field paused): the default tenant is never "
        "paused and has no delivery quotas"
    )
    for option in ("--paused", "--max-in-flight", "--max-deliveries-per-second"):
        value = [] if option == "--paused" else ["3"]
        refused = await chronoq(
            "tenant", "set", "default", option, *value, database_url=database_url
        )
        assert refused.returncode == 2, option
        assert one_line(refused.stderr).startswith(f"chronoq: argument {option}: the default")

    resumed = await ok("tenant", "resume", "default", database_url=database_url)
    assert resumed.startswith("tenant default is not paused (version 1); nothing changed")
    assert (await harness.get("/v1/tenants/default"))["version"] == 1
    missing = await chronoq("tenant", "pause", "nobody", database_url=database_url)
    assert missing.returncode == 1
    assert one_line(missing.stderr).startswith("chronoq: tenant nobody does not exist in ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--weight", "0"], "argument --weight: a weight is 1 to 100, not 0"),
        (["--weight", "many"], "argument --weight: 'many' is not a whole number"),
        (["--max-deliveries-per-second", "0"], "argument --max-deliveries-per-second: "),
        (["--max-in-flight", "100001"], "argument --max-in-flight: an in-flight quota is 1 to"),
        (["--retention-seconds", "-5"], "argument --retention-seconds: a retention"),
        (["--paused", "yes"], "unrecognized arguments: yes"),
        (["--events-url", "ftp://host/x"], "argument --events-url: url must be an absolute"),
        (
            ["--events-url", "http://127.0.0.1:9/x", "--events-secret", "whsec_!!"],
            "argument --events-secret: signing_secret must be whsec_ followed by",
        ),
        (["--events-secret", SECRET], "argument --events-secret: only with --events-url"),
        (["--events-endpoint", "nope"], "argument --events-endpoint: Input should be a valid"),
        (
            ["--events-url", "http://127.0.0.1:9/x", "--events-endpoint", str(uuid.uuid4())],
            "argument --events-endpoint: not allowed with argument --events-url",
        ),
    ],
)
async def test_a_bad_value_is_a_usage_error_found_before_the_database_is_opened(
    args: list[str], message: str
) -> None:
    # The database is unreachable: the value is refused first, with exit 2.
    refused = await chronoq("tenant", "set", "acme", *args, database_url=UNREACHABLE)

    assert refused.returncode == 2
    assert message in one_line(refused.stderr)
    assert SECRET not in refused.stderr


async def test_an_events_webhook_is_set_and_shown_with_its_secret_hint_never_the_secret(
    harness: Harness, database_url: str
) -> None:
    url = harness.receiver.url("/events")
    made = await ok(
        "tenant",
        "set",
        "acme",
        "--events-url",
        url,
        "--events-secret",
        SECRET,
        database_url=database_url,
    )

    assert made.startswith("created tenant acme (version 1)\n\n")
    stored = (await harness.get("/v1/tenants/acme"))["events_target"]
    assert (stored["type"], stored["url"], stored["method"]) == ("webhook", url, "POST")
    assert stored["signing_secret"] == HINT
    shown = await ok("tenant", "show", "acme", database_url=database_url)
    assert fields(shown)["events target"] == f"POST {url} (signing secret {HINT})"
    document = await ok("tenant", "show", "acme", "--format", "json", database_url=database_url)
    assert SECRET not in made + shown + document
    assert SECRET[6:] not in made + shown + document


async def test_an_events_endpoint_of_the_tenant_is_set_and_shown(
    harness: Harness, database_url: str
) -> None:
    await ok("tenant", "set", "acme", database_url=database_url)
    response = await harness.client.post(
        "/v1/endpoints",
        json={"url": harness.receiver.url("/endpoint")},
        headers={"Chronoq-Tenant": "acme"},
    )
    assert response.status_code == 201, response.text
    endpoint = response.json()["id"]

    made = await ok(
        "tenant", "set", "acme", "--events-endpoint", endpoint, database_url=database_url
    )

    assert fields(made.split("\n\n")[1])["events target"] == f"endpoint {endpoint}"
    stored = await harness.get("/v1/tenants/acme")
    assert stored["events_target"] == {"type": "endpoint", "endpoint_id": endpoint}
    # An endpoint of no such id in the tenant is refused by the service, naming the option.
    missing = str(uuid.uuid4())
    refused = await chronoq(
        "tenant", "set", "acme", "--events-endpoint", missing, database_url=database_url
    )
    assert refused.returncode == 2
    assert one_line(refused.stderr) == (
        f"chronoq: argument --events-endpoint: endpoint {missing} does not exist in this tenant"
    )
    assert (await harness.get("/v1/tenants/acme"))["version"] == 2


async def test_pause_and_resume_keep_the_events_target_and_a_set_without_it_removes_it(
    harness: Harness, database_url: str
) -> None:
    url = harness.receiver.url("/events")
    await ok(
        "tenant",
        "set",
        "acme",
        "--events-url",
        url,
        "--events-secret",
        SECRET,
        database_url=database_url,
    )
    await ok("tenant", "pause", "acme", database_url=database_url)
    resumed = await ok("tenant", "resume", "acme", database_url=database_url)

    assert resumed.startswith("resumed tenant acme (version 3)")
    assert fields(resumed.split("\n\n")[1])["events target"] == (
        f"POST {url} (signing secret {HINT})"
    )
    shown = fields(await ok("tenant", "show", "acme", database_url=database_url))
    assert shown["events target"] == f"POST {url} (signing secret {HINT})"

    # A set is whole: without the options the tenant has no events target.
    replaced = await ok("tenant", "set", "acme", database_url=database_url)
    assert fields(replaced.split("\n\n")[1])["events target"] == "none"
    assert (await harness.get("/v1/tenants/acme"))["events_target"] is None


def on(harness: Harness, tenants: TenantService) -> DatabaseOperator:
    """The commands' operator on the harness's database, with `tenants` as its service."""
    database = harness.database
    return DatabaseOperator(
        "the database",
        ScheduleService(database, harness.settings),
        DeadLetterService(database),
        OccurrenceService(database),
        FlowKeyService(database),
        tenants_=tenants,
    )


class ChangedAfterRead(TenantService):
    """The service, with another operator's put landing just after each read."""

    def __init__(self, harness: Harness, theirs: TenantSpec) -> None:
        super().__init__(harness.database)
        self._theirs = theirs

    async def get(self, tenant: str) -> Tenant:
        found = await super().get(tenant)
        await super().put(tenant, self._theirs, actor="theirs")
        return found


@pytest.mark.parametrize("paused", [True, False], ids=["pause", "resume"])
async def test_a_change_between_the_read_and_the_put_is_not_overwritten(
    harness: Harness, database_url: str, paused: bool
) -> None:
    service = TenantService(harness.database)
    await service.put("acme", TenantSpec(display_name="Acme", paused=not paused), actor="cli")
    theirs = TenantSpec(display_name="Theirs", weight=9, paused=not paused)

    with pytest.raises(PreconditionFailedError) as raised:
        await set_paused(on(harness, ChangedAfterRead(harness, theirs)), "acme", paused)

    verb = "paused" if paused else "resumed"
    assert raised.value.detail == (
        'tenant acme changed after it was read (the tenant is at version 2; If-Match named "1"'
        f"): it was not {verb}; run the command again"
    )
    # The other operator's tenant stands, and the CLI shows it so.
    shown = await as_json("tenant", "show", "acme", database_url=database_url)
    assert (shown["version"], shown["display_name"], shown["weight"], shown["paused"]) == (
        2,
        "Theirs",
        9,
        not paused,
    )


async def test_a_pause_with_no_change_in_between_puts_the_tenant_back_whole(
    harness: Harness,
) -> None:
    service = TenantService(harness.database)
    kept = TenantSpec(display_name="Acme", weight=4, retention_seconds=60)
    await service.put("acme", kept, actor="cli")

    found, changed = await set_paused(on(harness, service), "acme", True)

    assert changed
    assert (found.version, found.paused, found.weight) == (2, True, 4)
    assert (found.display_name, found.retention_seconds) == ("Acme", 60)
    with pytest.raises(InvalidInputError) as raised:
        await set_paused(on(harness, service), "default", True)
    assert "(field paused)" in raised.value.detail


async def test_events_list_each_change_by_cli_and_outlive_the_tenant(
    harness: Harness, database_url: str
) -> None:
    await ok("tenant", "set", "acme", "--weight", "2", database_url=database_url)
    await ok("tenant", "pause", "acme", database_url=database_url)
    made = await as_json("tenant", "key", "create", "acme", "deploy-bot", database_url=database_url)
    await ok("tenant", "key", "revoke", "acme", made["id"], database_url=database_url)
    await ok("tenant", "delete", "acme", database_url=database_url)

    shown = (await ok("tenant", "events", "acme", database_url=database_url)).splitlines()
    assert re.split(r"\s{2,}", shown[0]) == ["AT", "KIND", "VERSION", "ACTOR", "FIELDS", "KEY"]
    assert [re.split(r"\s{2,}", line)[1:] for line in shown[1:]] == [
        ["created", "1", "cli", "-", "-"],
        ["updated", "2", "cli", "paused", "-"],
        ["paused", "2", "cli", "-", "-"],
        ["key_created", "-", "cli", "-", "deploy-bot"],
        ["key_revoked", "-", "cli", "-", "deploy-bot"],
        ["deleted", "-", "cli", "-", "-"],
    ]
    # --format json is the API's answer, page after page with --all.
    every = await as_json("tenant", "events", "acme", "--all", database_url=database_url)
    assert every == (await harness.get("/v1/tenants/acme/events"))["items"]
    assert every[3]["key_id"] == made["id"]
    first = await ok("tenant", "events", "acme", "--limit", "2", database_url=database_url)
    assert len(first.split("\n\n")[0].splitlines()) == 3
    assert first.endswith(
        "(the first 2 events, oldest first; more exist: raise --limit or --all)\n"
    )

    none = await ok("tenant", "events", "default", database_url=database_url)
    assert none == "no events of tenant default\n"
    missing = await chronoq("tenant", "events", "nobody", database_url=database_url)
    assert missing.returncode == 1
    assert one_line(missing.stderr).startswith("chronoq: tenant nobody does not exist in ")
