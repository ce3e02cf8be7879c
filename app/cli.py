"""The `chronoq` command: serve, migrate, openapi, and a receiver for trying it out."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

from app.settings import SettingsError, load_settings
from app.store.database import Database, redact_url


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    if args.no_worker:
        os.environ["CHRONOQ_WORKER_ENABLED"] = "false"
    load_settings()  # refuse a bad configuration before binding the port
    uvicorn.run(
        "app.main:app",
        host=args.host,
        port=args.port,
        log_level="info",
        access_log=args.access_log,
        lifespan="on",
    )
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from app.store.migrations import upgrade_to_head

    settings = load_settings()

    async def run() -> None:
        database = Database(settings.database_url)
        try:
            await upgrade_to_head(database)
        finally:
            await database.close()

    try:
        asyncio.run(run())
    except OSError as exc:
        print(f"chronoq: cannot reach {redact_url(settings.database_url)}: {exc}", file=sys.stderr)
        return 1
    print(f"schema at head on {redact_url(settings.database_url)}")
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
    """A local webhook receiver that prints each delivery: for trying Chronoq out."""
    from aiohttp import web

    failing = set(args.fail)

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        status = 503 if request.path in failing else 200
        print(
            f"{request.method} {request.path} -> {status}"
            f" occurrence={request.headers.get('X-Occurrence-Id')}"
            f" attempt={request.headers.get('X-Attempt')}"
            f" event={request.headers.get('X-Event-Type')} body={body.decode(errors='replace')}",
            flush=True,
        )
        return web.Response(status=status)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    print(f"receiving on http://127.0.0.1:{args.port}/ (failing: {sorted(failing) or 'none'})")
    web.run_app(app, host="127.0.0.1", port=args.port, print=None)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chronoq", description="Durable message scheduler.")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the HTTP API and the delivery loop")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    serve.add_argument("--no-worker", action="store_true", help="API only: no delivery loop")
    serve.add_argument("--access-log", action="store_true")
    serve.set_defaults(run=_serve)

    migrate = commands.add_parser("migrate", help="upgrade the database schema to head")
    migrate.set_defaults(run=_migrate)

    receiver = commands.add_parser("receiver", help="print webhook deliveries (for trying out)")
    receiver.add_argument("--port", type=int, default=9000)
    receiver.add_argument(
        "--fail", action="append", default=[], metavar="PATH", help="answer 503 on this path"
    )
    receiver.set_defaults(run=_receiver)

    openapi = commands.add_parser("openapi", help="write the OpenAPI document")
    openapi.add_argument("--output", default="openapi/openapi.json")
    openapi.set_defaults(run=_openapi)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except SettingsError as exc:
        print(f"chronoq: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
