"""`chronoq activity`: what happened minute by minute over the last hour or day, from the
attempt log, as GET /v1/activity answers: the fleet's, or one schedule's (`--schedule`),
flow key's (`--flow-key`), endpoint's (`--endpoint`) or the acting tenant's
(`--tenant-only`).

Same conventions as the other operator commands (app/cli/operator/commands.py): `--format
json` prints the API's answer; the text is the window's figures, then a row for each minute
that had attempts, oldest first.
"""

from __future__ import annotations

import argparse

from app.api.activity_schemas import ActivityOut
from app.cli.operator import text as render
from app.cli.operator.backends import Operator
from app.cli.operator.run import (
    Output,
    Parser,
    acting_tenant,
    execute,
    flow_key_arg,
    uuid_arg,
)
from app.domain.tenants import DEFAULT_TENANT
from app.ui.charts import format_lateness

COLUMNS = ("MINUTE (UTC)", "DELIVERED", "FAILED", "DEAD-LETTERED", "P50", "P99")


def activity_text(found: ActivityOut) -> str:
    totals = found.totals
    summary = render.fields(
        [
            ("of", found.scope if found.subject is None else f"{found.scope} {found.subject}"),
            ("window", f"{found.window} to {render.when(found.until)}"),
            ("delivered", str(totals.delivered)),
            ("failed", str(totals.failed)),
            ("dead-lettered", str(totals.dead_lettered)),
            ("lateness p50", format_lateness(totals.lateness_p50_seconds)),
            ("lateness p99", format_lateness(totals.lateness_p99_seconds)),
            ("current to", render.when(found.current_to)),
        ]
    )
    busy = [m for m in found.minutes if m.delivered or m.failed]
    if not busy:
        return summary + "\n\nno attempt in the window"
    rows = [
        [
            m.at.strftime("%Y-%m-%d %H:%M"),
            str(m.delivered),
            str(m.failed),
            str(m.dead_lettered),
            format_lateness(m.lateness_p50_seconds),
            format_lateness(m.lateness_p99_seconds),
        ]
        for m in busy
    ]
    return summary + "\n\n" + render.table(COLUMNS, rows)


def _activity(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        found = await operator.activity(
            args.window,
            # The acting tenant's own figures: --tenant, CHRONOQ_TENANT, or default.
            tenant=(acting_tenant(args) or DEFAULT_TENANT) if args.tenant_only else None,
            schedule_id=args.schedule,
            flow_key=args.flow_key,
            endpoint_id=args.endpoint,
        )
        return Output(found.model_dump(mode="json"), activity_text(found))

    return execute(args, work)


def add_activity_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: Parser
) -> None:
    """Register `activity`."""
    parser = commands.add_parser(
        "activity",
        parents=[common],
        help="deliveries, failures, dead letters and lateness per minute (GET /v1/activity)",
    )
    parser.add_argument(
        "--window", choices=("1h", "24h"), default="1h", help="the last hour (default) or day"
    )
    subject = parser.add_mutually_exclusive_group()
    subject.add_argument("--schedule", type=uuid_arg, metavar="ID", help="one schedule's")
    subject.add_argument("--flow-key", type=flow_key_arg, metavar="KEY", help="one flow key's")
    subject.add_argument("--endpoint", type=uuid_arg, metavar="ID", help="one endpoint's")
    subject.add_argument(
        "--tenant-only",
        dest="tenant_only",
        action="store_true",
        help="the acting tenant's (--tenant, or default) rather than the fleet's",
    )
    parser.set_defaults(run=_activity)
