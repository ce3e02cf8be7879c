"""`chronoq trigger|patch|backfill`: a schedule's on-demand firings and its changes from the
operator CLI (same conventions as app/cli/operator/commands.py).

`patch` reads the schedule, then sends only the fields its options name under If-Match of
the version read, so a change made in between is refused, never overwritten. Its options are
checked by the API's own model before anything is sent: a bad value is a usage error naming
the option, and nothing is stored.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from pydantic import ValidationError

from app.cli.operator import text as render
from app.cli.operator.backends import Operator
from app.cli.operator.run import Output, Parser, add_id, execute, instant_arg, label_arg
from app.domain.errors import InvalidInputError, PreconditionFailedError
from app.domain.schedule import SchedulePatch

# Where the API points at a field it refuses, the option that gave it.
_OPTIONS = {
    "#/target": "--target-url",
    "#/target/url": "--target-url",
    "#/max_attempts": "--max-attempts",
    "#/labels": "--label",
    "#/payload": "--payload",
    "#/flow_key": "--flow-key",
    "#/pause_after_failures": "--pause-after-failures",
}


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None


def _trigger(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        made = await operator.trigger(args.id)
        text = (
            f"triggered schedule {args.id}: occurrence {made.occurrence_id} is due now "
            f"(fire at {render.when(made.fire_at)}, origin {made.origin})"
        )
        return Output(made.model_dump(mode="json"), text)

    return execute(args, work)


def _changes(args: argparse.Namespace) -> dict[str, Any]:
    """The fields the options name, as the PATCH body has them (the target comes later: it
    needs the schedule's own)."""
    changes: dict[str, Any] = {}
    if args.max_attempts is not None:
        changes["max_attempts"] = args.max_attempts
    if args.label or args.clear_labels:
        changes["labels"] = dict(args.label)
    if args.payload is not None:
        changes["payload"] = args.payload
    if args.flow_key is not None:
        changes["flow_key"] = args.flow_key or None
    if args.pause_after_failures is not None:
        changes["pause_after_failures"] = args.pause_after_failures or None
    return changes


def _checked(parser: argparse.ArgumentParser, changes: dict[str, Any]) -> None:
    """The API's model over the changes: a refusal names the option."""
    try:
        SchedulePatch.model_validate(changes)
    except ValidationError as exc:
        first = exc.errors()[0]
        pointer = "#" + "".join(f"/{part}" for part in first["loc"][:1])
        option = _OPTIONS.get(pointer, "the changes")
        parser.error(f"argument {option}: {first['msg']}")
    except InvalidInputError as exc:
        option = _OPTIONS.get(exc.pointer or "", "the changes")
        parser.error(f"argument {option}: {exc.detail}")


def _patch(parser: argparse.ArgumentParser) -> Any:
    def run(args: argparse.Namespace) -> int:
        changes = _changes(args)
        if not changes and args.target_url is None:
            parser.error("nothing to change: give at least one option (see --help)")
        _checked(parser, changes)

        async def work(operator: Operator) -> Output:
            before = await operator.get_schedule(args.id)
            if args.target_url is not None:
                if before.target.type != "webhook":
                    raise InvalidInputError(
                        "the schedule's target is not a webhook", pointer="#/target"
                    )
                # The target as read, its secrets redacted: the API keeps them as they are.
                target = before.target.model_dump(mode="json")
                changes["target"] = {**target, "url": args.target_url}
            try:
                after = await operator.patch(args.id, changes, frozenset({before.version}))
            except PreconditionFailedError:
                raise PreconditionFailedError(
                    f"schedule {args.id} changed after it was read: nothing was changed; "
                    "run the command again"
                ) from None
            headline = (
                f"patched schedule {args.id} (now version {after.version}): "
                f"{', '.join(sorted(changes))}"
            )
            return Output(after.model_dump(mode="json"), f"{headline}\n\n{render.snapshot(after)}")

        return execute(args, work, _OPTIONS)

    return run


def _backfill(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        done = await operator.backfill(args.id, args.start, args.end)
        text = (
            f"backfilled schedule {args.id}: {done.created} of {len(done.ticks)} tick(s) "
            f"in [{render.when(args.start)}, {render.when(args.end)}] made due"
        )
        if done.ticks:
            rows = [
                [render.when(t.fire_at), str(t.occurrence_id), "new" if t.created else "had one"]
                for t in done.ticks
            ]
            text += "\n\n" + render.table(("FIRE AT", "OCCURRENCE ID", "TICK"), rows)
        return Output(done.model_dump(mode="json"), text)

    return execute(args, work, {"#/from": "--from", "#/to": "--to"})


def add_change_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: Parser
) -> None:
    """Register trigger, patch and backfill."""
    trigger = commands.add_parser(
        "trigger", parents=[common], help="fire a schedule now, beside its ticks"
    )
    add_id(trigger, "schedule id")
    trigger.set_defaults(run=_trigger)

    patch = commands.add_parser(
        "patch",
        parents=[common],
        help="change some of a schedule's fields (the others stay as they are)",
    )
    add_id(patch, "schedule id")
    patch.add_argument("--target-url", metavar="URL", help="the webhook's new URL")
    patch.add_argument("--max-attempts", type=int, metavar="N")
    patch.add_argument(
        "--label",
        type=label_arg,
        action="append",
        default=[],
        metavar="KEY:VALUE",
        help="the schedule's labels become these (repeatable)",
    )
    patch.add_argument("--clear-labels", action="store_true", help="remove every label")
    patch.add_argument("--payload", type=_json, metavar="JSON", help="the new payload")
    patch.add_argument("--flow-key", metavar="KEY", help='the flow key to run under ("" for none)')
    patch.add_argument(
        "--pause-after-failures",
        type=int,
        metavar="N",
        help="pause by itself after N dead letters in a row (0: never)",
    )
    patch.set_defaults(run=_patch(patch))

    backfill = commands.add_parser(
        "backfill",
        parents=[common],
        help="fire the ticks of [--from, --to] the schedule has not fired",
    )
    add_id(backfill, "schedule id")
    backfill.add_argument(
        "--from", dest="start", type=instant_arg, required=True, metavar="INSTANT"
    )
    backfill.add_argument("--to", dest="end", type=instant_arg, required=True, metavar="INSTANT")
    backfill.set_defaults(run=_backfill)
