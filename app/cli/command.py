"""The `chronoq` command: serve, migrate, schema DDL, openapi, broker tools, and a receiver to
try it."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path

from app.cli.operator.commands import add_operator_commands
from app.cli.serve import serve as serve_command
from app.process.databases import open_database
from app.settings import SettingsError, load_settings
from app.settings.errors import UsageError
from app.store import dialects
from app.store.engine.database import describe_failure, redact_url
from app.telemetry import logs


def _migrate(args: argparse.Namespace) -> int:
    from app.store.engine.migrations import upgrade_sql, upgrade_to_head

    settings = load_settings()
    where = redact_url(settings.database_url)
    if settings.db_schema is not None:
        where += f" (schema {settings.db_schema})"
    if args.sql:
        if dialects.for_url(settings.database_url).batch_migrations:
            raise UsageError(
                "migrate --sql is for the database servers: SQLite migrations rebuild tables "
                "from the live database; for a new SQLite database use "
                "`chronoq schema --dialect sqlite`"
            )
        try:
            sys.stdout.write(upgrade_sql(settings.database_url, settings.db_schema))
        except Exception as exc:
            print(f"chronoq: cannot render the migrations: {_brief(exc)}", file=sys.stderr)
            return 1
        return 0

    async def run() -> None:
        database = open_database(settings, "command")
        try:
            await upgrade_to_head(database)
        finally:
            await database.close()

    try:
        asyncio.run(run())
    except OSError as exc:
        print(
            f"chronoq: cannot reach {where}: {describe_failure(exc, settings.database_url)}",
            file=sys.stderr,
        )
        return 1
    except Exception as exc:
        print(
            f"chronoq: migration failed on {where}: {describe_failure(exc, settings.database_url)}",
            file=sys.stderr,
        )
        return 1
    print(f"schema at head on {where}")
    return 0


def _schema(args: argparse.Namespace) -> int:
    from app.settings import schema_name_problem
    from app.store.engine.ddl import schema_ddl

    if args.db_schema is not None:
        if not dialects.named(args.dialect).backend.schemas:
            raise UsageError("--db-schema is for PostgreSQL only")
        problem = schema_name_problem(args.db_schema)
        if problem:
            raise UsageError(f"--db-schema {problem}")
    sys.stdout.write(schema_ddl(args.dialect, args.db_schema))
    return 0


def _openapi(args: argparse.Namespace) -> int:
    from app.main import create_app

    text = json.dumps(create_app().openapi(), indent=2, sort_keys=True) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
    return 0


def _receiver(args: argparse.Namespace) -> int:
    """A local webhook receiver that prints each delivery, one timestamped line each (to the
    millisecond, so that a rate limit or a retry's backoff shows): for trying Chronoq out."""
    from aiohttp import web

    from app.cli.operator.text import printable

    failing = set(args.fail)
    # Bound here, not by the server: a port in use is one line, before anything is printed.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # As a server binds: a port left in TIME_WAIT is free, one listened on is not.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", args.port))
    except OSError as exc:
        sock.close()
        raise UsageError(
            f"cannot receive on port {args.port} of 127.0.0.1: {exc.strerror or exc}; "
            "choose another with --port"
        ) from None

    def say(text: str) -> None:
        at = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        print(f"{at} {printable(text)}", flush=True)

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        status = 503 if request.path in failing else 200
        say(
            f"{request.method} {request.path} -> {status}"
            f" occurrence={request.headers.get('X-Occurrence-Id')}"
            f" attempt={request.headers.get('X-Attempt')}"
            f" event={request.headers.get('X-Event-Type')} body={body.decode(errors='replace')}"
        )
        return web.Response(status=status)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    say(
        f"receiving on http://127.0.0.1:{sock.getsockname()[1]}/"
        f" (failing: {', '.join(sorted(failing)) or 'none'})"
    )
    web.run_app(app, sock=sock, print=None)
    return 0


def _amqp_url(args: argparse.Namespace) -> str:
    logs.configure("WARNING")  # the client library's reconnect noise stays out of the output
    url: str | None = args.url or os.environ.get("AMQP_URL")
    if not url:
        raise UsageError("no broker: set AMQP_URL or pass --url")
    if not url.startswith(("amqp://", "amqps://")):
        raise UsageError("the broker URL must start with amqp:// or amqps://")
    return url


def _bus_declare(args: argparse.Namespace) -> int:
    from app.sinks.topology import TopologyError, declare, describe_broker, load_topology

    url = _amqp_url(args)
    try:
        text = Path(args.topology).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {args.topology}: {exc.strerror}") from None
    try:
        topology = load_topology(text)
    except TopologyError as exc:
        raise UsageError(f"{args.topology}: {exc}") from None
    try:
        done = asyncio.run(declare(url, topology))
    except Exception as exc:
        print(f"chronoq: {describe_broker(url)}: {_brief(exc)}", file=sys.stderr)
        return 1
    print(
        f"declared {done.exchanges} exchange(s), {done.queues} queue(s), "
        f"{done.bindings} binding(s) on {describe_broker(url)}"
    )
    return 0


def _bus_peek(args: argparse.Namespace) -> int:
    from app.cli.operator.text import printable
    from app.sinks.topology import describe_broker, peek

    url = _amqp_url(args)
    if args.count < 1:
        raise UsageError("--count must be at least 1")
    try:
        messages = asyncio.run(peek(url, args.queue, args.count, raw=args.raw))
    except Exception as exc:
        print(f"chronoq: {describe_broker(url)}: {_brief(exc)}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(json.dumps([m.__dict__ for m in messages], indent=2, default=str))
        return 0
    # What publishers wrote reaches the terminal with its control characters escaped.
    print(printable(f"{len(messages)} message(s) in {args.queue}, left in place"))
    for m in messages:
        more = f" (first {len(m.body.encode())} of {m.size} bytes)" if m.truncated else ""
        print(
            printable(
                f"- id={m.message_id} type={m.type} routing_key={m.routing_key} size={m.size}"
            )
        )
        print(printable(f"  headers={json.dumps(m.headers, default=str)}"))
        print(printable(f"  body{more}: {m.body}"))
    return 0


def _brief(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# A command whose reader went away exits as one killed by SIGPIPE would (128 + 13): a
# pipeline under `set -o pipefail` can tell its output was cut short.
BROKEN_PIPE_EXIT = 141


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("chronoq")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chronoq", description="Durable message scheduler.")
    parser.add_argument("--version", action="version", version=f"chronoq {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the HTTP API and the delivery loop")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    serve.add_argument("--no-worker", action="store_true", help="API only: no delivery loop")
    serve.add_argument(
        "--processes",
        type=int,
        default=1,
        metavar="N",
        help="run N replica processes on this port (PostgreSQL, MySQL/MariaDB), one per core",
    )
    serve.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="log one line per request (default: CHRONOQ_ACCESS_LOG, which is true)",
    )
    serve.add_argument(
        "--timeout-keep-alive",
        type=int,
        default=5,
        metavar="SECONDS",
        help="close an idle keep-alive connection after this long",
    )
    serve.set_defaults(run=serve_command)

    migrate = commands.add_parser("migrate", help="upgrade the database schema to head")
    migrate.add_argument(
        "--sql",
        action="store_true",
        help="print the SQL from an empty database to head instead of applying it "
        "(PostgreSQL; only DATABASE_URL's dialect is used, no connection is made)",
    )
    migrate.set_defaults(run=_migrate)

    schema = commands.add_parser(
        "schema", help="print the DDL of the current schema (no database needed)"
    )
    schema.add_argument("--dialect", required=True, choices=list(dialects.NAMES))
    schema.add_argument(
        "--db-schema", metavar="NAME", help="PostgreSQL schema to create and qualify names with"
    )
    schema.set_defaults(run=_schema)

    receiver = commands.add_parser("receiver", help="print webhook deliveries (for trying out)")
    receiver.add_argument("--port", type=int, default=9000)
    receiver.add_argument(
        "--fail", action="append", default=[], metavar="PATH", help="answer 503 on this path"
    )
    receiver.set_defaults(run=_receiver)

    bus = commands.add_parser("bus", help="RabbitMQ operator tools")
    bus_commands = bus.add_subparsers(dest="bus_command", required=True)
    declare = bus_commands.add_parser("declare", help="declare exchanges, queues and bindings")
    declare.add_argument("--topology", required=True, metavar="FILE", help="TOML topology file")
    declare.add_argument("--url", help="broker URL (default: AMQP_URL)")
    declare.set_defaults(run=_bus_declare)
    peek = bus_commands.add_parser("peek", help="show messages of a queue and leave them there")
    peek.add_argument("--queue", required=True)
    peek.add_argument("--count", type=int, default=10)
    peek.add_argument("--raw", action="store_true", help="whole bodies, not a 1 KiB preview")
    peek.add_argument("--format", choices=["text", "json"], default="text")
    peek.add_argument("--url", help="broker URL (default: AMQP_URL)")
    peek.set_defaults(run=_bus_peek)

    openapi = commands.add_parser("openapi", help="write the OpenAPI document")
    openapi.add_argument("--output", default="openapi/openapi.json")
    openapi.set_defaults(run=_openapi)

    add_operator_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
        # Flushed here rather than at exit, where a failure could no longer be handled.
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader has what it wanted (`chronoq list | head -1`): no traceback. Standard
        # output now goes nowhere, so the interpreter's last flush has nothing to fail on.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return BROKEN_PIPE_EXIT
    except (SettingsError, UsageError) as exc:
        print(f"chronoq: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
