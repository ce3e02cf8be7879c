"""`chronoq subscription create|list|show|update|delete`: the endpoints subscribed to a
tenant's topics, from the operator CLI, through the same service as /v1/subscriptions
(DESIGN.md section 15). A schedule that targets a topic fans each occurrence out to one
delivery per subscription that matches it as it fires, each to its subscription's endpoint.

Same conventions as the other operator commands (app/cli/operator/commands.py) and the topic
commands (`topics`); they act in the tenant of `--tenant`. A subscription takes `--event-type
GLOB` (repeatable; none: every event type) and `--match FIELD=VALUE` (repeatable; a field
named again means one of its values; a value is read as JSON when it is a JSON number, true,
false or null, else as the text given, so `--match 'count="5"'` is the string). `subscription
update` sends only the fields its options name, each replaced whole. Options are checked by
the API's own models before anything is sent, and a topic or an endpoint the tenant does not
have is refused naming its option: both are usage errors (exit 2).
"""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from app.api.schemas import Page
from app.api.topic_schemas import SubscriptionIn, SubscriptionOut, SubscriptionPatch
from app.cli.operator import text as render
from app.cli.operator.backends import Operator
from app.cli.operator.bodies import if_match_as_domain
from app.cli.operator.run import Output, Parser, add_id, add_limit, collect, execute, uuid_arg
from app.cli.operator.topics import (
    FIELD_OPTIONS,
    add_if_match,
    checked_spec,
    if_match_versions,
    topic_arg,
)
from app.domain.errors import InvalidInputError, PreconditionFailedError

M = TypeVar("M", bound=BaseModel)
Scalar = str | int | float | bool | None


# -- argument types -------------------------------------------------------------------


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _scalar(text: str) -> Scalar:
    """A JSON number, true, false, null or string when `text` is one; else `text` itself."""
    try:
        value = json.loads(text, parse_constant=_not_json)
    except ValueError:
        return text
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return text  # an object or a list: the text as given


def _match_pair(text: str) -> tuple[str, Scalar]:
    field, sep, value = text.partition("=")
    if not sep or not field:
        raise argparse.ArgumentTypeError(f"{text!r} is not FIELD=VALUE")
    return field, _scalar(value)


def _match(pairs: list[tuple[str, Scalar]]) -> dict[str, Scalar | list[Scalar]]:
    """--match pairs as the API's `match`: a field given once, its value; given again, the
    list of its values (one of them)."""
    values: dict[str, list[Scalar]] = {}
    for field, value in pairs:
        values.setdefault(field, []).append(value)
    return {field: found[0] if len(found) == 1 else found for field, found in values.items()}


# -- the bodies the options give ------------------------------------------------------


def _usage(parser: argparse.ArgumentParser, model: type[M], body: dict[str, Any]) -> M:
    """`checked_spec`, a refusal being a usage error naming its option."""
    try:
        return checked_spec(model, body)
    except InvalidInputError as exc:
        option = FIELD_OPTIONS.get(exc.pointer or "", "the subscription")
        parser.error(f"argument {option}: {exc.detail}")


