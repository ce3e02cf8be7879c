"""`chronoq topic put|list|show|delete`: a tenant's topics, from the operator CLI, through the
same service as /v1/topics (DESIGN.md section 15). A schedule that targets a topic (`{"type":
"topic", "topic": ...}`) fans each occurrence out to one delivery per subscription that matches
it as it fires; the subscriptions have commands of their own (`subscriptions`).

Same conventions as the other operator commands (app/cli/operator/commands.py); they act in
the tenant of `--tenant`. `topic put` replaces the topic whole, like the PUT: a description
left out is none. Its options are checked by the API's own model before anything is sent: a
refusal is a usage error (exit 2).

The subscription commands build on this module: a topic's name as an argument, a body checked
as the route checks it with each refusal naming its option (the options of both groups), and
--if-match.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from app.api.topic_schemas import SubscriptionPatch, TopicIn, TopicOut
from app.cli.operator import text as render
from app.cli.operator.backends import Operator, Versions
from app.cli.operator.bodies import checked_body, if_match_as_domain, version_arg
from app.cli.operator.run import Output, Parser, add_limit, collect, execute
from app.domain.errors import InvalidInputError, PreconditionFailedError
from app.domain.topics import TOPIC_NAME

TOPIC_ALPHABET = "1-128 of A-Z a-z 0-9 . _ : -"
# Where a refusal points at a field of the body, the option that gave it.
FIELD_OPTIONS = {
    "#/description": "--description",
    "#/topic": "--topic",
    "#/endpoint_id": "--endpoint",
    "#/event_types": "--event-type",
    "#/match": "--match",
}
M = TypeVar("M", bound=BaseModel)


# -- argument types -------------------------------------------------------------------


def topic_arg(text: str) -> str:
    """A topic's name as an argument (argparse `type`): refused unless it is one."""
    if not TOPIC_NAME.fullmatch(text):
        shown = f"a name of {len(text)} characters" if len(text) > 40 else repr(text)
        raise argparse.ArgumentTypeError(f"{shown} is not a topic name ({TOPIC_ALPHABET})")
    return text


# -- the bodies the options give ------------------------------------------------------


def checked_spec(model: type[M], body: dict[str, Any]) -> M:
    """`body` read by the API's own model, and checked as the route checks it
    (`checked_body`)."""
    return checked_body(model, body, FIELD_OPTIONS, _cross_checked)


def _cross_checked(found: BaseModel) -> None:
    if isinstance(found, SubscriptionPatch):
        found.changes()


def if_match_versions(args: argparse.Namespace) -> Versions:
    """The version `--if-match` names, if any."""
    return None if args.if_match is None else frozenset({args.if_match})


# -- text -------------------------------------------------------------------------------

TOPIC_COLUMNS = ("NAME", "SUBSCRIPTIONS", "VERSION", "UPDATED AT", "DESCRIPTION")


def describe_topic(found: TopicOut) -> str:
    return render.fields(
        [
            ("topic", found.name),
            ("description", render.one_line(found.description, width=None)),
            ("subscriptions", str(found.subscriptions)),
            ("version", str(found.version)),
            ("created at", render.when(found.created_at)),
            ("updated at", render.when(found.updated_at)),
        ]
    )


def _topic_row(found: TopicOut) -> list[str]:
    return [
        found.name,
        str(found.subscriptions),
        str(found.version),
        render.when(found.updated_at),
        render.one_line(found.description),
    ]


def _one_topic(found: TopicOut, headline: str | None = None) -> Output:
    text = describe_topic(found)
    return Output(
        found.model_dump(mode="json"), text if headline is None else f"{headline}\n\n{text}"
    )


# -- topic commands ---------------------------------------------------------------------


def _put(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        description = args.description or None  # "": none
        try:
            checked_spec(TopicIn, {"description": description})
        except InvalidInputError as exc:
            parser.error(f"argument --description: {exc.detail}")

        async def work(operator: Operator) -> Output:
            try:
                found, created = await if_match_as_domain(
                    operator.put_topic(args.name, description, if_match_versions(args))
                )
            except PreconditionFailedError as exc:
                raise PreconditionFailedError(
                    f"topic {args.name} was not replaced: {exc.detail}; read it again "
                    f"(`chronoq topic show {args.name}`) and run the command again"
                ) from None
            if created:
                return _one_topic(found, f"created topic {found.name} (version {found.version})")
            return _one_topic(found, f"replaced topic {found.name} (now version {found.version})")

        return execute(args, work, FIELD_OPTIONS)

    return run


def _topic_list(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        found, more = await collect(args, operator.topics)
        if not found:
            text = "no topics"
        else:
            text = render.table(TOPIC_COLUMNS, [_topic_row(t) for t in found])
            if more:
                text += (
                    f"\n\n(the first {len(found)} topics, in name order; more exist: raise "
                    "--limit or pass --all)"
                )
        return Output([t.model_dump(mode="json") for t in found], text)

    return execute(args, work)


def _topic_show(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        return _one_topic(await operator.topic(args.name))

    return execute(args, work)


def _topic_delete(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        await operator.delete_topic(args.name, if_match_versions(args))
        return Output({"deleted": args.name}, f"deleted topic {args.name} and its subscriptions")

    return execute(args, work)


# -- registration -----------------------------------------------------------------------


def _add_name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name", type=topic_arg, metavar="TOPIC", help=f"its name ({TOPIC_ALPHABET})"
    )


def add_if_match(parser: argparse.ArgumentParser, what: str, shown_by: str) -> None:
    """`--if-match`: change `what` only at the version `shown_by` showed."""
    parser.add_argument(
        "--if-match",
        type=version_arg,
        default=None,
        metavar="VERSION",
        help=f"only if the {what} is still at this version (`{shown_by}` gives it)",
    )


def add_topic_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: Parser
) -> None:
    """Register topic put|list|show|delete."""
    group = commands.add_parser("topic", help="topics: what a schedule fans out to subscribers")
    names = ["put", "list", "show", "delete"]
    sub = group.add_subparsers(
        dest="topic_command",
        metavar="{" + ",".join(names) + "}",
        required=True,
        parser_class=Parser,
    )
    put = sub.add_parser(
        "put", parents=[common], help="create or replace a topic, whole (like PUT)"
    )
    _add_name(put)
    put.add_argument(
        "--description",
        metavar="TEXT",
        help='free text about what it carries ("" or left out: none)',
    )
    add_if_match(put, "topic", "topic show")
    put.set_defaults(run=_put(put))

    listing = sub.add_parser(
        "list", parents=[common], help="topics in name order, with their subscriptions"
    )
    add_limit(listing, 50, "topics")
    listing.set_defaults(run=_topic_list)

    show = sub.add_parser("show", parents=[common], help="one topic")
    _add_name(show)
    show.set_defaults(run=_topic_show)

    delete = sub.add_parser(
        "delete",
        parents=[common],
        help="remove a topic and its subscriptions (refused while a pending or paused "
        "schedule targets it)",
    )
    _add_name(delete)
    add_if_match(delete, "topic", "topic show")
    delete.set_defaults(run=_topic_delete)
