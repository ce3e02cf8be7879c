"""`chronoq tenant key create|list|revoke`: a tenant's keys from the operator CLI, through
the same services as /v1/tenants/{tenant}/keys (DESIGN.md section 14).

Same conventions as the other operator commands (app/cli/operator/commands.py). `create`
prints the key itself once: it is stored as its digest, and nothing shows it again. A
revocation holds on every replica within 5 seconds.
"""

from __future__ import annotations

import argparse
import uuid
from datetime import datetime

from app.api.schemas import Page
from app.api.tenant_schemas import MadeKey, TenantKeyOut
from app.cli.operator import text as render
from app.cli.operator.backends import Operator
from app.cli.operator.run import Output, Parser, add_limit, add_tenant_id, collect, execute
from app.domain.tenant_keys import KEY_NAME_ALPHABET, KEY_NAME_PATTERN, KeyRole

# Where a refusal points at a field of the body, the option that gave it.
_OPTIONS = {"#/name": "NAME", "#/expires_at": "--expires-at"}


def _key_name(text: str) -> str:
    if not KEY_NAME_PATTERN.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a key name ({KEY_NAME_ALPHABET})")
    return text


def _instant(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an RFC 3339 instant") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} names no offset (add Z or +HH:MM)")
    return value


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


def add_tenant_key_commands(sub: argparse._SubParsersAction[Parser], common: Parser) -> None:
    """Register tenant key create|list|revoke under `sub`, the tenant command's
    subcommands."""
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
    add_tenant_id(create)
    create.add_argument("name", type=_key_name, metavar="NAME", help=KEY_NAME_ALPHABET)
    create.add_argument("--role", choices=["write", "read"], default="write")
    create.add_argument(
        "--expires-at", type=_instant, default=None, metavar="INSTANT", help="RFC 3339"
    )
    create.set_defaults(run=_key_create)
    keys = key_sub.add_parser("list", parents=[common], help="the tenant's keys, never secrets")
    add_tenant_id(keys)
    add_limit(keys, 50, "keys")
    keys.set_defaults(run=_key_list)
    revoke = key_sub.add_parser("revoke", parents=[common], help="revoke a key by its id")
    add_tenant_id(revoke)
    revoke.add_argument("key_id", type=uuid.UUID, metavar="ID")
    revoke.set_defaults(run=_key_revoke)
