"""`chronoq flow-key list|show|set|pause|resume`: flow keys' limits and live figures from the
operator CLI, agreeing with /v1/flow-keys on the same data. In-process (commands.in_process)
but for one case of the installed script."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncConnection

from app.cli.operator.database_backend import DatabaseOperator
from app.cli.operator.flow_keys import set_paused
from app.cli.operator.run import MAX_LIMIT
from app.domain.errors import PreconditionFailedError
from app.domain.flow import FlowKey, FlowLimits, Ordering
from app.domain.tenants import DEFAULT_TENANT, stored_key
from app.service.dead_letters import DeadLetterService
from app.service.flow_keys import FlowKeyService
from app.service.occurrences import OccurrenceService
from app.service.schedules import ScheduleService
from app.store.dialects import transaction_now
from app.store.records.flow_keys import FlowKeyStore
from tests.conftest import EMBEDDED_ONLY
from tests.integration.api.test_flow_keys import backed_off
from tests.integration.cli import commands
from tests.integration.cli.test_operator_commands import (
    UNREACHABLE,
    as_json,
    assert_aligned,
    chronoq,
    columns,
    ok,
    one_line,
)
from tests.integration.conftest import Harness

LIMITS = ("rate", "period_seconds", "burst", "parallelism", "ordering", "paused")


def limits_of(document: dict[str, Any]) -> dict[str, Any]:
    return {name: document[name] for name in LIMITS}


NO_LIMITS = {
    "rate": None,
    "period_seconds": 1.0,
    "burst": None,
    "parallelism": None,
    "ordering": "none",
    "paused": False,
}


async def put(harness: Harness, key: str, expect: int = 201, **limits: Any) -> dict[str, Any]:
    response = await harness.client.put(f"/v1/flow-keys/{key}", json=limits)
    assert response.status_code == expect, response.text
    result: dict[str, Any] = response.json()
    return result


# -- set ---------------------------------------------------------------------------------


async def test_set_creates_a_key_then_replaces_its_limits_as_a_whole(
    harness: Harness, database_url: str
) -> None:
    created = await ok(
        "flow-key",
        "set",
        "customer-42",
        "--rate",
        "50",
        "--burst",
        "100",
        "--parallelism",
        "10",
        database_url=database_url,
    )

    headline, fields = created.split("\n\n")
    assert headline == "created flow key customer-42 (version 1)"
    lines = fields.splitlines()
    assert "version        1" in lines
    assert "rate           50 per 1s" in lines
    assert "burst          100" in lines
    assert "parallelism    10" in lines
    assert "paused         no" in lines
    stored = await harness.get("/v1/flow-keys/customer-42")
    assert limits_of(stored) == {**NO_LIMITS, "rate": 50, "burst": 100, "parallelism": 10}

    replaced = await ok(
        "flow-key",
        "set",
        "customer-42",
        "--rate",
        "3",
        "--period-seconds",
        "2.5",
        "--ordering",
        "fifo",
        "--paused",
        database_url=database_url,
    )

    headline, fields = replaced.split("\n\n")
    assert headline == "replaced the limits of flow key customer-42 (now version 2)"
    assert "rate           3 per 2.5s" in fields.splitlines()
    assert "burst          3 (the rate)" in fields.splitlines()
    assert "parallelism    no limit" in fields.splitlines()
    stored = await harness.get("/v1/flow-keys/customer-42")
    # What the second set left out is no limit again: burst and parallelism are gone.
    assert limits_of(stored) == {
        **NO_LIMITS,
        "rate": 3,
        "period_seconds": 2.5,
        "ordering": "fifo",
        "paused": True,
    }
    assert stored["version"] == 2

    cleared = await as_json("flow-key", "set", "customer-42", database_url=database_url)

    assert limits_of(cleared) == NO_LIMITS
    assert cleared["version"] == 3


async def test_set_json_is_what_the_http_api_answers(harness: Harness, database_url: str) -> None:
    answered = await as_json(
        "flow-key", "set", "billing:eu", "--parallelism", "4", database_url=database_url
    )

    assert answered == await harness.get("/v1/flow-keys/billing:eu")
    assert answered["key"] == "billing:eu"
    assert answered["parallelism"] == 4
    assert answered["version"] == 1


@EMBEDDED_ONLY
@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--rate", "0"], "argument --rate: must be from 1 to 1000000"),
        (["--rate", "x"], "argument --rate: 'x' is not a whole number"),
        (["--burst", "5"], "argument --burst: a burst needs a rate"),
        (["--rate", "5", "--burst", "0"], "argument --burst: must be from 1"),
        (["--parallelism", "0"], "argument --parallelism: must be from 1"),
        (
            ["--ordering", "fifo", "--parallelism", "2"],
            "argument --parallelism: fifo means parallelism 1",
        ),
        (["--rate", "1", "--period-seconds", "0"], "argument --period-seconds: must be more"),
        (["--rate", "1", "--period-seconds", "nan"], "argument --period-seconds: must be more"),
        (["--ordering", "lifo"], "argument --ordering: invalid choice: 'lifo'"),
    ],
)
async def test_set_refuses_bad_values_naming_the_option_and_stores_nothing(
    database_url: str, options: list[str], message: str
) -> None:
    result = await chronoq("flow-key", "set", "customer-42", *options, database_url=database_url)

    assert result.returncode == 2
    line = one_line(result.stderr)
    assert message in line
    assert "(see: chronoq flow-key set --help)" in line
    assert result.stdout == ""
    shown = await as_json("flow-key", "show", "customer-42", database_url=database_url)
    assert shown["version"] is None
    assert await as_json("flow-key", "list", database_url=database_url) == []


@EMBEDDED_ONLY
@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("a b", "'a b' is not a flow key (1-128 of A-Z a-z 0-9 . _ : -)"),
        ("key/1", "'key/1' is not a flow key"),
        ("", "'' is not a flow key"),
        ("k" * 129, "a key of 129 characters is not a flow key"),
    ],
)
@pytest.mark.parametrize("command", ["set", "show", "pause", "resume"])
async def test_a_key_outside_the_alphabet_is_a_usage_error(
    database_url: str, command: str, key: str, message: str
) -> None:
    result = await chronoq("flow-key", command, key, database_url=database_url)

    assert result.returncode == 2
    assert f"argument KEY: {message}" in one_line(result.stderr)
    assert await as_json("flow-key", "list", database_url=database_url) == []


async def test_a_key_of_128_characters_is_one(harness: Harness, database_url: str) -> None:
    key = "k" * 128

    await ok("flow-key", "set", key, "--rate", "1", database_url=database_url)

    assert (await harness.get(f"/v1/flow-keys/{key}"))["rate"] == 1


# -- show --------------------------------------------------------------------------------


async def test_show_a_key_never_put_says_no_limits_with_its_figures(
    harness: Harness, database_url: str
) -> None:
    await harness.create(flow_key="customer-7")  # due now: waiting, as nothing claimed it

    text = await ok("flow-key", "show", "customer-7", database_url=database_url)
    shown = await as_json("flow-key", "show", "customer-7", database_url=database_url)

    assert text.splitlines() == [
        "key            customer-7",
        "limits         no limits (never set: its schedules run unlimited)",
        "in flight      0",
        "waiting        1",
        "backoff until  -",
    ]
    assert shown == await harness.get("/v1/flow-keys/customer-7")
    assert shown["version"] is None
    assert shown["waiting"] == 1


async def test_show_a_key_put_gives_its_limits_version_and_figures(
    harness: Harness, database_url: str
) -> None:
    await put(harness, "customer-7", rate=10, period_seconds=60, paused=True)
    await harness.create(flow_key="customer-7")

    text = await ok("flow-key", "show", "customer-7", database_url=database_url)
    shown = await as_json("flow-key", "show", "customer-7", database_url=database_url)

    lines = text.splitlines()
    assert lines[:10] == [
        "key            customer-7",
        "version        1",
        "rate           10 per 60s",
        "burst          10 (the rate)",
        "parallelism    no limit",
        "ordering       none",
        "paused         yes",
        "in flight      0",
        "waiting        1",
        "backoff until  -",
    ]
    assert lines[10].startswith("created at     20")
    assert lines[11].startswith("updated at     20")
    assert shown == await harness.get("/v1/flow-keys/customer-7")


# -- list --------------------------------------------------------------------------------


async def test_list_gives_keys_in_name_order_with_limits_and_figures(
    harness: Harness, database_url: str
) -> None:
    await put(harness, "b-key", rate=5, period_seconds=2, burst=8, parallelism=3)
    await put(harness, "c-key", ordering="fifo", paused=True)
    await harness.create(flow_key="a-key")  # only a schedule names it

    text = await ok("flow-key", "list", database_url=database_url)
    listed = await as_json("flow-key", "list", database_url=database_url)

    titles, _, _ = columns(text)
    assert titles == [
        "KEY",
        "RATE",
        "BURST",
        "PARALLELISM",
        "ORDERING",
        "PAUSED",
        "VERSION",
        "IN FLIGHT",
        "WAITING",
        "BACKOFF UNTIL",
    ]
    assert assert_aligned(text) == [
        ["a-key", "-", "-", "-", "-", "-", "-", "0", "1", "-"],
        ["b-key", "5/2s", "8", "3", "none", "no", "1", "0", "0", "-"],
        ["c-key", "-", "-", "-", "fifo", "yes", "1", "0", "0", "-"],
    ]
    assert listed == (await harness.get("/v1/flow-keys"))["items"]
    assert [k["key"] for k in listed] == ["a-key", "b-key", "c-key"]


@EMBEDDED_ONLY
async def test_list_says_so_when_there_is_no_key(database_url: str) -> None:
    assert await ok("flow-key", "list", database_url=database_url) == "no flow keys\n"
    assert await as_json("flow-key", "list", database_url=database_url) == []


async def test_list_limit_keeps_the_first_in_name_order(
    harness: Harness, database_url: str
) -> None:
    for key in ["k3", "k1", "k2"]:
        await put(harness, key, rate=1)

    listed = await as_json("flow-key", "list", "--limit", "2", database_url=database_url)
    text = await ok("flow-key", "list", "--limit", "2", database_url=database_url)

    assert [k["key"] for k in listed] == ["k1", "k2"]
    table, note = text.split("\n\n")
    assert [row[0] for row in assert_aligned(table)] == ["k1", "k2"]
    assert note == (
        "(the first 2 flow keys, in name order; more exist: raise --limit or pass --all)\n"
    )
    assert "more exist" not in await ok(
        "flow-key", "list", "--limit", "3", database_url=database_url
    )


@EMBEDDED_ONLY
async def test_list_all_pages_through_every_key(harness: Harness, database_url: str) -> None:
    keys = [f"key-{n:04d}" for n in range(MAX_LIMIT + 1)]  # one more than the largest page

    async def put_all(conn: AsyncConnection) -> None:  # one transaction: a commit costs
        now = await transaction_now(conn)
        for key in keys:
            stored = stored_key(DEFAULT_TENANT, key)
            await FlowKeyStore().put(conn, stored, FlowLimits(parallelism=1), None, now)

    await harness.database.run(put_all)

    listed = await as_json("flow-key", "list", "--all", database_url=database_url)
    text = await ok("flow-key", "list", "--all", database_url=database_url)

    assert [k["key"] for k in listed] == keys
    assert len(text.splitlines()) == 1 + len(keys)  # the header and a row each, no note
    assert [k["key"] for k in await as_json("flow-key", "list", database_url=database_url)] == (
        keys[:50]
    )


# -- pause, resume -----------------------------------------------------------------------


async def test_pause_and_resume_flip_paused_and_keep_the_other_limits(
    harness: Harness, database_url: str
) -> None:
    await put(harness, "customer-42", rate=50, burst=100, parallelism=10)
    limits = {**NO_LIMITS, "rate": 50, "burst": 100, "parallelism": 10}

    text = await ok("flow-key", "pause", "customer-42", database_url=database_url)

    headline, fields = text.split("\n\n")
    assert headline == (
        "paused flow key customer-42 (version 2): nothing of it starts until "
        "`chronoq flow-key resume customer-42`"
    )
    assert "paused         yes" in fields.splitlines()
    stored = await harness.get("/v1/flow-keys/customer-42")
    assert limits_of(stored) == {**limits, "paused": True}
    assert stored["version"] == 2

    resumed = await ok("flow-key", "resume", "customer-42", database_url=database_url)

    assert resumed.split("\n\n")[0] == "resumed flow key customer-42 (version 3)"
    stored = await harness.get("/v1/flow-keys/customer-42")
    assert limits_of(stored) == limits
    assert stored["version"] == 3


async def test_pause_json_is_the_key_as_the_http_api_answers_it(
    harness: Harness, database_url: str
) -> None:
    await put(harness, "customer-42", parallelism=2)

    paused = await as_json("flow-key", "pause", "customer-42", database_url=database_url)

    assert paused == await harness.get("/v1/flow-keys/customer-42")
    assert paused["paused"] is True
    assert paused["parallelism"] == 2


async def test_pausing_a_key_never_put_creates_it_with_only_paused(
    harness: Harness, database_url: str
) -> None:
    await harness.create(flow_key="customer-9")

    text = await ok("flow-key", "pause", "customer-9", database_url=database_url)

    assert text.startswith("paused flow key customer-9 (version 1)")
    stored = await harness.get("/v1/flow-keys/customer-9")
    assert limits_of(stored) == {**NO_LIMITS, "paused": True}
    assert stored["version"] == 1
    assert stored["waiting"] == 1


async def test_pausing_a_paused_key_or_resuming_one_never_put_changes_nothing(
    harness: Harness, database_url: str
) -> None:
    await put(harness, "paused-key", paused=True)

    again = await ok("flow-key", "pause", "paused-key", database_url=database_url)
    never = await ok("flow-key", "resume", "never-put", database_url=database_url)

    assert again.split("\n\n")[0] == (
        "flow key paused-key is already paused (version 1); nothing changed"
    )
    assert (await harness.get("/v1/flow-keys/paused-key"))["version"] == 1
    assert never.split("\n\n")[0] == (
        "flow key never-put has no limits, so it is not paused; nothing changed"
    )
    assert [k["key"] for k in (await harness.get("/v1/flow-keys"))["items"]] == ["paused-key"]


def on(harness: Harness, flow_keys: FlowKeyService) -> DatabaseOperator:
    """The commands' operator on the harness's database, with `flow_keys` as its service."""
    database = harness.database
    return DatabaseOperator(
        "the database",
        ScheduleService(database, harness.settings),
        DeadLetterService(database),
        OccurrenceService(database),
        flow_keys,
    )


class ChangedAfterRead(FlowKeyService):
    """The service, with another operator's put landing just after each read."""

    def __init__(self, harness: Harness, limits: FlowLimits) -> None:
        super().__init__(harness.database)
        self._limits = limits

    async def get(self, key: str, *, tenant: str) -> FlowKey:
        found = await super().get(key, tenant=tenant)
        await super().put(key, self._limits, tenant=tenant)
        return found


