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

import re
from functools import lru_cache

from app.domain.target import (
    EndpointTarget,
    EndpointWebhook,
    RabbitMQTarget,
    Target,
    TopicTarget,
)

# The longest name: a scheme, a host name of at most 253 bytes, a port; or an exchange of
# at most 255 bytes behind its prefix.
MAX_DESTINATION = 300
# A URL's authority: what follows `scheme://` up to the path, the query or the fragment.
_AUTHORITY = re.compile(r"[^/?#]*")


def destination_of(target: Target | EndpointWebhook) -> str:
    """The destination `target` delivers to: a webhook's origin (`webhook_destination`),
    `amqp:<exchange>` for a RabbitMQ publish, `endpoint:<id>` for an endpoint's."""
    if isinstance(target, RabbitMQTarget):
        return f"amqp:{target.exchange}"[:MAX_DESTINATION]
    if isinstance(target, TopicTarget):
        # Never delivered itself: its deliveries go to their endpoints.
        return f"topic:{target.topic}"[:MAX_DESTINATION]
    if isinstance(target, EndpointTarget | EndpointWebhook):
        # Its URL may change under it: the endpoint is the receiver its slots share.
        return f"endpoint:{target.endpoint_id}"
    return webhook_destination(target.url)


# Every delivery's destination is asked for as it joins a replica's lanes: a burst names
# a few receivers thousands of times.
@lru_cache(maxsize=4096)
def webhook_destination(url: str) -> str:
    """A webhook URL's origin as written, in lower case: its scheme, `://` and its host
    and port, without credentials (`http://10.0.0.7:8080`), cut to the column's length. A
    port left out is not filled in: `http://h` and `http://h:80` are two names of one
    receiver, which share nothing but a name. The migration that gave stored schedules theirs
    computes the same in SQL (alembic/versions/0019_destinations.py); a URL without `://`
    (never one the API accepted) is its own destination."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        return url.lower()[:MAX_DESTINATION]
    authority = _AUTHORITY.match(rest)
    host = authority.group(0).rpartition("@")[2] if authority else ""
    return f"{scheme}://{host}".lower()[:MAX_DESTINATION]