def _subscription_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The fields of a subscription its options name."""
    body: dict[str, Any] = {}
    if args.topic is not None:
        body["topic"] = args.topic
    if args.endpoint is not None:
        body["endpoint_id"] = str(args.endpoint)
    if args.event_type:
        body["event_types"] = list(args.event_type)
    if args.match:
        body["match"] = _match(args.match)
    return body


# -- text -------------------------------------------------------------------------------

SUBSCRIPTION_COLUMNS = ("ID", "TOPIC", "ENDPOINT", "EVENT TYPES", "MATCH", "VERSION")


def _event_types(found: SubscriptionOut) -> str:
    if found.event_types is None:
        return "every event type"
    return ", ".join(found.event_types)


def _match_text(found: SubscriptionOut) -> str:
    """`field: value` for each field, `field: one | other` for a list; JSON values, so that
    "5" and 5 differ."""
    if not found.match:
        return "any payload"
    shown = []
    for field, wanted in sorted(found.match.items()):
        options = wanted if isinstance(wanted, list) else [wanted]
        shown.append(f"{field}: {' | '.join(json.dumps(option) for option in options)}")
    return "; ".join(shown)


def describe_subscription(found: SubscriptionOut) -> str:
    return render.fields(
        [
            ("subscription", str(found.id)),
            ("topic", found.topic),
            ("endpoint", str(found.endpoint_id)),
            ("event types", _event_types(found)),
            ("match", _match_text(found)),
            ("version", str(found.version)),
            ("created at", render.when(found.created_at)),
            ("updated at", render.when(found.updated_at)),
        ]
    )


def _subscription_row(found: SubscriptionOut) -> list[str]:
    return [
        str(found.id),
        found.topic,
        str(found.endpoint_id),
        render.one_line(_event_types(found)),
        render.one_line(_match_text(found)),
        str(found.version),
    ]


def _one_subscription(found: SubscriptionOut, headline: str | None = None) -> Output:
    text = describe_subscription(found)
    return Output(
        found.model_dump(mode="json"), text if headline is None else f"{headline}\n\n{text}"
    )


# -- subscription commands --------------------------------------------------------------


def _create(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        wanted = _usage(parser, SubscriptionIn, _subscription_fields(args))

        async def work(operator: Operator) -> Output:
            found = await operator.subscribe(wanted)
            headline = (
                f"created subscription {found.id} (version {found.version}): endpoint "
                f"{found.endpoint_id} takes what topic {found.topic} fans out and it matches"
            )
            return _one_subscription(found, headline)

        return execute(args, work, FIELD_OPTIONS)

    return run


def _subscription_list(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        async def page(limit: int, cursor: str | None) -> Page[SubscriptionOut]:
            return await operator.subscriptions(args.topic, limit, cursor)

        found, more = await collect(args, page)
        if not found:
            text = "no subscriptions" if args.topic is None else f"no subscriptions of {args.topic}"
        else:
            text = render.table(SUBSCRIPTION_COLUMNS, [_subscription_row(s) for s in found])
            if more:
                text += (
                    f"\n\n(the first {len(found)} subscriptions, oldest first; more exist: "
                    "raise --limit or pass --all)"
                )
        return Output([s.model_dump(mode="json") for s in found], text)

    return execute(args, work)


def _subscription_show(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        return _one_subscription(await operator.subscription(args.id))

    return execute(args, work)


def _update(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        body = _subscription_fields(args)
        if args.clear_event_types:
            if args.event_type:
                parser.error("argument --clear-event-types: not with --event-type")
            body["event_types"] = None
        if args.clear_match:
            if args.match:
                parser.error("argument --clear-match: not with --match")
            body["match"] = None
        if not body:
            parser.error("nothing to change: give at least one option")
        changes = _usage(parser, SubscriptionPatch, body)

        async def work(operator: Operator) -> Output:
            subscription_id: uuid.UUID = args.id
            try:
                found = await if_match_as_domain(
                    operator.update_subscription(subscription_id, changes, if_match_versions(args))
                )
            except PreconditionFailedError as exc:
                raise PreconditionFailedError(
                    f"subscription {subscription_id} was not updated: {exc.detail}; read it "
                    f"again (`chronoq subscription show {subscription_id}`) and run the "
                    "command again"
                ) from None
            headline = (
                f"updated subscription {found.id} (now version {found.version}): "
                f"{', '.join(sorted(body))}"
            )
            return _one_subscription(found, headline)

        return execute(args, work, FIELD_OPTIONS)

    return run


def _subscription_delete(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        await operator.unsubscribe(args.id, if_match_versions(args))
        return Output(
            {"deleted": str(args.id)},
            f"deleted subscription {args.id}: what fans out from now on makes no delivery to "
            "it (the deliveries made already go on)",
        )

    return execute(args, work)


# -- registration -----------------------------------------------------------------------


def add_subscription_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: Parser
) -> None:
    """Register subscription create|list|show|update|delete."""
    group = commands.add_parser(
        "subscription", help="subscriptions: endpoints that take what a topic fans out"
    )
    names = ["create", "list", "show", "update", "delete"]
    sub = group.add_subparsers(
        dest="subscription_command",
        metavar="{" + ",".join(names) + "}",
        required=True,
        parser_class=Parser,
    )
    create = sub.add_parser(
        "create", parents=[common], help="subscribe an endpoint to a topic, with what it takes"
    )
    _add_spec_options(create, required=True)
    create.set_defaults(run=_create(create))

    listing = sub.add_parser("list", parents=[common], help="subscriptions, oldest first")
    listing.add_argument("--topic", type=topic_arg, metavar="TOPIC", help="only this topic's")
    add_limit(listing, 50, "subscriptions")
    listing.set_defaults(run=_subscription_list)

    show = sub.add_parser("show", parents=[common], help="one subscription")
    add_id(show, "subscription id")
    show.set_defaults(run=_subscription_show)

    update = sub.add_parser(
        "update",
        parents=[common],
        help="change the fields the options name (each replaced whole)",
    )
    add_id(update, "subscription id")
    _add_spec_options(update, required=False)
    update.add_argument(
        "--clear-event-types", action="store_true", help="take every event type again"
    )
    update.add_argument("--clear-match", action="store_true", help="take any payload again")
    add_if_match(update, "subscription", "subscription show")
    update.set_defaults(run=_update(update))

    delete = sub.add_parser(
        "delete",
        parents=[common],
        help="unsubscribe: what fans out from now on makes no delivery to it",
    )
    add_id(delete, "subscription id")
    add_if_match(delete, "subscription", "subscription show")
    delete.set_defaults(run=_subscription_delete)


def _add_spec_options(parser: argparse.ArgumentParser, required: bool) -> None:
    """The fields of a subscription; `update` sends only those given."""
    parser.add_argument(
        "--topic", type=topic_arg, required=required, metavar="TOPIC", help="the topic it takes"
    )
    parser.add_argument(
        "--endpoint",
        type=uuid_arg,
        required=required,
        metavar="ID",
        help="the endpoint its deliveries go to",
    )
    parser.add_argument(
        "--event-type",
        action="append",
        default=[],
        metavar="GLOB",
        help="an event type it takes, as a glob: invoice.* (repeatable; none: every event type)",
    )
    parser.add_argument(
        "--match",
        type=_match_pair,
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a top-level payload field it takes (repeatable: every field must match; a "
        "field given again: one of its values). VALUE is JSON when it is a number, true, "
        "false or null, else text",
    )
