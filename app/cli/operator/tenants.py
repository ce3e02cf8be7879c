"""`chronoq tenant list|show|set|delete` and `chronoq tenant key create|list|revoke`: tenants
and their keys from the operator CLI, through the same services as /v1/tenants (DESIGN.md
section 14).

Same conventions as the other operator commands (app/cli/operator/commands.py). The tenant is
the command's argument (these manage tenants rather than act in one, so `--tenant` is not
theirs). `key create` prints the key itself once: it is stored as its digest, and nothing
shows it again.
"""

from __future__ import annotations

import argparse
import uuid
from datetime import datetime

from app.api.schemas import Page
from app.api.tenant_schemas import MadeKey, TenantKeyOut, TenantOut
from app.cli.operator import text as render
from app.cli.operator.backends import Operator
from app.cli.operator.run import Output, Parser, add_limit, collect, execute, tenant_arg
from app.domain.tenant_keys import KEY_NAME_ALPHABET, KEY_NAME_PATTERN, KeyRole
from app.domain.tenants import MAX_DISPLAY_NAME, MAX_QUOTA, TENANT_ALPHABET, Quotas, TenantSpec

_OPTIONS = {"#/display_name": "--display-name", "#/name": "NAME", "#/expires_at": "--expires-at"}


def _key_name(text: str) -> str:
    if not KEY_NAME_PATTERN.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a key name ({KEY_NAME_ALPHABET})")
    return text


def _display_name(text: str) -> str:
    if len(text) > MAX_DISPLAY_NAME or not text.isprintable():
        raise argparse.ArgumentTypeError(
            f"a display name is at most {MAX_DISPLAY_NAME} printable characters on one line"
        )
    return text


def _quota(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MAX_QUOTA:
        raise argparse.ArgumentTypeError(f"a quota is 1 to {MAX_QUOTA:,}")
    return value


def _instant(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an RFC 3339 instant") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} names no offset (add Z or +HH:MM)")
    return value


def _tenant_row(found: TenantOut) -> list[str]:
    return [found.id, found.display_name or "-", str(found.version), render.when(found.created_at)]


def _limit(value: int | None) -> str:
    return "no limit" if value is None else str(value)


def _describe(found: TenantOut) -> str:
    return render.fields(
        [
            ("tenant", found.id),
            ("display name", found.display_name or "-"),
            ("version", str(found.version)),
            ("max schedules", _limit(found.quotas.max_schedules)),
            ("max creates per minute", _limit(found.quotas.max_creates_per_minute)),
            ("created at", render.when(found.created_at)),
            ("updated at", render.when(found.updated_at)),
        ]
    )


def _key_row(found: TenantKeyOut) -> list[str]:
    return [
        str(found.id),
        found.name,
        found.role.value,
        found.prefix,
        render.when(found.expires_at),
        render.when(found.revoked_at),
        render.when(found.last_used_at),
    ]


def _list(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        found, more = await collect(args, operator.tenants)
        text = render.table(
            ("TENANT", "DISPLAY NAME", "VERSION", "CREATED"), [_tenant_row(t) for t in found]
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


def _set(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        quotas = Quotas(args.max_schedules, args.max_creates_per_minute)
        spec = TenantSpec(display_name=args.display_name, quotas=quotas)
        found, created = await operator.put_tenant(args.tenant_id, spec)
        verb = "created" if created else "replaced"
        headline = f"{verb} tenant {found.id} (version {found.version})"
        return Output(found.model_dump(mode="json"), f"{headline}\n\n{_describe(found)}")

    return execute(args, work, _OPTIONS)


def _delete(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        await operator.delete_tenant(args.tenant_id)
        return Output(
            {"deleted": args.tenant_id},
            f"deleted tenant {args.tenant_id}, with its ended schedules, flow keys and keys",
        )

    return execute(args, work)


def _key_create(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        made: MadeKey = await operator.make_tenant_key(
            args.tenant_id, args.name, KeyRole(args.role), args.expires_at
        )
        text = (
            f"made {made.role.value} key {made.name} of tenant {made.tenant} (id {made.id})\n\n"
            f"{made.key}\n\n"
            "Store it now: it is shown this once."
        )
        return Output(made.model_dump(mode="json"), text)

    return execute(args, work, _OPTIONS)


def _key_list(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        async def page(limit: int, cursor: str | None) -> Page[TenantKeyOut]:
            return await operator.tenant_keys(args.tenant_id, limit, cursor)

        found, more = await collect(args, page)
        text = render.table(
            ("ID", "NAME", "ROLE", "PREFIX", "EXPIRES", "REVOKED", "LAST USED"),
            [_key_row(k) for k in found],
        )
        if more:
            text += f"\n\n(the first {len(found)} keys; more exist: raise --limit or --all)"
        return Output([k.model_dump(mode="json") for k in found], text)

    return execute(args, work)


def _key_revoke(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Output:
        await operator.revoke_tenant_key(args.tenant_id, args.key_id)
        return Output(
            {"revoked": str(args.key_id)},
            f"revoked key {args.key_id} of tenant {args.tenant_id}: every replica refuses it "
            "within 5 seconds",
        )

    return execute(args, work)


def _add_tenant(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "tenant_id", type=tenant_arg, metavar="TENANT", help=f"the tenant's id ({TENANT_ALPHABET})"
    )


def add_tenant_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: Parser
) -> None:
    """Register tenant list|show|set|delete and tenant key create|list|revoke."""
    group = commands.add_parser("tenant", help="tenants and their keys")
    names = ["list", "show", "set", "delete", "key"]
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
    _add_tenant(show)
    show.set_defaults(run=_show)
    put = sub.add_parser("set", parents=[common], help="create or replace a tenant, like PUT")
    _add_tenant(put)
    put.add_argument("--display-name", type=_display_name, default=None, metavar="TEXT")
    put.add_argument(
        "--max-schedules", type=_quota, default=None, metavar="N", help="live schedules"
    )
    put.add_argument(
        "--max-creates-per-minute",
        type=_quota,
        default=None,
        metavar="N",
        help="creates a minute (a batch counts its items)",
    )
    put.set_defaults(run=_set)
    delete = sub.add_parser(
        "delete",
        parents=[common],
        help="remove a tenant with its ended schedules, flow keys and keys (refused while "
        "one of its schedules is pending or paused)",
    )
    _add_tenant(delete)
    delete.set_defaults(run=_delete)

    key = sub.add_parser("key", help="a tenant's keys")
    key_sub = key.add_subparsers(
        dest="tenant_key_command",
        metavar="{create,list,revoke}",
        required=True,
        parser_class=Parser,
    )
    create = key_sub.add_parser(
        "create", parents=[common], help="make a key that acts in the tenant only (shown once)"
    )
    _add_tenant(create)
    create.add_argument("name", type=_key_name, metavar="NAME", help=KEY_NAME_ALPHABET)
    create.add_argument("--role", choices=["write", "read"], default="write")
    create.add_argument(
        "--expires-at", type=_instant, default=None, metavar="INSTANT", help="RFC 3339"
    )
    create.set_defaults(run=_key_create)
    keys = key_sub.add_parser("list", parents=[common], help="the tenant's keys, never secrets")
    _add_tenant(keys)
    add_limit(keys, 50, "keys")
    keys.set_defaults(run=_key_list)
    revoke = key_sub.add_parser("revoke", parents=[common], help="revoke a key by its id")
    _add_tenant(revoke)
    revoke.add_argument("key_id", type=uuid.UUID, metavar="ID")
    revoke.set_defaults(run=_key_revoke)
