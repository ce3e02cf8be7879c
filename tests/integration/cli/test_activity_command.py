"""`chronoq activity`: the attempt log's figures minute by minute, over HTTP and on the
database, as GET /v1/activity answers them: the fleet's, a schedule's, a flow key's and the
acting tenant's; a row for each minute with attempts; bad options are usage errors."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from app.worker.activity import ActivityRollup
from tests.integration.cli.test_endpoint_commands import Run, backend, cli, ok, refused
from tests.integration.cli.test_operator_commands import columns
from tests.integration.cli.test_tenant_commands import fields
from tests.integration.conftest import Harness
from tests.receiver import Reply

__all__ = ["backend", "cli"]  # the fixtures, shared with the endpoint commands' cases


async def test_the_figures_are_the_apis_for_the_fleet_and_each_subject(
    cli: Run, harness: Harness
) -> None:
    harness.receiver.always("/gone", Reply(410))
    keyed = await harness.create(flow_key="acme")
    dead = await harness.create(target=harness.webhook("/gone"))
    assert await harness.step() == 2
    await ActivityRollup(harness.database, harness.settings).run_once()

    text = await ok(cli, "activity")
    summary, table = text.split("\n\n")
    shown = fields(summary)
    assert (shown["of"], shown["delivered"], shown["failed"], shown["dead-lettered"]) == (
        "fleet",
        "1",
        "1",
        "1",
    )
    titles, _, rows = columns(table)
    assert titles == ["MINUTE (UTC)", "DELIVERED", "FAILED", "DEAD-LETTERED", "P50", "P99"]
    assert sum(int(row.split()[2]) for row in rows) == 1  # the minute's delivered
    for options, query in (
        (["--window", "24h"], "?window=24h"),
        (["--schedule", dead["id"]], f"?schedule_id={dead['id']}"),
        (["--flow-key", "acme"], "?flow_key=acme"),
        (["--tenant-only"], "?tenant=default"),
    ):
        as_json = json.loads(await ok(cli, "activity", *options, "--format", "json"))
        answer = await harness.get(f"/v1/activity{query}")
        # The window starts at a minute of the reading's clock: two readings either side of
        # a minute's turn start a minute apart, and count the same deliveries.
        shown, served = dict(as_json["totals"]), dict(answer["totals"])
        apart = datetime.fromisoformat(served.pop("at")) - datetime.fromisoformat(shown.pop("at"))
        assert apart in (timedelta(0), timedelta(minutes=1)), options
        assert shown == served, options
        assert (as_json["scope"], as_json["subject"]) == (answer["scope"], answer["subject"])
    of_key = fields((await ok(cli, "activity", "--schedule", keyed["id"])).split("\n\n")[0])
    assert (of_key["delivered"], of_key["failed"]) == ("1", "0")


async def test_bad_options_are_refused_and_an_unknown_schedule_is_not_found(cli: Run) -> None:
    assert "invalid choice" in await refused(cli, "activity", "--window", "2h", status=2)
    assert "not a UUID" in await refused(cli, "activity", "--schedule", "nope", status=2)
    both = await refused(cli, "activity", "--flow-key", "a", "--tenant-only", status=2)
    assert "not allowed with" in both
    missing = await refused(cli, "activity", "--schedule", "0b8a3b0e-8a58-4bb5-9c8e-0f8f3a1c2d4e")
    assert "does not exist" in missing
