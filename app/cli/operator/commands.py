"""Operator commands of `chronoq`: list, inspect, events, attempts, pause, resume, cancel,
trigger, patch, backfill (`changes`), dead-letter list|replay|discard (`dead_letters`),
flow-key list|show|set|pause|resume (`flow_keys`), tenant ... (`tenants`, `tenant_keys`),
endpoint create|list|show|update|delete|rotate|enable|events|attempts (`endpoints`), topic
put|list|show|delete (`topics`) and subscription create|list|show|update|delete
(`subscriptions`), each a module of this package.

Each runs against a running service over HTTP (`--url` or CHRONOQ_URL, with the API key of
CHRONOQ_API_KEY or `--api-key-file`: the key's role applies and its name is the actor), or,
for break-glass work, against the database itself (`--conn`, or DATABASE_URL when no URL is
set: no key, the actor "cli"), through the same services as the HTTP API (`backends`).
Both print the same.

Exit codes: 0 done, 1 the database or the service refused (unreachable, unknown id, a
conflict, a key without the role), 2 the command line is wrong. Every error is one line on
stderr; a URL is only ever shown with its password hidden.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Awaitable, Callable

from app.api.schedule_schemas import ScheduleEventOut, ScheduleOut
from app.cli.operator import text as render
from app.cli.operator.backends import Operator
from app.cli.operator.run import (
    MAX_LIMIT,
    Output,
    Parser,
    add_id,
    add_limit,
    collect,
    common_options,
    execute,
    flow_key_arg,
    instant_arg,
    label_arg,
)
from app.domain.filters import ScheduleFilter, ScheduleSort
from app.domain.schedule import ScheduleStatus

# -- the commands -----------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    where = ScheduleFilter(
        status=None if args.status is None else ScheduleStatus(args.status),
        event_type=args.event_type,
        target_type=args.target_type,
        name=args.name,
        name_prefix=args.name_prefix,
        labels=dict(args.label),
        failing=args.failing,
        due_before=args.due_before,
        flow_key=args.flow_key,
        sort=ScheduleSort(args.sort),
    )

    async def work(operator: Operator) -> Output:
        page, more = await collect(args, lambda n, c: operator.list_schedules(where, n, c))
        if not page:
            text = "no schedules match"
        else:
            text = render.table(render.SCHEDULE_COLUMNS, [render.schedule_row(s) for s in page])
            if more:
                text += render.more(len(page), "schedules")
        return Output([s.model_dump(mode="json") for s in page], text)

    return execute(args, work)


def _inspect(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        schedule = await operator.get_schedule(args.id)
        occurrences, _ = await collect(args, lambda n, c: operator.occurrences(args.id, n, c))
        paused_by = None
        if schedule.status == ScheduleStatus.PAUSED:
            paused_by = await _latest_pause(operator, args.id)
        if occurrences:
            shown = f"occurrences, latest first:\n{render.occurrence_table(occurrences)}"
        else:
            shown = "no occurrences"
        return Output(
            {
                "schedule": schedule.model_dump(mode="json"),
                "paused_by": None if paused_by is None else paused_by.model_dump(mode="json"),
                "occurrences": [o.model_dump(mode="json") for o in occurrences],
            },
            f"{render.snapshot(schedule, paused_by)}\n\n{shown}",
        )

    return execute(args, work)


async def _latest_pause(operator: Operator, schedule_id: uuid.UUID) -> ScheduleEventOut | None:
    """The schedule's latest pause event (by an operator, or by itself): the audit log is
    read oldest first, to its end."""
    latest = None
    cursor: str | None = None
    while True:
        page = await operator.events(schedule_id, MAX_LIMIT, cursor)
        latest = next((e for e in reversed(page.items) if e.kind in render.PAUSES), latest)
        if page.next_cursor is None:
            return latest
        cursor = page.next_cursor


def _events(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        page, more = await collect(args, lambda n, c: operator.events(args.id, n, c))
        text = render.event_table(page)
        if more:
            text += f"\n\n(the first {len(page)} events, oldest first; raise --limit for more)"
        return Output([e.model_dump(mode="json") for e in page], text)

    return execute(args, work)


def _attempts(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        page, more = await collect(args, lambda n, c: operator.attempts(args.id, n, c))
        if not page:
            text = f"no attempts of occurrence {args.id} yet"
        else:
            text = render.attempt_table(page)
            if more:
                text += (
                    f"\n\n(the first {len(page)} attempts, oldest first; raise --limit for more)"
                )
        return Output([a.model_dump(mode="json") for a in page], text)

    return execute(args, work)


def _change(
    action: Callable[[Operator, uuid.UUID], Awaitable[ScheduleOut]],
) -> Callable[[argparse.Namespace], int]:
    """pause, resume, cancel: the service's rule, then the schedule as it now is."""

    def run(args: argparse.Namespace) -> int:
        async def work(operator: Operator) -> Output:
            schedule = await action(operator, args.id)
            return Output(schedule.model_dump(mode="json"), render.snapshot(schedule))

        return execute(args, work)

    return run


