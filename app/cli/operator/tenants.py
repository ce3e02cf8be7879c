"""`chronoq tenant list|show|set|pause|resume|delete|events`: tenants and their audit events
from the operator CLI, through the same services as /v1/tenants (DESIGN.md section 14); the
tenant's keys (`chronoq tenant key ...`) are app/cli/operator/tenant_keys.py.

Same conventions as the other operator commands (app/cli/operator/commands.py). The tenant is
the command's argument (these manage tenants rather than act in one, so `--tenant` is not
theirs). `set` replaces the tenant whole, like a PUT: an option left out goes to its default
(no limit, weight 1, not paused, no events target: `--events-url` or `--events-endpoint`
give one, read by the API's own model before anything is sent). `pause` and `resume` read
the tenant and put it back whole with `paused` as asked, under If-Match of the version
read: a change made in between is refused, never overwritten. `events` reads a tenant's
audit trail oldest first, a removed tenant's too; each change these commands make is in it,
by the API key's name over HTTP and by "cli" on the database.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from app.api.schemas import Page
from app.api.target_schemas import WebhookTargetOut
from app.api.tenant_schemas import TenantEventOut, TenantIn, TenantOut
from app.cli.operator import text as render
from app.cli.operator.backends import Operator, Versions
from app.cli.operator.http_backend import domain_error
from app.cli.operator.run import Output, Parser, add_limit, add_tenant_id, collect, execute
from app.cli.operator.tenant_keys import add_tenant_key_commands
from app.client import errors as problems
from app.domain.errors import InvalidInputError, PreconditionFailedError
from app.domain.flow import MAX_PARALLELISM, MAX_RATE
from app.domain.target import Target
from app.domain.tenants import (
    DEFAULT_WEIGHT,
    MAX_DISPLAY_NAME,
    MAX_QUOTA,
    MAX_RETENTION_SECONDS,
    MAX_WEIGHT,
    MIN_WEIGHT,
    Quotas,
    TenantSpec,
)
from app.store.records.tenants import USAGE_CAP

T = TypeVar("T")

# Where a refusal points at a field of the body, the option that gave it.
_OPTIONS = {
    "#/display_name": "--display-name",
    "#/weight": "--weight",
    "#/paused": "--paused",
    "#/quotas/max_schedules": "--max-schedules",
    "#/quotas/max_creates_per_minute": "--max-creates-per-minute",
    "#/quotas/max_deliveries_per_second": "--max-deliveries-per-second",
    "#/quotas/max_in_flight": "--max-in-flight",
    "#/retention_seconds": "--retention-seconds",
    "#/events_target": "the events target",
    "#/events_target/url": "--events-url",
    "#/events_target/signing_secret": "--events-secret",
    "#/events_target/endpoint_id": "--events-endpoint",
}
# The events target's fields that an option gives, by the option.
_TARGET_OPTIONS = {
    "url": "--events-url",
    "signing_secret": "--events-secret",
    "endpoint_id": "--events-endpoint",
}


def _display_name(text: str) -> str:
    if len(text) > MAX_DISPLAY_NAME or not text.isprintable():
        raise argparse.ArgumentTypeError(
            f"a display name is at most {MAX_DISPLAY_NAME} printable characters on one line"
        )
    return text


def _whole(text: str, lowest: int, highest: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not lowest <= value <= highest:
        raise argparse.ArgumentTypeError(f"{what} is {lowest} to {highest:,}, not {value}")
    return value


def _quota(text: str) -> int:
    return _whole(text, 1, MAX_QUOTA, "a quota")


def _deliveries_per_second(text: str) -> int:
    return _whole(text, 1, MAX_RATE, "a delivery rate")


def _in_flight(text: str) -> int:
    return _whole(text, 1, MAX_PARALLELISM, "an in-flight quota")


def _weight(text: str) -> int:
    return _whole(text, MIN_WEIGHT, MAX_WEIGHT, "a weight")


def _retention(text: str) -> int:
    return _whole(text, 0, MAX_RETENTION_SECONDS, "a retention (seconds; 0 keeps forever)")


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def _tenant_row(found: TenantOut) -> list[str]:
    return [
        found.id,
        found.display_name or "-",
        str(found.weight),
        _yes(found.paused),
        str(found.version),
        render.when(found.created_at),
    ]


def _limit(value: int | None) -> str:
    return "no limit" if value is None else str(value)


def _retention_text(seconds: int | None) -> str:
    if seconds is None:
        return "the service's (CHRONOQ_SCHEDULE_RETENTION)"
    if seconds == 0:
        return "forever (0)"
    return f"{seconds} seconds"


def _count(value: int) -> str:
    """A usage figure: the counts stop at USAGE_CAP (at least that many)."""
    return f"{value} or more" if value >= USAGE_CAP else str(value)


def _events_target_text(found: TenantOut) -> str:
    """Where the tenant's operator events go. The answer's target: its secrets are
    redacted already, and the signing secret shows as its hint (`whsec_…` and the last 4
    characters)."""
    target = found.events_target
    if target is None:
        return "none"
    text = render.target_text(target)
    if isinstance(target, WebhookTargetOut) and target.signing_secret is not None:
        text += f" (signing secret {target.signing_secret})"
    return text


def _describe(found: TenantOut) -> str:
    quotas, usage = found.quotas, found.usage
    paused = (
        f"yes: its deliveries wait until `chronoq tenant resume {found.id}`"
        if found.paused
        else "no"
    )
    return render.fields(
        [
            ("tenant", found.id),
            ("display name", found.display_name or "-"),
            ("version", str(found.version)),
            ("weight", str(found.weight)),
            ("paused", paused),
            ("max schedules", _limit(quotas.max_schedules)),
            ("max creates per minute", _limit(quotas.max_creates_per_minute)),
            ("max deliveries per second", _limit(quotas.max_deliveries_per_second)),
            ("max in flight", _limit(quotas.max_in_flight)),
            ("retention", _retention_text(found.retention_seconds)),
            ("events target", _events_target_text(found)),
            ("schedules", _count(usage.schedules)),
            ("pending occurrences", _count(usage.pending_occurrences)),
            ("in flight", _count(usage.in_flight)),
            ("waiting", _count(usage.waiting)),
            ("dead letters", _count(usage.dead_letters)),
            ("created at", render.when(found.created_at)),
            ("updated at", render.when(found.updated_at)),
        ]
    )


def _one(found: TenantOut, headline: str) -> Output:
    return Output(found.model_dump(mode="json"), f"{headline}\n\n{_describe(found)}")


_TARGET: TypeAdapter[Target] = TypeAdapter(Target)


def spec_of(found: TenantOut) -> TenantSpec:
    """The tenant as a PUT would give it back, whole."""
    quotas = found.quotas
    return TenantSpec(
        display_name=found.display_name,
        weight=found.weight,
        paused=found.paused,
        quotas=Quotas(
            quotas.max_schedules,
            quotas.max_creates_per_minute,
            quotas.max_deliveries_per_second,
            quotas.max_in_flight,
        ),
        retention_seconds=found.retention_seconds,
        # Its secrets redacted: a PUT that sends them so keeps the stored ones.
        events_target=(
            None
            if found.events_target is None
            else _TARGET.validate_python(found.events_target.model_dump(mode="json"))
        ),
    )


def _event_row(found: TenantEventOut) -> list[str]:
    return [
        render.when(found.at),
        found.kind.value,
        "-" if found.version is None else str(found.version),
        found.actor or "-",
        ", ".join(found.fields) if found.fields else "-",
        found.key_name or "-",
    ]


def _list(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        found, more = await collect(args, operator.tenants)
        text = render.table(
            ("TENANT", "DISPLAY NAME", "WEIGHT", "PAUSED", "VERSION", "CREATED"),
            [_tenant_row(t) for t in found],
        )
        if more:
            text += f"\n\n(the first {len(found)} tenants; more exist: raise --limit or --all)"
        return Output([t.model_dump(mode="json") for t in found], text)

    return execute(args, work)


def _show(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        found = await operator.tenant(args.tenant_id)
        return Output(found.model_dump(mode="json"), _describe(found))

    return execute(args, work)


def _events_target(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Target | None:
    """The events target the options give (None: none), read by the API's own model; a
    refusal is a usage error naming the option, and never repeats a secret."""
    body: dict[str, Any]
    if args.events_secret is not None and args.events_url is None:
        parser.error("argument --events-secret: only with --events-url (the webhook it signs)")
    if args.events_url is not None:
        body = {"type": "webhook", "url": args.events_url}
        if args.events_secret is not None:
            body["signing_secret"] = args.events_secret
        given = "--events-url"
    elif args.events_endpoint is not None:
        body = {"type": "endpoint", "endpoint_id": args.events_endpoint}
        given = "--events-endpoint"
    else:
        return None
    try:
        return TenantIn.model_validate({"events_target": body}).events_target
    except ValidationError as exc:
        first = exc.errors()[0]
        named = [_TARGET_OPTIONS[str(part)] for part in first["loc"] if part in _TARGET_OPTIONS]
        detail = first["msg"].removeprefix("Value error, ")
        parser.error(f"argument {named[0] if named else given}: {detail}")
    except InvalidInputError as exc:
        option = _TARGET_OPTIONS.get((exc.pointer or "").rsplit("/", 1)[-1], given)
        parser.error(f"argument {option}: {exc.detail}")


def _set_command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        events_target = _events_target(parser, args)

        async def work(operator: Operator) -> Output:
            quotas = Quotas(
                args.max_schedules,
                args.max_creates_per_minute,
                args.max_deliveries_per_second,
                args.max_in_flight,
            )
            spec = TenantSpec(
                display_name=args.display_name,
                weight=args.weight,
                paused=args.paused,
                quotas=quotas,
                retention_seconds=args.retention_seconds,
                events_target=events_target,
            )
            found, created = await operator.put_tenant(args.tenant_id, spec)
            verb = "created" if created else "replaced"
            return _one(found, f"{verb} tenant {found.id} (version {found.version})")

        return execute(args, work, _OPTIONS)

    return run


async def _refusal_as_domain(call: Awaitable[T]) -> T:
    """`call`, with the service's refusal of a body or of its If-Match raised as the domain's
    error, as the database backend raises it."""
    try:
        return await call
    except (problems.PreconditionFailedError, problems.ValidationError) as problem:
        raise domain_error(problem) from None


async def set_paused(operator: Operator, tenant: str, paused: bool) -> tuple[TenantOut, bool]:
    """Read the tenant, then put it back whole with `paused` as asked, under If-Match of the
    version read. The tenant as it now is, and whether it was changed (not when it already
    was as asked). A change made between the read and the put is a PreconditionFailedError,
    and nothing is changed; a tenant that takes no pause (`default`) is an
    InvalidInputError naming `paused`."""
    before = await operator.tenant(tenant)
    if before.paused == paused:
        return before, False
    wanted = dataclasses.replace(spec_of(before), paused=paused)
    expected: Versions = frozenset({before.version})
    try:
        after, _ = await _refusal_as_domain(operator.put_tenant(tenant, wanted, expected))
    except PreconditionFailedError as exc:
        verb = "paused" if paused else "resumed"
        raise PreconditionFailedError(
            f"tenant {tenant} changed after it was read ({exc.detail}): it was not {verb}; "
            "run the command again"
        ) from None
    except InvalidInputError as exc:
        verb = "paused" if paused else "resumed"
        field = (exc.pointer or "").removeprefix("#/").replace("/", ".")
        named = f" (field {field})" if field else ""
        raise InvalidInputError(f"tenant {tenant} was not {verb}{named}: {exc.detail}") from None
    return after, True


def _pause_command(paused: bool) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        async def work(operator: Operator) -> Output:
            found, changed = await set_paused(operator, args.tenant_id, paused)
            if not changed:
                state = "already paused" if paused else "not paused"
                return _one(
                    found,
                    f"tenant {found.id} is {state} (version {found.version}); nothing changed",
                )
            if paused:
                headline = (
                    f"paused tenant {found.id} (version {found.version}): none of its "
                    "deliveries starts (they wait, nothing is skipped) until "
                    f"`chronoq tenant resume {found.id}`"
                )
            else:
                headline = (
                    f"resumed tenant {found.id} (version {found.version}): its waiting "
                    "deliveries start as its quotas allow"
                )
            return _one(found, headline)

        return execute(args, work)

    return run


def _delete(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        await operator.delete_tenant(args.tenant_id)
        return Output(
            {"deleted": args.tenant_id},
            f"deleted tenant {args.tenant_id}, with its ended schedules, flow keys and keys",
        )

    return execute(args, work)


def _events(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        async def page(limit: int, cursor: str | None) -> Page[TenantEventOut]:
            return await operator.tenant_events(args.tenant_id, limit, cursor)

        found, more = await collect(args, page)
        if not found:
            text = f"no events of tenant {args.tenant_id}"
        else:
            text = render.table(
                ("AT", "KIND", "VERSION", "ACTOR", "FIELDS", "KEY"),
                [_event_row(e) for e in found],
            )
            if more:
                text += (
                    f"\n\n(the first {len(found)} events, oldest first; more exist: raise "
                    "--limit or --all)"
                )
        return Output([e.model_dump(mode="json") for e in found], text)

    return execute(args, work)


def add_tenant_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: Parser
) -> None:
    """Register tenant list|show|set|pause|resume|delete|events and tenant key
    create|list|revoke."""
    group = commands.add_parser("tenant", help="tenants, their keys and their audit events")
    names = ["list", "show", "set", "pause", "resume", "delete", "events", "key"]
    sub = group.add_subparsers(
        dest="tenant_command",
        metavar="{" + ",".join(names) + "}",
        required=True,
        parser_class=Parser,
    )
    listing = sub.add_parser("list", parents=[common], help="tenants in id order")
    add_limit(listing, 50, "tenants")
    listing.set_defaults(run=_list)
    show = sub.add_parser("show", parents=[common], help="one tenant")
    add_tenant_id(show)
    show.set_defaults(run=_show)
    put = sub.add_parser(
        "set",
        parents=[common],
        help="create or replace a tenant whole, like PUT: an option left out goes to its "
        "default (no limit, weight 1, not paused, no events target)",
    )
    add_tenant_id(put)
    _add_spec_options(put)
    put.set_defaults(run=_set_command(put))
    changes: list[tuple[str, bool, str]] = [
        (
            "pause",
            True,
            "hold every delivery of a tenant (they wait, nothing is skipped) until it is "
            "resumed; the rest of the tenant stays as it is",
        ),
        ("resume", False, "release a paused tenant's deliveries; the rest stays as it is"),
    ]
    for name, paused, help_text in changes:
        parser = sub.add_parser(name, parents=[common], help=help_text)
        add_tenant_id(parser)
        parser.set_defaults(run=_pause_command(paused))
    delete = sub.add_parser(
        "delete",
        parents=[common],
        help="remove a tenant with its ended schedules, flow keys and keys (refused while "
        "one of its schedules is pending or paused)",
    )
    add_tenant_id(delete)
    delete.set_defaults(run=_delete)
    events = sub.add_parser(
        "events",
        parents=[common],
        help="a tenant's audit events, oldest first: who changed it or its keys, and to "
        "which version (a removed tenant's too)",
    )
    add_tenant_id(events)
    add_limit(events, 50, "events")
    events.set_defaults(run=_events)
    add_tenant_key_commands(sub, common)


def _add_spec_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--display-name", type=_display_name, default=None, metavar="TEXT")
    parser.add_argument(
        "--weight",
        type=_weight,
        default=DEFAULT_WEIGHT,
        metavar="N",
        help=f"{MIN_WEIGHT} to {MAX_WEIGHT}: its share of the deliveries started when more is "
        f"due than the fleet can start (default {DEFAULT_WEIGHT})",
    )
    parser.add_argument(
        "--paused",
        action="store_true",
        help="hold every delivery of the tenant (they wait, nothing is skipped); a set "
        "without it resumes the tenant, as a set replaces it whole (to flip only this, "
        "use `tenant pause` or `tenant resume`)",
    )
    parser.add_argument(
        "--max-schedules",
        type=_quota,
        default=None,
        metavar="N",
        help="live (pending or paused) schedules (default: no limit)",
    )
    parser.add_argument(
        "--max-creates-per-minute",
        type=_quota,
        default=None,
        metavar="N",
        help="creates a minute, a batch counting its items (default: no limit)",
    )
    parser.add_argument(
        "--max-deliveries-per-second",
        type=_deliveries_per_second,
        default=None,
        metavar="N",
        help=f"attempts started a second, fleet-wide (1 to {MAX_RATE:,}; default: no limit)",
    )
    parser.add_argument(
        "--max-in-flight",
        type=_in_flight,
        default=None,
        metavar="N",
        help=f"attempts in flight at once, fleet-wide (1 to {MAX_PARALLELISM:,}; default: "
        "no limit)",
    )
    parser.add_argument(
        "--retention-seconds",
        type=_retention,
        default=None,
        metavar="N",
        help="how long its ended schedules are kept, overriding "
        "CHRONOQ_SCHEDULE_RETENTION; 0 keeps them forever (default: that setting)",
    )
    events = parser.add_mutually_exclusive_group()
    events.add_argument(
        "--events-url",
        default=None,
        metavar="URL",
        help="send the tenant's operator events (endpoint.opened, schedule.auto_paused, "
        "occurrence.dead_lettered, ...) to this webhook, POSTed; without it or "
        "--events-endpoint the tenant has no events target, as a set replaces it whole "
        "(`tenant pause` and `tenant resume` keep it)",
    )
    events.add_argument(
        "--events-endpoint",
        default=None,
        metavar="ENDPOINT_ID",
        help="send the tenant's operator events to this endpoint of the tenant instead "
        "(`chronoq endpoint list --tenant TENANT`)",
    )
    parser.add_argument(
        "--events-secret",
        default=None,
        metavar="whsec_...",
        help="with --events-url: the webhook's own signing secret (whsec_ and a base64 key) "
        "instead of the service's; shown by `tenant show` as its hint only (default: the "
        "service's secrets sign)",
    )
