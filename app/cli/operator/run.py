"""How an operator command runs (app/cli/operator/commands.py lists the commands): its common
options, its argument types, what it runs against (a service over HTTP, or the database:
app/cli/operator/backends.py), and how its output or its one-line error is printed.

Exit codes: 0 done, 1 the database or the service refused (unreachable, unknown id, a
conflict, a key without the role), 2 the command line is wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit, urlunsplit

from app.api.schemas import Page
from app.cli.operator import text as render
from app.cli.operator.backends import Operator
from app.cli.operator.database_backend import DatabaseOperator
from app.cli.operator.http_backend import HttpOperator, domain_error
from app.client import (
    AsyncClient,
    ChronoqClientError,
    ProblemError,
    UnauthorizedError,
    UnreachableError,
)
from app.domain.errors import ChronoqError, InvalidInputError, NotFoundError
from app.domain.flow import KEY_ALPHABET, check_key
from app.domain.tenants import DEFAULT_TENANT, TENANT_ALPHABET, TENANT_PATTERN
from app.process.databases import open_database
from app.service.activity import ActivityService
from app.service.dead_letters import DeadLetterService
from app.service.endpoints import EndpointService
from app.service.flow_keys import FlowKeyService
from app.service.occurrences import OccurrenceService
from app.service.schedules import ScheduleService
from app.service.tenant_keys import TenantKeyService
from app.service.tenants import TenantService
from app.service.topics import TopicService
from app.settings import load_settings
from app.settings.errors import UsageError
from app.store.engine.database import describe_failure, missing_database, redact_url

T = TypeVar("T")

MAX_LIMIT = 500  # the HTTP API's largest page


class Parser(argparse.ArgumentParser):
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


def uuid_arg(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a UUID") from None


def instant_arg(text: str) -> datetime:
    """An ISO 8601 instant with its offset (Z for UTC): a naive one names no instant."""
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 instant") from None
    if at.utcoffset() is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no offset (add Z for UTC)")
    return at


def label_arg(text: str) -> tuple[str, str]:
    key, sep, value = text.partition(":")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not key:value")
    return key, value


def flow_key_arg(text: str) -> str:
    """A flow key as schedules name it."""
    try:
        return check_key(text)
    except InvalidInputError:
        shown = f"a key of {len(text)} characters" if len(text) > 40 else repr(text)
        raise argparse.ArgumentTypeError(f"{shown} is not a flow key ({KEY_ALPHABET})") from None


def limit_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_LIMIT}")
    return value


# -- what a command runs against ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Output:
    document: Any  # what --format json prints
    text: str  # what --format text prints


Work = Callable[[Operator], Awaitable[Output]]


def _shown_url(url: str) -> str:
    """A service URL without its userinfo."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", "")).rstrip("/")


def _api_key(args: argparse.Namespace) -> str | None:
    if args.api_key_file is None:
        return os.environ.get("CHRONOQ_API_KEY") or None
    try:
        key = Path(args.api_key_file).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(
            f"cannot read --api-key-file {args.api_key_file}: {exc.strerror}"
        ) from None
    if not key:
        raise UsageError(f"--api-key-file {args.api_key_file} is empty")
    return key


def _service_url(args: argparse.Namespace) -> str | None:
    url: str | None = args.url or os.environ.get("CHRONOQ_URL") or None
    if args.url and args.conn:
        raise UsageError("give --url (a running service) or --conn (its database), not both")
    if args.conn or url is None:
        if args.api_key_file is not None:
            raise UsageError("--api-key-file is for --url: the database takes no API key")
        return None
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
        raise UsageError(f"--url must be an http:// or https:// URL, not {url!r}")
    return url


def tenant_arg(value: str) -> str:
    if not TENANT_PATTERN.fullmatch(value):
        raise argparse.ArgumentTypeError(f"a tenant id is {TENANT_ALPHABET}, not {value!r}")
    return value


def add_tenant_id(parser: argparse.ArgumentParser) -> None:
    """The TENANT argument of a command that manages a tenant (rather than acts in one)."""
    parser.add_argument(
        "tenant_id", type=tenant_arg, metavar="TENANT", help=f"the tenant's id ({TENANT_ALPHABET})"
    )


def acting_tenant(args: argparse.Namespace) -> str | None:
    """The tenant a command acts in: --tenant, else CHRONOQ_TENANT (None: the service's
    default for the key)."""
    named: str | None = args.tenant or os.environ.get("CHRONOQ_TENANT") or None
    if named is not None and not TENANT_PATTERN.fullmatch(named):
        raise UsageError(f"CHRONOQ_TENANT: a tenant id is {TENANT_ALPHABET}, not {named!r}")
    return named


@asynccontextmanager
async def _over_http(url: str, key: str | None, tenant: str | None) -> AsyncIterator[Operator]:
    async with AsyncClient(url, api_key=key, tenant=tenant) as client:
        yield HttpOperator(_shown_url(url), client)


