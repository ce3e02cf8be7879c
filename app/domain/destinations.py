"""Destinations: the receivers that share a replica's delivery slots (DESIGN section 14).

A destination is where an attempt waits for its answer: a webhook's origin (scheme, host
and port, as a client connects to it) or a RabbitMQ exchange. Isolation is per
destination: one that answers slowly or not at all holds at most its share of a
replica's slots while others have work (`app.worker.lanes`), and its rows are left in the
store while it holds that share (the claim's `skip`). The name is stored with each
schedule (`schedules.destination`), so that the claim can pass over a destination's rows
without reading their targets.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from app.domain.target import RabbitMQTarget, Target

# The longest name: a scheme, a host name of at most 253 bytes, a port; or an exchange of
# at most 255 bytes behind its prefix.
MAX_DESTINATION = 300
_DEFAULT_PORTS = {"http": 80, "https": 443}


def destination_of(target: Target) -> str:
    """The destination `target` delivers to: `http://host:port` for a webhook (lower case,
    the port always given), `amqp:<exchange>` for a RabbitMQ publish."""
    if isinstance(target, RabbitMQTarget):
        return f"amqp:{target.exchange}"[:MAX_DESTINATION]
    return webhook_destination(target.url)


def webhook_destination(url: str) -> str:
    """The origin of a webhook URL as a destination; a URL that does not split (never one
    the API accepted) is its own destination, cut to the column's length."""
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        host = (parts.hostname or "").lower()
        port = parts.port or _DEFAULT_PORTS.get(scheme, 0)
    except ValueError:
        return url[:MAX_DESTINATION]
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"[:MAX_DESTINATION]