# -- registration -----------------------------------------------------------------------


# -- registration -----------------------------------------------------------------------


def add_operator_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the operator commands (this module's docstring lists them)."""
    common = common_options()
    # argparse has no public way to choose the parser class of one subcommand.
    default_class = commands._parser_class
    commands._parser_class = Parser
    try:
        _register(commands, common)
    finally:
        commands._parser_class = default_class


def _register(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: Parser
) -> None:
    listing = commands.add_parser(
        "list",
        parents=[common],
        help="list schedules, newest first unless --sort says otherwise, with the API's filters",
    )
    listing.add_argument("--status", choices=[s.value for s in ScheduleStatus])
    listing.add_argument("--event-type", metavar="TYPE")
    listing.add_argument("--target-type", choices=["webhook", "rabbitmq"])
    listing.add_argument(
        "--label",
        type=label_arg,
        action="append",
        default=[],
        metavar="KEY:VALUE",
        help="only schedules with this label (repeatable: all must match)",
    )
    listing.add_argument("--name", help="the schedule with this name")
    listing.add_argument(
        "--name-prefix",
        metavar="TEXT",
        help="schedules whose name starts with TEXT (taken literally: %% and _ are characters)",
    )
    listing.add_argument(
        "--failing",
        action="store_true",
        help="only failing schedules: occurrences dead-lettered in a row, or a dead letter "
        "of the last 24 hours still waiting",
    )
    listing.add_argument(
        "--due-before",
        type=instant_arg,
        metavar="INSTANT",
        help="only schedules with an occurrence due by then (RFC 3339 with an offset); "
        "with --sort next_fire_at: what fires next or is overdue",
    )
    listing.add_argument(
        "--flow-key",
        type=flow_key_arg,
        metavar="KEY",
        help="only schedules of this flow key (DESIGN section 11)",
    )
    listing.add_argument(
        "--sort",
        choices=[s.value for s in ScheduleSort],
        default=ScheduleSort.CREATED.value,
        help="created (newest first, the default), next_fire_at (earliest first) or "
        "failures (most in a row first)",
    )
    add_limit(listing, 50, "schedules")
    listing.set_defaults(run=_list)

    inspect = commands.add_parser(
        "inspect", parents=[common], help="show a schedule and its latest occurrences"
    )
    add_id(inspect, "schedule id")
    add_limit(inspect, 10, "occurrences, latest first")
    inspect.set_defaults(run=_inspect)

    events = commands.add_parser(
        "events", parents=[common], help="a schedule's audit events, oldest first"
    )
    add_id(events, "schedule id")
    add_limit(events, 50, "events, oldest first")
    events.set_defaults(run=_events)

    attempts = commands.add_parser(
        "attempts",
        parents=[common],
        help="an occurrence's delivery attempts, oldest first (a replay's after the earlier)",
    )
    add_id(attempts, "occurrence id")
    add_limit(attempts, 50, "attempts, oldest first")
    attempts.set_defaults(run=_attempts)

    changes: list[tuple[str, str, Callable[[Operator, uuid.UUID], Awaitable[ScheduleOut]]]] = [
        (
            "pause",
            "pause a schedule: nothing fires until it is resumed",
            lambda operator, id_: operator.pause(id_),
        ),
        (
            "resume",
            "resume a paused schedule at its next future tick",
            lambda operator, id_: operator.resume(id_),
        ),
        (
            "cancel",
            "cancel a schedule and its pending occurrences (terminal schedules stay as they are)",
            lambda operator, id_: operator.cancel(id_),
        ),
    ]
    for name, help_text, action in changes:
        parser = commands.add_parser(name, parents=[common], help=help_text)
        add_id(parser, "schedule id")
        parser.set_defaults(run=_change(action))

    # These build on this module.
    from app.cli.operator.activity import add_activity_command
    from app.cli.operator.changes import add_change_commands
    from app.cli.operator.dead_letters import add_dead_letter_commands
    from app.cli.operator.endpoints import add_endpoint_commands
    from app.cli.operator.flow_keys import add_flow_key_commands
    from app.cli.operator.subscriptions import add_subscription_commands
    from app.cli.operator.tenants import add_tenant_commands
    from app.cli.operator.topics import add_topic_commands

    add_change_commands(commands, common)
    add_dead_letter_commands(commands, common)
    add_flow_key_commands(commands, common)
    add_tenant_commands(commands, common)
    add_endpoint_commands(commands, common)
    add_topic_commands(commands, common)
    add_subscription_commands(commands, common)
    add_activity_command(commands, common)