@asynccontextmanager
async def _on_the_database(args: argparse.Namespace) -> AsyncIterator[Operator]:
    # A SettingsError reaches `chronoq`'s main, which makes it a usage error (exit 2).
    settings = load_settings(database_url=args.conn) if args.conn else load_settings()
    where = redact_url(settings.database_url)
    if settings.db_schema is not None:
        where += f" (schema {settings.db_schema})"
    # A file that does not exist: opening it would create an empty database, and the
    # command would then fail with a puzzling "no such table".
    missing = missing_database(settings.database_url)
    if missing is not None:
        raise _unreachable(where, missing)
    # Only a Database and the services: no migration, no delivery loop.
    database = open_database(settings, "command")
    try:
        yield DatabaseOperator(
            where,
            ScheduleService(database, settings),
            DeadLetterService(database),
            OccurrenceService(database),
            FlowKeyService(database),
            tenant=acting_tenant(args) or DEFAULT_TENANT,
            tenants_=TenantService(database),
            tenant_keys_=TenantKeyService(database),
            endpoints_=EndpointService(database, settings),
            topics_=TopicService(database),
            activity_=ActivityService(database),
        )
    except OSError as exc:  # refused, unknown host, timed out: raised by the driver as is
        raise _unreachable(where, describe_failure(exc, settings.database_url)) from None
    except ChronoqError:
        raise
    except Exception as exc:
        raise _FailedError(f"{where}: {describe_failure(exc, settings.database_url)}") from None
    finally:
        await database.close()


class _FailedError(Exception):
    """A failure said in one line."""


def _unreachable(where: str, why: str) -> _FailedError:
    return _FailedError(f"cannot reach {where}: {why}")


async def _run(args: argparse.Namespace, work: Work) -> Output:
    url = _service_url(args)
    if url is None:
        async with _on_the_database(args) as operator:
            return await _named(operator, work)
    key = _api_key(args)
    async with _over_http(url, key, acting_tenant(args)) as operator:
        try:
            return await _named(operator, work)
        except UnauthorizedError as refused:
            raise _FailedError(_unauthorized(operator.where, args, key, refused)) from None
        except ProblemError as problem:
            raise domain_error(problem) from None
        except UnreachableError as exc:
            raise _unreachable(operator.where, _cause(exc)) from None
        except ChronoqClientError as exc:  # an answer that is not the API's
            raise _FailedError(str(exc)) from None


def _unauthorized(
    where: str, args: argparse.Namespace, key: str | None, refused: UnauthorizedError
) -> str:
    """A 401 said in the command's own terms: which setting gives the key."""
    if key is None:
        return (
            f"{where} asks for an API key (401): set CHRONOQ_API_KEY, or pass --api-key-file FILE"
        )
    given = (
        "CHRONOQ_API_KEY" if args.api_key_file is None else f"--api-key-file {args.api_key_file}"
    )
    return (
        f"{where} refused the API key of {given} (401: {refused.detail}); give the right "
        "one with CHRONOQ_API_KEY or --api-key-file FILE"
    )


async def _named(operator: Operator, work: Work) -> Output:
    try:
        return await work(operator)
    except NotFoundError as exc:
        raise NotFoundError(f"{exc.detail} in {operator.where}") from None


def _cause(exc: UnreachableError) -> str:
    cause = exc.__cause__
    text = str(cause).strip() if cause is not None else ""
    return text or type(cause).__name__


def execute(args: argparse.Namespace, work: Work, options: dict[str, str] | None = None) -> int:
    """Run `work` against the service or the database; print its output or one line.
    `options`: the option that gave each field of a body (a JSON pointer), for a refusal
    that names the field."""
    try:
        output = asyncio.run(_run(args, work))
    except InvalidInputError as exc:
        option = (options or {}).get(exc.pointer or "")
        detail = exc.detail if option is None else f"argument {option}: {exc.detail}"
        print(f"chronoq: {render.printable(detail)}", file=sys.stderr)
        return 2
    except ChronoqError as exc:
        return _fail(exc.detail)
    except _FailedError as exc:
        return _fail(str(exc))
    if args.format == "json":
        print(json.dumps(output.document, indent=2))  # ASCII: every control is escaped
    else:
        print(render.terminal(output.text))
    return 0


def _fail(message: str) -> int:
    print(f"chronoq: {render.printable(message)}", file=sys.stderr)
    return 1


async def collect(
    args: argparse.Namespace, fetch: Callable[[int, str | None], Awaitable[Page[T]]]
) -> tuple[list[T], bool]:
    """What a list shows: every item, page after page, with --all; else the first --limit.
    And whether more exist than are shown."""
    if not getattr(args, "all", False):
        page = await fetch(args.limit, None)
        return page.items, page.next_cursor is not None
    items: list[T] = []
    cursor: str | None = None
    while True:
        page = await fetch(MAX_LIMIT, cursor)
        items += page.items
        if page.next_cursor is None:
            return items, False
        cursor = page.next_cursor


# -- options every command has -----------------------------------------------------------


def common_options() -> Parser:
    common = Parser(add_help=False)
    common.add_argument(
        "--url",
        metavar="URL",
        help="the running service to ask (default: CHRONOQ_URL), with the API key of "
        "CHRONOQ_API_KEY or --api-key-file",
    )
    common.add_argument(
        "--api-key-file",
        metavar="FILE",
        help="read the API key for --url from FILE (default: CHRONOQ_API_KEY)",
    )
    common.add_argument(
        "--tenant",
        metavar="ID",
        type=tenant_arg,
        default=None,
        help="the tenant to act in (default: CHRONOQ_TENANT, or default)",
    )
    common.add_argument(
        "--conn",
        metavar="URL",
        help="break-glass: work on this database directly, bypassing API keys (default "
        "when no service URL is set: DATABASE_URL); the schema is not migrated",
    )
    common.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="text: aligned columns; json: one document, as the HTTP API returns it",
    )
    return common


def add_limit(parser: argparse.ArgumentParser, default: int, what: str) -> None:
    """--limit N, or --all: every page."""
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument(
        "--limit",
        type=limit_arg,
        default=default,
        metavar="N",
        help=f"at most N {what} (1 to {MAX_LIMIT}; default {default})",
    )
    choice.add_argument("--all", action="store_true", help=f"all the {what.split(',')[0]}")


def add_id(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("id", type=uuid_arg, metavar="ID", help=what)