@pytest.mark.parametrize(
    ("paused", "put_before"),
    [(True, True), (True, False), (False, True)],
    ids=["pause", "pause a key never put", "resume"],
)
async def test_a_change_between_the_read_and_the_put_is_not_overwritten(
    harness: Harness, database_url: str, paused: bool, put_before: bool
) -> None:
    service = FlowKeyService(harness.database)
    if put_before:
        await service.put(
            "customer-42", FlowLimits(parallelism=2, paused=not paused), tenant=DEFAULT_TENANT
        )
    theirs = FlowLimits(rate=7, ordering=Ordering.FIFO, paused=not paused)

    with pytest.raises(PreconditionFailedError) as raised:
        await set_paused(on(harness, ChangedAfterRead(harness, theirs)), "customer-42", paused)

    verb = "paused" if paused else "resumed"
    assert raised.value.detail.startswith("flow key customer-42 changed after it was read (")
    assert raised.value.detail.endswith(f"): it was not {verb}; run the command again")
    assert "If-Match named" in raised.value.detail
    # The other operator's limits stand, and the CLI shows them so.
    shown = await as_json("flow-key", "show", "customer-42", database_url=database_url)
    assert limits_of(shown) == {
        **NO_LIMITS,
        "rate": 7,
        "ordering": "fifo",
        "paused": not paused,
    }


