"""Which server of a multi-host PostgreSQL URL a new connection goes to, and how long each
may take: the hosts are tried one at a time, each within its own timeout (libpq's
`connect_timeout` is per host too), the one that last gave a usable connection first.

asyncpg's own multi-host connect spends one timeout on all the hosts together, in the URL's
order: a first host that never answers (its machine gone, its packets dropped) used it all,
so no connection ever reached the promoted standby behind it.
"""

from __future__ import annotations

from typing import Any

import asyncpg

# Errors after which the next host is tried, as asyncpg and libpq do: no connection at all
# (refused, reset, no answer in time), a server starting or shutting down, or one that does
# not have the attributes asked for (`target_session_attrs`: a standby, when writes are).
_NEXT_HOST_ERRORS = (
    OSError,
    asyncpg.TargetServerAttributeNotMatched,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.ConnectionDoesNotExistError,
)


def addresses(host: Any, port: Any) -> list[tuple[Any, Any]]:
    """The (host, port) pairs asyncpg's connect arguments name, in their order."""
    hosts = host if isinstance(host, list | tuple) else [host]
    ports = port if isinstance(port, list | tuple) else [port] * len(hosts)
    if len(ports) == 1 and len(hosts) > 1:
        ports = list(ports) * len(hosts)
    return list(zip(hosts, ports, strict=True))


class HostChooser:
    """Connects to one host of the list at a time, each within `timeout`. One per engine
    (and per LISTEN connection): it remembers which host last accepted."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout  # seconds, for each host
        self._last: tuple[Any, Any] | None = None

    def order(self, host: Any, port: Any) -> list[tuple[Any, Any]]:
        found = addresses(host, port)
        if self._last in found:
            found.remove(self._last)
            found.insert(0, self._last)
        return found

    async def connect(
        self, *args: Any, host: Any = None, port: Any = None, **kwargs: Any
    ) -> asyncpg.Connection:
        """`asyncpg.connect`, with the timeout for each host rather than for all of them
        (the URL's own `timeout`, where it names one)."""
        timeout = float(kwargs.pop("timeout", self.timeout))
        if not isinstance(host, list | tuple) or len(host) < 2:
            return await asyncpg.connect(*args, host=host, port=port, timeout=timeout, **kwargs)
        failures: list[BaseException] = []
        for address in self.order(host, port):
            try:
                conn = await asyncpg.connect(
                    *args, host=address[0], port=address[1], timeout=timeout, **kwargs
                )
            except _NEXT_HOST_ERRORS as exc:
                failures.append(exc)
                continue
            self._last = address
            return conn
        raise _telling(failures)


def _telling(failures: list[BaseException]) -> BaseException:
    """Of the hosts' failures, the one that says most: a server that is up but has as many
    connections as it allows (worth waiting for), then one that answered as a standby (a
    failover under way), then the last."""
    kinds: tuple[type[BaseException], ...] = (
        asyncpg.TooManyConnectionsError,
        asyncpg.TargetServerAttributeNotMatched,
    )
    for kind in kinds:
        for failure in failures:
            if isinstance(failure, kind):
                return failure
    return failures[-1]
