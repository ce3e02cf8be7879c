"""`chronoq endpoint create|list|show|update|delete|rotate|enable|events|attempts`: a
tenant's endpoints (reusable webhook destinations) from the operator CLI, through the same
services as /v1/endpoints (DESIGN.md section 15).

Same conventions as the other operator commands (app/cli/operator/commands.py); they act in
the tenant of `--tenant`. The endpoint's own URL is `--target-url`, as for `chronoq patch`:
`--url` is the running service's. A signing secret's value is printed by the command that
made it (`create`, `rotate`) and by no other: `show`, `list` and `events` give the secrets'
hints (`whsec_…` and the last 4 characters), never a value.

`update` sends only the fields its options name. The API replaces an endpoint's flow limits
and its circuit whole, so an option of either group is merged into the group as read, and
the change is then sent under If-Match of the version read (or of `--if-match`): a change
made in between is refused, never overwritten. Options are checked by the API's own models
before anything is changed: a bad value is a usage error naming the option.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from app.api.endpoint_schemas import (
    EndpointAttemptOut,
    EndpointEventOut,
    EndpointIn,
    EndpointOut,
    EndpointPatch,
)
from app.api.schemas import Page
from app.cli.operator import text as render
from app.cli.operator.backends import Operator, Versions
from app.cli.operator.bodies import checked_body, if_match_as_domain, version_arg
from app.cli.operator.run import Output, Parser, add_id, add_limit, collect, execute
from app.domain.endpoints import MAX_OVERLAP_SECONDS
from app.domain.errors import InvalidInputError, PreconditionFailedError

# Where a refusal points at a field of the body, the option that gave it.
_OPTIONS = {
    "#/url": "--target-url",
    "#/name": "--name",
    "#/method": "--method",
    "#/headers": "--header",
    "#/timeout_seconds": "--timeout",
    "#/description": "--description",
    "#/flow": "the flow options",
    "#/flow/rate": "--rate",
    "#/flow/period_seconds": "--period",
    "#/flow/burst": "--burst",
    "#/flow/parallelism": "--parallelism",
    "#/flow/ordering": "--ordering",
    "#/circuit": "the circuit options",
    "#/circuit/failure_threshold": "--failure-threshold",
    "#/circuit/cooldown_seconds": "--cooldown",
    "#/circuit/max_cooldown_seconds": "--max-cooldown",
    "#/circuit/disable_after_seconds": "--disable-after",
    "#/overlap_seconds": "--overlap",
}
_FLOW_OPTIONS = {
    "rate": "rate",
    "period_seconds": "period",
    "burst": "burst",
    "parallelism": "parallelism",
    "ordering": "ordering",
}
_CIRCUIT_OPTIONS = {
    "failure_threshold": "failure_threshold",
    "cooldown_seconds": "cooldown",
    "max_cooldown_seconds": "max_cooldown",
    "disable_after_seconds": "disable_after",
}
M = TypeVar("M", bound=BaseModel)
NEVER = "never"  # --disable-after never: the circuit never disables the endpoint
SHOWN_ONCE = "signing secret (shown once)"


# -- argument types -------------------------------------------------------------------


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name, value


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None


def _seconds_or_never(text: str) -> float | str:
    return NEVER if text == NEVER else _seconds(text)


def _overlap(text: str) -> int:
    value = _whole(text)
    if not 0 <= value <= MAX_OVERLAP_SECONDS:
        raise argparse.ArgumentTypeError(
            f"an overlap is 0 to {MAX_OVERLAP_SECONDS:,} seconds, not {value}"
        )
    return value


# -- the body the options give ----------------------------------------------------------


def _given(args: argparse.Namespace, options: dict[str, str]) -> dict[str, Any]:
    """The fields of a group (flow, circuit) whose options were given."""
    found = {field: getattr(args, option) for field, option in options.items()}
    given = {field: value for field, value in found.items() if value is not None}
    if given.get("disable_after_seconds") == NEVER:
        given["disable_after_seconds"] = None
    return given


def _fields(args: argparse.Namespace) -> dict[str, Any]:
    """The body's fields the options name, but the flow limits and the circuit."""
    body: dict[str, Any] = {}
    if args.target_url is not None:
        body["url"] = args.target_url
    if args.name is not None:
        body["name"] = args.name or None  # "": none
    if args.method is not None:
        body["method"] = args.method
    if args.header or getattr(args, "clear_headers", False):
        body["headers"] = dict(args.header)
    if args.timeout is not None:
        body["timeout_seconds"] = args.timeout
    if args.description is not None:
        body["description"] = args.description or None
    return body


