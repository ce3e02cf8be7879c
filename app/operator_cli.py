"""Operator commands of `chronoq`: list, inspect, events, attempts, pause, resume, cancel,
dead-letter list|replay and flow-key list|show|set|pause|resume (app/operator_flow_keys.py),
run against the database through the same services as the HTTP API.

Exit codes: 0 done, 1 the database or the service refused (unreachable, unknown id, a
conflict), 2 the command line is wrong. Every error is one line on stderr; a database URL
is only ever shown with its password hidden. Changes are made, and recorded in the
schedules' audit events, by the actor "cli".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

from app import operator_text as render
from app.api.schemas import (
    AttemptOut,
    DeadLetterOut,
    OccurrenceOut,
    ReplayAccepted,
    ScheduleEventOut,
    ScheduleOut,
)
from app.databases import open_database
from app.domain.errors import ChronoqError, ConflictError, InvalidInputError, NotFoundError
from app.domain.filters import DeadLetterFilter, ScheduleFilter
from app.domain.occurrence import OccurrenceStatus
from app.domain.schedule import CLI_ACTOR, Schedule, ScheduleStatus
from app.service.dead_letters import DeadLetterService
from app.service.flow_keys import FlowKeyService
from app.service.occurrences import OccurrenceService
from app.service.schedules import ScheduleService
from app.settings import Settings, load_settings
from app.store.database import describe_failure, missing_database, redact_url

MAX_LIMIT = 500  # the HTTP API's largest page


class _Parser(argparse.ArgumentParser):
    """A subcommand's parser: a usage error is one line, like every other error of these
    commands, and arguments it does not know are refused here rather than by the top
    parser (which would print its whole usage first)."""

    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"chronoq: {message} (see: {self.prog} --help)\n")


# -- argument types -------------------------------------------------------------------


def _id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a UUID") from None


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition(":")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not key:value")
    return key, value


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_LIMIT}")
    return value


# -- running against the database -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Services:
    schedules: ScheduleService
    dead_letters: DeadLetterService
    occurrences: OccurrenceService
    flow_keys: FlowKeyService


@dataclass(frozen=True, slots=True)
class _Output:
    document: Any  # what --format json prints
    text: str  # what --format text prints


def _settings(args: argparse.Namespace) -> Settings:
    # A SettingsError reaches `chronoq`'s main, which makes it a usage error (exit 2).
    if args.conn is not None:
        return load_settings(database_url=args.conn)
    return load_settings()


async def _against(settings: Settings, work: Callable[[_Services], Awaitable[_Output]]) -> _Output:
    # Only a Database and the services: no migration, no delivery loop.
    database = open_database(settings, "command")
    try:
        return await work(
            _Services(
                ScheduleService(database, settings),
                DeadLetterService(database),
                OccurrenceService(database),
                FlowKeyService(database),
            )
        )
    finally:
        await database.close()


def _execute(args: argparse.Namespace, work: Callable[[_Services], Awaitable[_Output]]) -> int:
    settings = _settings(args)
    url = settings.database_url
    where = redact_url(url)
    if settings.db_schema is not None:
        where += f" (schema {settings.db_schema})"
    # A file that does not exist: opening it would create an empty database, and the
    # command would then fail with a puzzling "no such table".
    missing = missing_database(url)
    if missing is not None:
        return _fail(f"cannot reach {where}: {missing}")
    try:
        output = asyncio.run(_against(settings, work))
    except InvalidInputError as exc:
        print(f"chronoq: {exc.detail}", file=sys.stderr)
        return 2
    except NotFoundError as exc:
        return _fail(f"{exc.detail} in {where}")
    except ChronoqError as exc:
        return _fail(exc.detail)
    except OSError as exc:  # refused, unknown host, timed out: raised by the driver as is
        return _fail(f"cannot reach {where}: {describe_failure(exc, url)}")
    except Exception as exc:
        return _fail(f"{where}: {describe_failure(exc, url)}")
    if args.format == "json":
        print(json.dumps(output.document, indent=2))
    else:
        print(output.text)
    return 0


def _fail(message: str) -> int:
    print(f"chronoq: {message}", file=sys.stderr)
    return 1


# -- the commands -----------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    where = ScheduleFilter(
        status=None if args.status is None else ScheduleStatus(args.status),
        event_type=args.event_type,
        target_type=args.target_type,
        name=args.name,
        labels=dict(args.label),
    )

    async def work(services: _Services) -> _Output:
        found = await services.schedules.list_schedules(where, limit=args.limit + 1, after=None)
        page = [ScheduleOut.of(s) for s in found[: args.limit]]
        if not page:
            text = "no schedules match"
        else:
            text = render.table(render.SCHEDULE_COLUMNS, [render.schedule_row(s) for s in page])
            if len(found) > args.limit:
                text += render.more(len(page), "schedules")
        return _Output([s.model_dump(mode="json") for s in page], text)

    return _execute(args, work)


def _inspect(args: argparse.Namespace) -> int:
    async def work(services: _Services) -> _Output:
        schedule = ScheduleOut.of(await services.schedules.get(args.id))
        history = await services.schedules.history(args.id, limit=args.limit, after=None)
        occurrences = [OccurrenceOut.of(o) for o in history]
        if occurrences:
            shown = f"occurrences, latest first:\n{render.occurrence_table(occurrences)}"
        else:
            shown = "no occurrences"
        return _Output(
            {
                "schedule": schedule.model_dump(mode="json"),
                "occurrences": [o.model_dump(mode="json") for o in occurrences],
            },
            f"{render.snapshot(schedule)}\n\n{shown}",
        )

    return _execute(args, work)


def _events(args: argparse.Namespace) -> int:
    async def work(services: _Services) -> _Output:
        found = await services.schedules.events(args.id, limit=args.limit + 1, after=None)
        page = [ScheduleEventOut.of(e) for e in found[: args.limit]]
        text = render.event_table(page)
        if len(found) > args.limit:
            text += f"\n\n(the first {len(page)} events, oldest first; raise --limit for more)"
        return _Output([e.model_dump(mode="json") for e in page], text)

    return _execute(args, work)


def _attempts(args: argparse.Namespace) -> int:
    async def work(services: _Services) -> _Output:
        found = await services.occurrences.attempts(args.id, limit=args.limit + 1)
        page = [AttemptOut.of(a) for a in found[: args.limit]]
        if not page:
            text = f"no attempts of occurrence {args.id} yet"
        else:
            text = render.attempt_table(page)
            if len(found) > args.limit:
                text += (
                    f"\n\n(the first {len(page)} attempts, oldest first; raise --limit for more)"
                )
        return _Output([a.model_dump(mode="json") for a in page], text)

    return _execute(args, work)


def _change(
    action: Callable[[ScheduleService, uuid.UUID], Awaitable[Schedule]],
) -> Callable[[argparse.Namespace], int]:
    """pause, resume, cancel: the service's rule, then the schedule as it now is."""

    def run(args: argparse.Namespace) -> int:
        async def work(services: _Services) -> _Output:
            schedule = ScheduleOut.of(await action(services.schedules, args.id))
            return _Output(schedule.model_dump(mode="json"), render.snapshot(schedule))

        return _execute(args, work)

    return run