async def test_a_pause_with_no_change_in_between_succeeds_under_if_match(
    harness: Harness,
) -> None:
    service = FlowKeyService(harness.database)
    await service.put("customer-42", FlowLimits(rate=5), tenant=DEFAULT_TENANT)

    found, changed = await set_paused(on(harness, service), "customer-42", True)

    assert changed
    assert found.version == 2
    assert (found.rate, found.paused) == (5, True)


# -- errors ------------------------------------------------------------------------------


@EMBEDDED_ONLY
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["flow-key"], "required"),
        (["flow-key", "drop", "k"], "invalid choice: 'drop'"),
        (["flow-key", "show"], "required: KEY"),
        (["flow-key", "list", "--limit", "0"], "between 1 and 500"),
        (["flow-key", "list", "--all", "--limit", "5"], "not allowed with argument --all"),
        (["flow-key", "show", "k", "--bogus"], "unrecognized arguments: --bogus"),
        (["flow-key", "set", "k", "--paused", "--format", "xml"], "invalid choice: 'xml'"),
    ],
)
async def test_usage_errors_exit_2_with_one_line(
    database_url: str, args: list[str], message: str
) -> None:
    result = await chronoq(*args, database_url=database_url)

    assert result.returncode == 2
    assert message in one_line(result.stderr)