def _checked(model: type[M], body: dict[str, Any]) -> M:
    """`body` read by the API's own model, and its fields checked against each other as
    the service checks them (`checked_body`)."""
    return checked_body(model, body, _OPTIONS, _cross_checked)


def _cross_checked(found: BaseModel) -> None:
    if isinstance(found, EndpointIn):
        found.spec()
    elif isinstance(found, EndpointPatch):
        found.changes()


def _options(args: argparse.Namespace) -> dict[str, str]:
    """The options of the refusals, a given header's own pointer included."""
    return {**_OPTIONS, **{f"#/headers/{name}": "--header" for name, _ in args.header}}


# -- text -------------------------------------------------------------------------------

COLUMNS = (
    "ID",
    "NAME",
    "STATE",
    "FAILURES",
    "IN FLIGHT",
    "WAITING",
    "URL",
    "SECRETS",
    "VERSION",
)


def _hints(found: EndpointOut) -> str:
    return ", ".join(s.hint for s in found.signing_secrets) or "-"


def _row(found: EndpointOut) -> list[str]:
    return [
        str(found.id),
        render.one_line(found.name),
        found.state,
        str(found.consecutive_failures),
        str(found.in_flight),
        str(found.waiting),
        render.one_line(found.url),
        _hints(found),
        str(found.version),
    ]


def _state(found: EndpointOut) -> str:
    if found.state == "disabled":
        return f"disabled: no delivery starts until `chronoq endpoint enable {found.id}`"
    if found.state == "open":
        return f"open: no delivery starts before the probe at {render.when(found.next_probe_at)}"
    if found.state == "half_open":
        return "half_open: the next attempt probes the endpoint"
    return found.state


def _flow(found: EndpointOut) -> str:
    flow = found.flow
    if flow is None:
        return "no limits of its own"
    rate = "no rate limit" if flow.rate is None else f"{flow.rate} per {flow.period_seconds:g}s"
    parts = [rate]
    if flow.burst is not None:
        parts.append(f"burst {flow.burst}")
    parallelism = "no limit" if flow.parallelism is None else str(flow.parallelism)
    parts += [f"parallelism {parallelism}", f"ordering {flow.ordering}"]
    return ", ".join(parts)


def _secrets(found: EndpointOut) -> str:
    """Each live secret by its hint, never its value."""
    shown = []
    for secret in found.signing_secrets:
        until = (
            "newest"
            if secret.expires_at is None
            else f"signs until {render.when(secret.expires_at)}"
        )
        shown.append(f"{secret.hint} ({until}, made {render.when(secret.created_at)})")
    return "; ".join(shown) or "-"


def describe(found: EndpointOut) -> str:
    """An endpoint as a field list: what it calls, its circuit's state and its live
    figures, its limits and its secrets' hints."""
    circuit = found.circuit
    disable = (
        "never"
        if circuit.disable_after_seconds is None
        else f"{circuit.disable_after_seconds:g}s of outage"
    )
    headers = ", ".join(f"{name}: {value}" for name, value in sorted(found.headers.items()))
    return render.fields(
        [
            ("endpoint", str(found.id)),
            ("name", found.name or "-"),
            ("url", found.url),
            ("method", found.method),
            ("headers", headers or "-"),
            ("timeout", f"{found.timeout_seconds:g}s"),
            ("description", render.one_line(found.description, width=None)),
            ("state", _state(found)),
            ("state changed at", render.when(found.state_changed_at)),
            ("consecutive failures", str(found.consecutive_failures)),
            ("in flight", str(found.in_flight)),
            ("waiting", str(found.waiting)),
            ("flow", _flow(found)),
            ("failure threshold", f"{circuit.failure_threshold} in a row"),
            (
                "cooldown",
                f"{circuit.cooldown_seconds:g}s, doubling up to {circuit.max_cooldown_seconds:g}s",
            ),
            ("disable after", disable),
            ("signing secrets", _secrets(found)),
            ("version", str(found.version)),
            ("created at", render.when(found.created_at)),
            ("updated at", render.when(found.updated_at)),
        ]
    )