def _dead_letter_list(args: argparse.Namespace) -> int:
    where = DeadLetterFilter(schedule_id=args.schedule_id, event_type=args.event_type)

    async def work(services: _Services) -> _Output:
        found = await services.dead_letters.list_dead_letters(
            where, limit=args.limit + 1, after=None
        )
        page = [DeadLetterOut.of_dead_letter(d) for d in found[: args.limit]]
        if not page:
            text = "no dead letters match"
        else:
            text = render.dead_letter_table(page)
            if len(found) > args.limit:
                text += render.more(len(page), "dead letters, most recent first")
        return _Output([d.model_dump(mode="json") for d in page], text)

    return _execute(args, work)


def _dead_letter_replay(args: argparse.Namespace) -> int:
    async def work(services: _Services) -> _Output:
        try:
            before = DeadLetterOut.of_dead_letter(await services.dead_letters.get(args.id))
        except ChronoqError:
            before = None  # the replay itself says precisely why it cannot be done
        try:
            await services.dead_letters.replay(args.id, actor=CLI_ACTOR)
        except ConflictError as exc:
            raise ConflictError(f"not replayable: {exc.detail}") from None
        done = ReplayAccepted(occurrence_id=args.id, status=OccurrenceStatus.PENDING)
        text = f"replayed occurrence {args.id}: attempts reset to 0, due now (status pending)"
        if before is not None:
            text += (
                f"\nschedule {before.schedule_id} ({before.event_type}), fire at "
                f"{render.when(before.fire_at)}; it was dead-lettered at "
                f"{render.when(before.dead_lettered_at)} after {before.attempts} attempt(s): "
                f"{render.one_line(before.last_error, width=None)}"
            )
        return _Output(done.model_dump(mode="json"), text)

    return _execute(args, work)


