"""`chronoq serve`: the checks made before the port is bound, the API processes (uvicorn),
and the delivery processes beside them where the loop runs in its own (`app.process.delivery`).

Invariant: a configuration that must not be served is refused before anything binds or
starts; on SIGTERM the API stops taking requests first, then each delivery process drains,
and the process ends as SIGTERM ends it.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING

from app.process import startup
from app.process.databases import check_direct_url
from app.settings import Settings, load_settings
from app.settings.errors import UsageError
from app.store import dialects
from app.telemetry import logs, tracing

if TYPE_CHECKING:
    import uvicorn

    from app.process.delivery import DeliveryProcesses

log = logging.getLogger("app.cli.command")


def serve(args: argparse.Namespace) -> int:
    """`chronoq serve`: refuse what must not be served, then run uvicorn (and the delivery
    processes, where the loop runs in its own)."""
    import uvicorn

    from app.api.connections import GuardedHttpToolsProtocol, ensure_descriptors

    if args.no_worker:
        os.environ["CHRONOQ_WORKER_ENABLED"] = "false"
    if args.access_log is not None:
        os.environ["CHRONOQ_ACCESS_LOG"] = str(args.access_log).lower()
    settings = load_settings()  # refuse a bad configuration before binding the port
    tracing.check()  # traces asked for and not to be had (OpenTelemetry missing) too
    if args.processes < 1:
        raise UsageError("--processes must be at least 1")
    if args.processes > 1 and not dialects.for_url(settings.database_url).backend.multi_replica:
        raise UsageError(
            "--processes above 1 needs a database that several replicas can share "
            "(PostgreSQL or MySQL/MariaDB); SQLite serves one process"
        )
    if (problem := asyncio.run(check_direct_url(settings))) is not None:
        raise UsageError(problem)
    api_keys = settings.api_key_entries()
    if not api_keys and not is_loopback(args.host) and not settings.allow_unauthenticated:
        raise UsageError(
            f"refusing to serve on {args.host} with no API keys: set CHRONOQ_API_KEYS (or "
            "CHRONOQ_API_KEYS_FILE), or CHRONOQ_ALLOW_UNAUTHENTICATED=true to serve it open"
        )
    # Raised before uvicorn starts, so every replica process inherits it.
    if (lowered := ensure_descriptors(settings)) is not None:
        # The replica processes read their settings again: they learn it from here.
        os.environ["CHRONOQ_MAX_CONNECTIONS"] = str(lowered)
    # uvicorn's own lines go through the same handler, so a JSON log is JSON throughout.
    logs.configure(
        settings.log_level,
        settings.log_format,
        secrets=[k.key for k in api_keys],
        access_log=settings.access_log,
    )
    startup.warn_unknown()
    if lowered is not None:
        log.warning(
            "the open-files limit (ulimit -n) leaves room for %d client connections, not the "
            "default %d: serving with CHRONOQ_MAX_CONNECTIONS=%d",
            lowered,
            settings.max_connections,
            lowered,
        )
    if not api_keys:
        log.warning(
            "no API keys are set (CHRONOQ_API_KEYS): the API on %s:%s is open to anyone "
            "who can reach it",
            args.host,
            args.port,
        )
        if settings.allowed_hosts is None and not is_loopback(args.host):
            log.warning(
                "with no API keys only requests naming a loopback host (localhost, 127.x.x.x, "
                "::1) are answered: set CHRONOQ_ALLOWED_HOSTS to the names clients reach "
                "%s by, or * for any",
                args.host,
            )
    delivery = None
    if settings.separate_delivery():
        from app.process.delivery import STOP_MARGIN, DeliveryProcesses

        # The loop in processes of its own, one per API process; the API processes read
        # their health and metrics over these sockets, and run no loop.
        delivery = DeliveryProcesses(
            args.processes, stop_timeout=settings.dispatch_timeout + STOP_MARGIN
        )
        os.environ["CHRONOQ_DELIVERY_SOCKETS"] = ",".join(delivery.sockets)
    # uvicorn's settings, and the port bound before anything slower is done.
    config = uvicorn.Config(
        "app.main:app",
        host=args.host,
        port=args.port,
        # Logging is Chronoq's (app.telemetry.logs): uvicorn configures none, and its access log is
        # replaced by the app's own (app.api.access_log).
        log_config=None,
        access_log=False,
        use_colors=False,
        lifespan="on",
        # The connection cap and the request-head timeout (app.api.connections); replica
        # processes import the class by its path.
        http=GuardedHttpToolsProtocol,
        timeout_keep_alive=args.timeout_keep_alive,
        # The app reads X-Forwarded-Host and -Proto itself, from the peers
        # CHRONOQ_FORWARDED_ALLOW_IPS names (app.api.hosts): uvicorn's own reading would put
        # the client's address where the app looks for the proxy's.
        proxy_headers=False,
        # Each process is a replica of its own (its API, its loop or its delivery process,
        # its pools), sharing only the port and the database; the parent restarts one that
        # dies.
        workers=args.processes,
    )
    return run(config, settings, delivery)


def run(config: uvicorn.Config, settings: Settings, delivery: DeliveryProcesses | None) -> int:
    """Bind the port, wait for the database and migrate it, then serve until stopped."""
    try:
        sock = startup.bind(config.host, config.port)
    except startup.StartupError as exc:
        return _failed(exc)
    try:
        return _serve_on(sock, config, settings, delivery)
    finally:
        sock.close()


def _failed(exc: Exception) -> int:
    sys.stderr.write(f"chronoq: {exc}\n")
    return 1


def _serve_on(
    sock: socket.socket,
    config: uvicorn.Config,
    settings: Settings,
    delivery: DeliveryProcesses | None,
) -> int:
    """Wait for the database and migrate it, then serve on `sock` until stopped."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    try:
        asyncio.run(startup.wait_for_database(settings, settings.database_wait))
        if settings.auto_migrate:
            asyncio.run(startup.migrate(settings))
            # Migrated once here: the processes find it at head and need not take the lock.
            os.environ["CHRONOQ_AUTO_MIGRATE"] = "false"
    except startup.StartupError as exc:
        return _failed(exc)
    server = uvicorn.Server(config)
    terminated = _terminate_by_exception()
    try:
        if delivery is not None:
            delivery.start()
        log.info("serving on %s:%d", config.host, sock.getsockname()[1])
        if config.workers > 1:
            Multiprocess(config, sockets=[sock]).run()
        else:
            config.load_app()
            server.run(sockets=[sock])
    except _SigtermError:
        pass
    finally:
        # After the API has stopped taking requests: each delivery process drains.
        if delivery is not None:
            delivery.stop()
        signal.signal(signal.SIGTERM, terminated)
    if _SigtermError.seen:
        # Ended as a SIGTERM ends a process, as it would have without delivery processes.
        signal.raise_signal(signal.SIGTERM)
    if config.workers == 1 and not server.started:
        return 1  # the app's start failed; its lifespan said why
    return 0


class _SigtermError(Exception):
    seen = False


def _terminate_by_exception() -> signal._HANDLER:
    """Make SIGTERM raise `_SigtermError` in the main thread (uvicorn, on its graceful way
    out, raises the signal again under the handler it found), so that `serve` stops its
    delivery processes before it ends; returns the handler it replaced."""

    def terminated(signum: int, frame: object) -> None:
        _SigtermError.seen = True
        raise _SigtermError

    return signal.signal(signal.SIGTERM, terminated)


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (127.0.0.0/8, ::1) or `localhost`."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