def _one(found: EndpointOut, headline: str) -> Output:
    return Output(found.model_dump(mode="json"), f"{headline}\n\n{describe(found)}")


def _with_secret(found: EndpointOut, headline: str) -> Output:
    """The answer that made a secret: its value printed this once, apart from the rest."""
    secret = found.signing_secrets[-1].secret
    shown = (
        f"{headline}\n\n{SHOWN_ONCE}: {secret}\n"
        "Store it now: no later command or answer shows it.\n\n"
        f"{describe(found)}"
    )
    return Output(found.model_dump(mode="json"), shown)


def _event_row(found: EndpointEventOut) -> list[str]:
    detail = "-" if found.detail is None else json.dumps(found.detail, sort_keys=True)
    return [render.when(found.at), found.kind, found.actor or "-", render.one_line(detail, 60)]


ATTEMPT_COLUMNS = (
    "STARTED AT",
    "ATTEMPT",
    "OUTCOME",
    "STATUS",
    "DURATION",
    "OCCURRENCE ID",
    "ERROR",
)


def _attempt_row(found: EndpointAttemptOut) -> list[str]:
    return [
        render.when(found.started_at),
        str(found.attempt),
        found.outcome,
        "-" if found.status_code is None else str(found.status_code),
        f"{found.duration_ms} ms",
        str(found.occurrence_id),
        render.one_line(found.error, width=60),
    ]


# -- the commands -----------------------------------------------------------------------