# -- registration -----------------------------------------------------------------------


def _common() -> _Parser:
    common = _Parser(add_help=False)
    common.add_argument(
        "--conn",
        metavar="URL",
        help="database URL (default: DATABASE_URL); the schema is not migrated",
    )
    common.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="text: aligned columns; json: one document, as the HTTP API returns it",
    )
    return common


def _add_limit(parser: argparse.ArgumentParser, default: int, what: str) -> None:
    parser.add_argument(
        "--limit",
        type=_limit,
        default=default,
        metavar="N",
        help=f"at most N {what} (1 to {MAX_LIMIT}; default {default})",
    )


def _add_id(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("id", type=_id, metavar="ID", help=what)


def add_operator_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register list, inspect, events, pause, resume, cancel and dead-letter list|replay."""
    common = _common()
    # argparse has no public way to choose the parser class of one subcommand.
    default_class = commands._parser_class
    commands._parser_class = _Parser
    try:
        _register(commands, common)
    finally:
        commands._parser_class = default_class


def _register(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: _Parser
) -> None:
    listing = commands.add_parser(
        "list", parents=[common], help="list schedules, newest first, with the API's filters"
    )
    listing.add_argument("--status", choices=[s.value for s in ScheduleStatus])
    listing.add_argument("--event-type", metavar="TYPE")
    listing.add_argument("--target-type", choices=["webhook", "rabbitmq"])
    listing.add_argument(
        "--label",
        type=_label,
        action="append",
        default=[],
        metavar="KEY:VALUE",
        help="only schedules with this label (repeatable: all must match)",
    )
    listing.add_argument("--name", help="the schedule with this name")
    _add_limit(listing, 50, "schedules")
    listing.set_defaults(run=_list)

    inspect = commands.add_parser(
        "inspect", parents=[common], help="show a schedule and its latest occurrences"
    )
    _add_id(inspect, "schedule id")
    _add_limit(inspect, 10, "occurrences, latest first")
    inspect.set_defaults(run=_inspect)

    events = commands.add_parser(
        "events", parents=[common], help="a schedule's audit events, oldest first"
    )
    _add_id(events, "schedule id")
    _add_limit(events, 50, "events, oldest first")
    events.set_defaults(run=_events)

    attempts = commands.add_parser(
        "attempts",
        parents=[common],
        help="an occurrence's delivery attempts, oldest first (a replay's after the earlier)",
    )
    _add_id(attempts, "occurrence id")
    _add_limit(attempts, 50, "attempts, oldest first")
    attempts.set_defaults(run=_attempts)

    changes: list[tuple[str, str, Callable[[ScheduleService, uuid.UUID], Awaitable[Schedule]]]] = [
        (
            "pause",
            "pause a schedule: nothing fires until it is resumed",
            lambda service, id_: service.pause(id_, actor=CLI_ACTOR),
        ),
        (
            "resume",
            "resume a paused schedule at its next future tick",
            lambda service, id_: service.resume(id_, actor=CLI_ACTOR),
        ),
        (
            "cancel",
            "cancel a schedule and its pending occurrences (terminal schedules stay as they are)",
            lambda service, id_: service.cancel(id_, actor=CLI_ACTOR),
        ),
    ]
    for name, help_text, action in changes:
        parser = commands.add_parser(name, parents=[common], help=help_text)
        _add_id(parser, "schedule id")
        parser.set_defaults(run=_change(action))

    dead_letter = commands.add_parser("dead-letter", help="list and replay dead letters")
    dead_letter_commands = dead_letter.add_subparsers(
        dest="dead_letter_command", metavar="{list,replay}", required=True, parser_class=_Parser
    )
    listed = dead_letter_commands.add_parser(
        "list", parents=[common], help="dead letters, most recently dead-lettered first"
    )
    listed.add_argument("--schedule-id", type=_id, metavar="ID")
    listed.add_argument("--event-type", metavar="TYPE")
    _add_limit(listed, 50, "dead letters")
    listed.set_defaults(run=_dead_letter_list)
    replay = dead_letter_commands.add_parser(
        "replay",
        parents=[common],
        help="deliver a dead letter again: same occurrence id, attempts reset, due now",
    )
    _add_id(replay, "occurrence id")
    replay.set_defaults(run=_dead_letter_replay)

    from app.operator_flow_keys import add_flow_key_commands  # it builds on this module

    add_flow_key_commands(commands, common)
