"""`chronoq flow-key list|show|set|pause|resume|clear-backoff`: flow keys' limits and live
figures from the operator CLI, through the same service as /v1/flow-keys (DESIGN.md section 11).

Same conventions as the other operator commands (app/cli/operator/commands.py): `--conn`, `--format
text|json` (json: the document the HTTP API answers with), exit 0 done, 1 the database or the
service refused (unreachable, a concurrent change), 2 the command line is wrong. Values the
limits refuse (rate 0, a burst without a rate, fifo with parallelism 2) and keys outside the
alphabet are usage errors naming the option, found before the database is opened, so nothing
is stored. `set` replaces the limits as a whole, like a PUT. `pause` and `resume` read the key
and put the same limits with `paused` flipped under If-Match of the version read: a change
made in between is refused, never overwritten. `clear-backoff` ends the back-off a
destination asked for (429 or 503 with Retry-After), leaving the limits and their version.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence

from app.api.flow_key_schemas import FlowKeyOut
from app.cli.operator import text as render
from app.cli.operator.backends import Operator
from app.cli.operator.run import Output, Parser, add_limit, collect, execute, flow_key_arg
from app.domain.errors import InvalidInputError, PreconditionFailedError
from app.domain.flow import KEY_ALPHABET, FlowLimits, Ordering

# Where FlowLimits points at a field it refuses, the option that gave it.
_OPTIONS = {
    "#/rate": "--rate",
    "#/period_seconds": "--period-seconds",
    "#/burst": "--burst",
    "#/parallelism": "--parallelism",
    "#/ordering": "--ordering",
    "#/paused": "--paused",
}


def limits_of(found: FlowKeyOut) -> FlowLimits | None:
    """A key's limits as the domain holds them; None for a key never put."""
    if found.version is None:
        return None
    return FlowLimits(
        rate=found.rate,
        period_seconds=found.period_seconds or 1.0,
        burst=found.burst,
        parallelism=found.parallelism,
        ordering=Ordering(found.ordering),
        paused=found.paused,
    )


# -- argument types -------------------------------------------------------------------


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


# -- text -------------------------------------------------------------------------------

COLUMNS = (
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
)


def _rate(limits: FlowLimits) -> str:
    return "-" if limits.rate is None else f"{limits.rate}/{limits.period_seconds:g}s"


def _row(found: FlowKeyOut) -> list[str]:
    limits = limits_of(found)
    if limits is None:
        shown = ["-"] * 5
    else:
        shown = [
            _rate(limits),
            "-" if limits.capacity is None else str(limits.capacity),
            "-" if limits.parallelism is None else str(limits.parallelism),
            limits.ordering.value,
            "yes" if limits.paused else "no",
        ]
    return [
        found.key,
        *shown,
        "-" if found.version is None else str(found.version),
        str(found.in_flight),
        str(found.waiting),
        render.when(found.backoff_until),
    ]


def describe(found: FlowKeyOut) -> str:
    """One key as a field list: its limits ("no limits" for a key never put), its version
    and its live figures."""
    limits = limits_of(found)
    pairs: list[tuple[str, str]] = [("key", found.key)]
    if limits is None:
        pairs += [("limits", "no limits (never set: its schedules run unlimited)")]
    else:
        if limits.rate is None:
            rate, burst = "no rate limit", "-"
        else:
            rate = f"{limits.rate} per {limits.period_seconds:g}s"
            burst = str(limits.burst) if limits.burst is not None else f"{limits.rate} (the rate)"
        pairs += [
            ("version", str(found.version)),
            ("rate", rate),
            ("burst", burst),
            ("parallelism", "no limit" if limits.parallelism is None else str(limits.parallelism)),
            ("ordering", limits.ordering.value),
            ("paused", "yes" if limits.paused else "no"),
        ]
    pairs += [
        ("in flight", str(found.in_flight)),
        ("waiting", str(found.waiting)),
        ("backoff until", render.when(found.backoff_until)),
    ]
    if limits is not None:
        pairs += [
            ("created at", render.when(found.created_at)),
            ("updated at", render.when(found.updated_at)),
        ]
    return render.fields(pairs)


def _one(found: FlowKeyOut, headline: str | None = None) -> Output:
    text = describe(found)
    return Output(
        found.model_dump(mode="json"), text if headline is None else f"{headline}\n\n{text}"
    )


# -- the commands -----------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        found, more = await collect(args, operator.flow_keys)
        if not found:
            text = "no flow keys"
        else:
            text = render.table(COLUMNS, [_row(k) for k in found])
            if more:
                text += (
                    f"\n\n(the first {len(found)} flow keys, in name order; more exist: "
                    "raise --limit or pass --all)"
                )
        return Output([k.model_dump(mode="json") for k in found], text)

    return execute(args, work)