@pytest.mark.parametrize(
    "command",
    [["list"], ["show", "k"], ["set", "k", "--rate", "1"], ["pause", "k"]],
    ids=" ".join,
)
async def test_an_unreachable_database_exits_1_without_showing_its_password(
    command: list[str],
) -> None:
    result = await chronoq("flow-key", *command, "--conn", UNREACHABLE, database_url=None)

    assert result.returncode == 1
    assert "cannot reach postgresql://user:***@127.0.0.1:1/x" in one_line(result.stderr)
    assert "secret" not in result.stderr + result.stdout


@EMBEDDED_ONLY
async def test_the_installed_script_sets_a_key(database_url: str) -> None:
    done = await asyncio.to_thread(
        commands.chronoq,
        "flow-key",
        "set",
        "customer-42",
        "--parallelism",
        "3",
        DATABASE_URL=database_url,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("created flow key customer-42 (version 1)\n")
    shown = await ok("flow-key", "show", "customer-42", database_url=database_url)
    assert "parallelism    3" in shown.splitlines()


# -- clear-backoff -------------------------------------------------------------------------


async def test_clear_backoff_ends_a_destinations_back_off_and_keeps_the_limits(
    harness: Harness, database_url: str
) -> None:
    await put(harness, "busy", parallelism=3)
    await backed_off(harness, "busy")
    shown = await ok("flow-key", "show", "busy", database_url=database_url)
    assert "backoff until  -" not in shown.splitlines()

    text = await ok("flow-key", "clear-backoff", "busy", database_url=database_url)

    headline, fields = text.split("\n\n")
    assert headline == (
        "cleared the back-off of flow key busy: what waits on it starts as its limits allow"
    )
    assert "backoff until  -" in fields.splitlines()
    stored = await harness.get("/v1/flow-keys/busy")
    assert stored["backoff_until"] is None
    assert (limits_of(stored), stored["version"]) == ({**NO_LIMITS, "parallelism": 3}, 1)
    assert await harness.step() == 1  # what waited on the key goes out now

    again = await as_json("flow-key", "clear-backoff", "busy", database_url=database_url)
    assert again == await harness.get("/v1/flow-keys/busy")
    unchanged = await ok("flow-key", "clear-backoff", "busy", database_url=database_url)
    assert unchanged.split("\n\n")[0] == "flow key busy has no back-off; nothing changed"