def _create(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        body = _fields(args)
        if flow := _given(args, _FLOW_OPTIONS):
            body["flow"] = flow
        if circuit := _given(args, _CIRCUIT_OPTIONS):
            body["circuit"] = circuit
        try:
            wanted = _checked(EndpointIn, body)
        except InvalidInputError as exc:
            option = _OPTIONS.get(exc.pointer or "", "the endpoint")
            parser.error(f"argument {option}: {exc.detail}")

        async def work(operator: Operator) -> Output:
            found = await operator.create_endpoint(wanted)
            return _with_secret(found, f"created endpoint {found.id} (version {found.version})")

        return execute(args, work, _options(args))

    return run


async def _merged(operator: Operator, args: argparse.Namespace, body: dict[str, Any]) -> Versions:
    """Merge the flow and circuit options given into the groups as read (the API replaces
    each whole); the versions the change may apply to."""
    flow, circuit = _given(args, _FLOW_OPTIONS), _given(args, _CIRCUIT_OPTIONS)
    wanted: Versions = None if args.if_match is None else frozenset({args.if_match})
    if not (flow or circuit):
        return wanted
    before = await operator.endpoint(args.id)
    if flow:
        read = {} if before.flow is None else before.flow.model_dump(mode="json")
        body["flow"] = {**read, **flow}
    if circuit:
        body["circuit"] = {**before.circuit.model_dump(mode="json"), **circuit}
    return wanted or frozenset({before.version})


def _update(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        body = _fields(args)
        if args.clear_flow:
            if _given(args, _FLOW_OPTIONS):
                parser.error("argument --clear-flow: not with the flow options")
            body["flow"] = None
        if args.clear_headers and args.header:
            parser.error("argument --clear-headers: not with --header")
        given = _given(args, _FLOW_OPTIONS) or _given(args, _CIRCUIT_OPTIONS)
        if not body and not given:
            parser.error("nothing to change: give at least one option")

        async def work(operator: Operator) -> Output:
            if_match = await _merged(operator, args, body)
            changes = _checked(EndpointPatch, body)
            try:
                found = await if_match_as_domain(
                    operator.update_endpoint(args.id, changes, if_match)
                )
            except PreconditionFailedError as exc:
                raise PreconditionFailedError(
                    f"endpoint {args.id} was not updated: {exc.detail}; read it again "
                    f"(`chronoq endpoint show {args.id}`) and run the command again"
                ) from None
            headline = (
                f"updated endpoint {found.id} (now version {found.version}): "
                f"{', '.join(sorted(body))}"
            )
            return _one(found, headline)

        return execute(args, work, _options(args))

    return run


def _list(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        found, more = await collect(args, operator.endpoints)
        if not found:
            text = "no endpoints"
        else:
            text = render.table(COLUMNS, [_row(e) for e in found])
            if more:
                text += (
                    f"\n\n(the first {len(found)} endpoints, oldest first; more exist: raise "
                    "--limit or pass --all)"
                )
        return Output([e.model_dump(mode="json") for e in found], text)

    return execute(args, work)


def _show(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        found = await operator.endpoint(args.id)
        return Output(found.model_dump(mode="json"), describe(found))

    return execute(args, work)


def _delete(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        wanted: Versions = None if args.if_match is None else frozenset({args.if_match})
        await operator.delete_endpoint(args.id, wanted)
        return Output({"deleted": str(args.id)}, f"deleted endpoint {args.id} and its secrets")

    return execute(args, work)


def _rotate(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        found = await operator.rotate_endpoint_secret(args.id, args.overlap)
        earlier = [s.expires_at for s in found.signing_secrets[:-1] if s.expires_at]
        if earlier:
            overlap = f"the earlier secrets sign beside it until {render.when(max(earlier))}"
        else:
            overlap = "it alone signs from now on"
        headline = (
            f"rotated the signing secret of endpoint {found.id} (version {found.version}): "
            f"{overlap}"
        )
        return _with_secret(found, headline)

    return execute(args, work, _OPTIONS)


def _enable(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        found = await operator.enable_endpoint(args.id)
        headline = (
            f"enabled endpoint {found.id}: its circuit is {found.state}, and its waiting "
            "deliveries start as its limits allow"
        )
        return _one(found, headline)

    return execute(args, work)


def _events(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        async def page(limit: int, cursor: str | None) -> Page[EndpointEventOut]:
            return await operator.endpoint_events(args.id, limit, cursor)

        found, more = await collect(args, page)
        if not found:
            text = f"no events of endpoint {args.id}"
        else:
            text = render.table(("AT", "KIND", "ACTOR", "DETAIL"), [_event_row(e) for e in found])
            if more:
                text += (
                    f"\n\n(the first {len(found)} events, oldest first; more exist: raise "
                    "--limit or --all)"
                )
        return Output([e.model_dump(mode="json") for e in found], text)

    return execute(args, work)


def _attempts(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        async def page(limit: int, cursor: str | None) -> Page[EndpointAttemptOut]:
            return await operator.endpoint_attempts(args.id, limit, cursor)

        found, more = await collect(args, page)
        if not found:
            text = f"no attempts went to endpoint {args.id} yet"
        else:
            text = render.table(ATTEMPT_COLUMNS, [_attempt_row(a) for a in found])
            if more:
                text += (
                    f"\n\n(the first {len(found)} attempts, newest first; more exist: raise "
                    "--limit or --all)"
                )
        return Output([a.model_dump(mode="json") for a in found], text)

    return execute(args, work)


# -- registration -----------------------------------------------------------------------


def add_endpoint_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: Parser
) -> None:
    """Register endpoint create|list|show|update|delete|rotate|enable|events|attempts."""
    group = commands.add_parser("endpoint", help="endpoints: reusable webhook destinations")
    names = ["create", "list", "show", "update", "delete", "rotate", "enable", "events", "attempts"]
    sub = group.add_subparsers(
        dest="endpoint_command",
        metavar="{" + ",".join(names) + "}",
        required=True,
        parser_class=Parser,
    )
    create = sub.add_parser(
        "create",
        parents=[common],
        help="make an endpoint; prints its signing secret, shown this once",
    )
    _add_spec_options(create, required=True)
    create.set_defaults(run=_create(create))

    listing = sub.add_parser(
        "list", parents=[common], help="endpoints, oldest first, with their state and figures"
    )
    add_limit(listing, 50, "endpoints")
    listing.set_defaults(run=_list)

    show = sub.add_parser(
        "show", parents=[common], help="one endpoint: its state, figures, limits and hints"
    )
    add_id(show, "endpoint id")
    show.set_defaults(run=_show)

    update = sub.add_parser(
        "update",
        parents=[common],
        help="change the fields the options name (flow and circuit options are merged "
        "into those the endpoint has)",
    )
    add_id(update, "endpoint id")
    _add_spec_options(update, required=False)
    update.add_argument("--clear-headers", action="store_true", help="remove every extra header")
    update.add_argument(
        "--clear-flow", action="store_true", help="remove the endpoint's own flow limits"
    )
    _add_if_match(update)
    update.set_defaults(run=_update(update))

    delete = sub.add_parser(
        "delete",
        parents=[common],
        help="remove an endpoint and its secrets (refused while a pending or paused "
        "schedule targets it)",
    )
    add_id(delete, "endpoint id")
    _add_if_match(delete)
    delete.set_defaults(run=_delete)

    rotate = sub.add_parser(
        "rotate",
        parents=[common],
        help="make a new signing secret, shown this once; the live ones sign beside it "
        "for --overlap seconds",
    )
    add_id(rotate, "endpoint id")
    rotate.add_argument(
        "--overlap",
        type=_overlap,
        default=None,
        metavar="SECONDS",
        help=f"how long the live secrets go on signing (0 to {MAX_OVERLAP_SECONDS:,}; "
        "default: a day)",
    )
    rotate.set_defaults(run=_rotate)

    enable = sub.add_parser(
        "enable", parents=[common], help="close the circuit, whatever its state (disabled too)"
    )
    add_id(enable, "endpoint id")
    enable.set_defaults(run=_enable)

    events = sub.add_parser(
        "events",
        parents=[common],
        help="an endpoint's events, oldest first: its writes, rotations and circuit changes",
    )
    add_id(events, "endpoint id")
    add_limit(events, 50, "events")
    events.set_defaults(run=_events)

    attempts = sub.add_parser(
        "attempts",
        parents=[common],
        help="the attempts that went to an endpoint, newest first, each with its occurrence",
    )
    add_id(attempts, "endpoint id")
    add_limit(attempts, 50, "attempts")
    attempts.set_defaults(run=_attempts)


def _add_if_match(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--if-match",
        type=version_arg,
        default=None,
        metavar="VERSION",
        help="only if the endpoint is still at this version (`show` gives it)",
    )


def _add_spec_options(parser: argparse.ArgumentParser, required: bool) -> None:
    """The fields of an endpoint; `update` sends only those given."""
    parser.add_argument(
        "--target-url",
        required=required,
        metavar="URL",
        help="the http:// or https:// URL its deliveries go to (--url is the service's)",
    )
    parser.add_argument("--name", metavar="NAME", help='unique in the tenant ("": none)')
    parser.add_argument("--method", choices=["POST", "PUT", "PATCH"], help="default POST")
    parser.add_argument(
        "--header",
        type=_header,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an extra request header (repeatable; an update replaces them all)",
    )
    parser.add_argument(
        "--timeout", type=_seconds, metavar="SECONDS", help="per attempt (default 10)"
    )
    parser.add_argument("--description", metavar="TEXT", help='free text ("": none)')
    flow = parser.add_argument_group("flow limits (fleet-wide, of all its deliveries)")
    flow.add_argument("--rate", type=_whole, metavar="N", help="attempts per --period")
    flow.add_argument(
        "--period", type=_seconds, metavar="SECONDS", help="the period of --rate (default 1)"
    )
    flow.add_argument("--burst", type=_whole, metavar="N", help="default: the rate")
    flow.add_argument("--parallelism", type=_whole, metavar="N", help="attempts in flight")
    flow.add_argument("--ordering", choices=["none", "fifo"], help="fifo: in due order")
    circuit = parser.add_argument_group("circuit breaker")
    circuit.add_argument(
        "--failure-threshold",
        type=_whole,
        metavar="N",
        help="failed attempts in a row that open it (default 10)",
    )
    circuit.add_argument(
        "--cooldown",
        type=_seconds,
        metavar="SECONDS",
        help="open this long before a probe (default 30)",
    )
    circuit.add_argument(
        "--max-cooldown",
        type=_seconds,
        metavar="SECONDS",
        help="each failed probe doubles the cooldown up to this (default 600)",
    )
    circuit.add_argument(
        "--disable-after",
        type=_seconds_or_never,
        metavar="SECONDS|never",
        help="outage after which a failed probe disables it until `endpoint enable` "
        "(default 432000: 5 days)",
    )