def _show(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        return _one(await operator.flow_key(args.key))

    return execute(args, work)


def _set_command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            limits = FlowLimits(
                rate=args.rate,
                period_seconds=args.period_seconds,
                burst=args.burst,
                parallelism=args.parallelism,
                ordering=Ordering(args.ordering),
                paused=args.paused,
            )
        except InvalidInputError as exc:
            option = _OPTIONS.get(exc.pointer or "", "the limits")
            parser.error(f"argument {option}: {exc.detail}")

        async def work(operator: Operator) -> Output:
            found, created = await operator.put_flow_key(args.key, limits, None)
            if created:
                return _one(found, f"created flow key {found.key} (version {found.version})")
            return _one(
                found, f"replaced the limits of flow key {found.key} (now version {found.version})"
            )

        return execute(args, work, _OPTIONS)

    return run


async def set_paused(operator: Operator, key: str, paused: bool) -> tuple[FlowKeyOut, bool]:
    """Read the key, then put its limits with `paused` as asked, under If-Match of the version
    read (none for a key never put: pausing one gives it only `paused`). The key as it now
    is, and whether it was changed (not when it already was as asked). A change made between
    the read and the put is a PreconditionFailedError, and nothing is changed."""
    before = await operator.flow_key(key)
    limits = limits_of(before)
    if (limits is not None and limits.paused) == paused:
        return before, False
    wanted = dataclasses.replace(limits or FlowLimits(), paused=paused)
    try:
        after, _ = await operator.put_flow_key(key, wanted, frozenset({before.version or 0}))
    except PreconditionFailedError as exc:
        verb = "paused" if paused else "resumed"
        raise PreconditionFailedError(
            f"flow key {key} changed after it was read ({exc.detail}): it was not {verb}; "
            "run the command again"
        ) from None
    return after, True


def _pause_command(paused: bool) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        async def work(operator: Operator) -> Output:
            found, changed = await set_paused(operator, args.key, paused)
            if not changed:
                if found.version is None:
                    headline = f"flow key {found.key} has no limits, so it is not paused"
                else:
                    state = "paused" if paused else "not paused"
                    headline = f"flow key {found.key} is already {state} (version {found.version})"
                return _one(found, f"{headline}; nothing changed")
            if paused:
                headline = (
                    f"paused flow key {found.key} (version {found.version}): nothing of it "
                    f"starts until `chronoq flow-key resume {found.key}`"
                )
            else:
                headline = f"resumed flow key {found.key} (version {found.version})"
            return _one(found, headline)

        return execute(args, work)

    return run


def _clear_backoff(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        before = await operator.flow_key(args.key)
        found = await operator.clear_flow_key_backoff(args.key)
        if before.backoff_until is None:
            headline = f"flow key {found.key} has no back-off; nothing changed"
        else:
            headline = (
                f"cleared the back-off of flow key {found.key}: what waits on it starts as "
                "its limits allow"
            )
        return _one(found, headline)

    return execute(args, work)


# -- registration -----------------------------------------------------------------------


def _add_key(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "key",
        type=flow_key_arg,
        metavar="KEY",
        help=f"the flow key ({KEY_ALPHABET}), as schedules name it",
    )


def add_flow_key_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: Parser
) -> None:
    """Register flow-key list|show|set|pause|resume|clear-backoff."""
    group = commands.add_parser("flow-key", help="flow keys' limits and live figures")
    names = ["list", "show", "set", "pause", "resume", "clear-backoff"]
    sub = group.add_subparsers(
        dest="flow_key_command",
        metavar="{" + ",".join(names) + "}",
        required=True,
        parser_class=Parser,
    )

    listing = sub.add_parser(
        "list", parents=[common], help="keys in name order, with their limits and live figures"
    )
    add_limit(listing, 50, "keys")
    listing.set_defaults(run=_list)

    show = sub.add_parser(
        "show", parents=[common], help="one key: its limits, version and live figures"
    )
    _add_key(show)
    show.set_defaults(run=_show)

    put = sub.add_parser(
        "set",
        parents=[common],
        help="replace a key's limits as a whole, like PUT: options left out are no limit",
    )
    _add_key(put)
    _add_limit_options(put)
    put.set_defaults(run=_set_command(put))

    changes: Sequence[tuple[str, bool, str]] = [
        ("pause", True, "pause a key: nothing of it starts until it is resumed"),
        ("resume", False, "resume a paused key (its other limits stay as they are)"),
    ]
    for name, paused, help_text in changes:
        parser = sub.add_parser(name, parents=[common], help=help_text)
        _add_key(parser)
        parser.set_defaults(run=_pause_command(paused))

    clear = sub.add_parser(
        "clear-backoff",
        parents=[common],
        help="end the back-off a destination asked for (its limits stay as they are)",
    )
    _add_key(clear)
    clear.set_defaults(run=_clear_backoff)


def _add_limit_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rate",
        type=_whole,
        metavar="N",
        help="at most N attempts start per --period-seconds, on average (default: no rate limit)",
    )
    parser.add_argument(
        "--period-seconds",
        type=_seconds,
        default=1.0,
        metavar="S",
        help="the period of --rate, in seconds (default 1)",
    )
    parser.add_argument(
        "--burst",
        type=_whole,
        metavar="N",
        help="how many may start at once after a quiet spell (default: the rate; needs --rate)",
    )
    parser.add_argument(
        "--parallelism",
        type=_whole,
        metavar="N",
        help="at most N attempts of the key in flight at once, fleet-wide (default: no limit)",
    )
    parser.add_argument(
        "--ordering",
        choices=[o.value for o in Ordering],
        default=Ordering.NONE.value,
        help="fifo: one at a time, in due order (means parallelism 1); default none",
    )
    parser.add_argument(
        "--paused",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="nothing of the key starts while it is paused (default: not paused)",
    )
