"""`chronoq dead-letter list|replay|discard`: dead letters from the operator CLI, as
/v1/dead-letters has them (same conventions as app/cli/operator/commands.py).

`replay ID` replays one and says what it was; `replay ID ID ...` and a replay by filters
(`--schedule-id`, `--event-type`, `--subscription`, `--endpoint`, `--dead-lettered-after`)
replay many in one request (the filters together: those matching all). A replay that names
nothing is refused, so that a slip cannot replay everything. `list` takes the same filters.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Callable

from app.api.occurrence_schemas import DeadLetterOut, ReplayAccepted
from app.cli.operator import text as render
from app.cli.operator.backends import Operator
from app.cli.operator.run import (
    Output,
    Parser,
    Work,
    add_id,
    add_limit,
    collect,
    execute,
    instant_arg,
    uuid_arg,
)
from app.domain.errors import ChronoqError, ConflictError
from app.domain.filters import DeadLetterFilter
from app.domain.occurrence import OccurrenceStatus

MAX_REPLAY_IDS = 1000  # the API's bound on the ids of one replay


def _filter(args: argparse.Namespace) -> DeadLetterFilter:
    """The filters the options name (the tenant is the command's)."""
    return DeadLetterFilter(
        schedule_id=args.schedule_id,
        event_type=args.event_type,
        subscription_id=args.subscription,
        endpoint_id=args.endpoint,
        dead_lettered_after=args.dead_lettered_after,
    )


def _list(args: argparse.Namespace) -> int:
    where = _filter(args)

    async def work(operator: Operator) -> Output:
        page, more = await collect(args, lambda n, c: operator.dead_letters(where, n, c))
        if not page:
            text = "no dead letters match"
        else:
            text = render.dead_letter_table(page)
            if more:
                text += render.more(len(page), "dead letters, most recent first")
        return Output([d.model_dump(mode="json") for d in page], text)

    return execute(args, work)


def _replay_one(occurrence_id: uuid.UUID) -> Work:
    async def work(operator: Operator) -> Output:
        before: DeadLetterOut | None
        try:
            before = await operator.dead_letter(occurrence_id)
        except ChronoqError:
            before = None  # the replay itself says precisely why it cannot be done
        try:
            await operator.replay(occurrence_id)
        except ConflictError as exc:
            raise ConflictError(f"not replayable: {exc.detail}") from None
        done = ReplayAccepted(occurrence_id=occurrence_id, status=OccurrenceStatus.PENDING)
        text = f"replayed occurrence {occurrence_id}: attempts reset to 0, due now (status pending)"
        if before is not None:
            text += (
                f"\nschedule {before.schedule_id} ({before.event_type}), fire at "
                f"{render.when(before.fire_at)}; it was dead-lettered at "
                f"{render.when(before.dead_lettered_at)} after {before.attempts} attempt(s): "
                f"{render.one_line(before.last_error, width=None)}"
            )
        return Output(done.model_dump(mode="json"), text)

    return work


def _replay_many(ids: list[uuid.UUID] | None, where: DeadLetterFilter) -> Work:
    async def work(operator: Operator) -> Output:
        done = await operator.replay_many(ids, where)
        if ids is not None:
            missed = len(ids) - done.replayed
            text = f"replayed {done.replayed} of the {len(ids)} dead letters named"
            if missed:
                text += f" ({missed} not dead-lettered, or unknown)"
        else:
            text = f"replayed {done.replayed} dead letter(s) matching the filters"
        text += ": attempts reset to 0, due now"
        return Output(done.model_dump(mode="json"), text)

    return work


def _replay(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        where = _filter(args)
        filtered = where.narrows
        if not args.ids and not filtered:
            parser.error(
                "name the dead letters to replay: IDs, or filters (--schedule-id, "
                "--event-type, --subscription, --endpoint, --dead-lettered-after)"
            )
        if args.ids and filtered:
            parser.error("give IDs or filters, not both")
        if len(args.ids) > MAX_REPLAY_IDS:
            parser.error(f"at most {MAX_REPLAY_IDS} IDs at once (a filter replays more)")
        if len(args.ids) == 1:
            return execute(args, _replay_one(args.ids[0]))
        return execute(args, _replay_many(args.ids or None, where), _REPLAY_OPTIONS)

    return run


def _discard(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        await operator.discard(args.id)
        return Output(
            {"occurrence_id": str(args.id), "discarded": True},
            f"discarded dead letter {args.id}: it is deleted and will not be delivered",
        )

    return execute(args, work)


# Where the service refuses a field of a replay's body, the option that gave it.
_REPLAY_OPTIONS = {
    "#/schedule_id": "--schedule-id",
    "#/event_type": "--event-type",
    "#/subscription_id": "--subscription",
    "#/endpoint_id": "--endpoint",
    "#/dead_lettered_after": "--dead-lettered-after",
}


def _add_fan_out_filters(parser: argparse.ArgumentParser, which: str) -> None:
    parser.add_argument(
        "--subscription",
        type=uuid_arg,
        metavar="ID",
        help=f"{which} the deliveries to this subscription (a topic's fan-out)",
    )
    parser.add_argument(
        "--endpoint",
        type=uuid_arg,
        metavar="ID",
        help=f"{which} what went to this endpoint: its deliveries, its schedules' occurrences",
    )
    parser.add_argument(
        "--dead-lettered-after",
        type=instant_arg,
        metavar="INSTANT",
        help=f"{which} those dead-lettered after this instant (RFC 3339 with an offset)",
    )


def add_dead_letter_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: Parser
) -> None:
    """Register dead-letter list|replay|discard."""
    group = commands.add_parser("dead-letter", help="list, replay and discard dead letters")
    sub = group.add_subparsers(
        dest="dead_letter_command",
        metavar="{list,replay,discard}",
        required=True,
        parser_class=Parser,
    )
    listed = sub.add_parser(
        "list", parents=[common], help="dead letters, most recently dead-lettered first"
    )
    listed.add_argument("--schedule-id", type=uuid_arg, metavar="ID")
    listed.add_argument("--event-type", metavar="TYPE")
    _add_fan_out_filters(listed, "only")
    add_limit(listed, 50, "dead letters")
    listed.set_defaults(run=_list)

    replay = sub.add_parser(
        "replay",
        parents=[common],
        help="deliver dead letters again: same occurrence ids, attempts reset, due now",
    )
    replay.add_argument(
        "ids", nargs="*", type=uuid_arg, metavar="ID", help="occurrence ids (or give filters)"
    )
    replay.add_argument(
        "--schedule-id", type=uuid_arg, metavar="ID", help="every one of a schedule"
    )
    replay.add_argument("--event-type", metavar="TYPE", help="every one of an event type")
    _add_fan_out_filters(replay, "every one of")
    replay.set_defaults(run=_replay(replay))

    discard = sub.add_parser(
        "discard", parents=[common], help="delete a dead letter for good (it is not delivered)"
    )
    add_id(discard, "occurrence id")
    discard.set_defaults(run=_discard)
