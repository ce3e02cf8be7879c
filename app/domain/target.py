"""Targets: where an occurrence is delivered (a webhook or a RabbitMQ exchange)."""

from __future__ import annotations

import ipaddress
import re
import uuid
from functools import lru_cache
from typing import Annotated, Literal
from urllib.parse import urlsplit

import idna
from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from app.domain.addresses import AddressPolicy, HostSpellingError, parse_host
from app.domain.limits import (
    INT64_MAX,
    INT64_MIN,
    MAX_AMQP_HEADER_KEY_BYTES,
    MAX_HEADER_NAME,
    MAX_HEADER_VALUE_BYTES,
    MAX_HEADERS,
    MAX_SHORT_STRING_BYTES,
    MAX_TIMEOUT_SECONDS,
    ONE_LINE_PATTERN,
    TABBED_LINE_PATTERN,
    Id,
    InputModel,
    Shown,
    at_most,
    at_most_items,
    check_text,
    error_at,
    on_input,
)
from app.domain.secrets import REDACTED_SECRET, signing_key

JsonScalar = str | int | float | bool | None

# Headers Chronoq sets itself on every delivery; a target may not override them.
RESERVED_HEADERS = frozenset(
    {
        "content-type",
        "content-length",
        "transfer-encoding",
        "connection",
        "host",
        "idempotency-key",
        "x-occurrence-id",
        "x-schedule-id",
        "x-event-type",
        "x-scheduled-for",
        "x-attempt",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    }
)
# Hop-by-hop and framing headers: they describe one connection or the body's encoding, which
# the HTTP client owns; a target that set them could smuggle a second request or corrupt
# the body. Any `Proxy-*` header is refused too.
FRAMING_HEADERS = frozenset(
    {"connection", "upgrade", "te", "trailer", "keep-alive", "expect", "content-encoding"}
)
# Headers that say who the client is: receivers behind a proxy trust them for the client's
# address, host and scheme, so a target that set them could forge the origin a receiver
# acts on. Any `X-Forwarded-*` header is refused too.
FORWARDING_HEADERS = frozenset(
    {
        "forwarded",
        "x-real-ip",
        "x-client-ip",
        "true-client-ip",
        "cf-connecting-ip",
        "x-cluster-client-ip",
        "x-original-forwarded-for",
    }
)
# Message headers RabbitMQ acts on (sender-selected distribution): it takes them as arrays of
# routing keys and closes the channel on a publish where they are anything else, which a
# header value here always is. The target's routing key is the way to route.
BROKER_HEADERS = frozenset({"cc", "bcc"})
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# A URL has no spaces or control characters anywhere (RFC 3986); clients percent-encode them.
_URL_UNSAFE = re.compile(r"[\x00-\x20\x7f-\x9f]")
# A host whose last label is a number is an IPv4 address to URL parsers (WHATWG "ends in a
# number"): 2130706433, 0177.0.0.1, 127.1 and 0x7f.0.0.1 all mean 127.0.0.1.
_NUMERIC_LABEL = re.compile(r"^(?:[0-9]+|0[xX][0-9a-fA-F]*)$")
# What a host name is once encoded (RFC 1123 labels, and the underscore that internal names
# use): labels of 1-63 letters, digits, hyphens and underscores, 253 characters in all (a
# trailing dot aside). Longer labels or names are refused by the resolver's IDNA codec.
_HOST_LABEL = re.compile(r"^[a-z0-9_-]{1,63}$")
MAX_HOST_NAME = 253
# Code points that IDNA deletes or folds without a trace (Unicode's Default_Ignorable_Code_Point,
# and U+1806, which nameprep maps to nothing): `e<ZWSP>vil.com` would be requested as evil.com.
# The HTTP client refuses them in a host, as this does.
_INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u1806\u180b-\u180f\u200b-\u200f"
    "\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)
# How much of a refused host a message repeats.
_HOST_ECHO = 100


def encoded_host(host: str) -> str:
    """The ASCII name a request to `host` (a URL's host, not an IPv6 literal) looks up, as
    the HTTP client encodes it: lower case, and a non-ASCII name in IDNA 2008 with the UTS
    46 mapping, or IDNA 2003 where that fails (yarl's order). Raises UnicodeError when the
    client could not encode it either."""
    if host.isascii():
        return host.lower()
    if _INVISIBLE.search(host):
        raise UnicodeError("the host holds a character that IDNA deletes or folds")
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except UnicodeError:
        return host.encode("idna").decode("ascii")


def request_host(url: str) -> str:
    """The host a request to this webhook URL goes to, spelt as the HTTP client sends it
    (`encoded_host`); the URL's own spelling when it cannot be encoded (a stored row)."""
    host = urlsplit(url).hostname or ""
    if ":" in host:  # an IPv6 literal
        return host
    try:
        return encoded_host(host)
    except UnicodeError:
        return host


def _host_name_problem(host: str) -> str | None:
    """Why `host` (not an IPv6 literal) is no name the HTTP client can request, or None."""
    shown = repr(host[:_HOST_ECHO])
    try:
        name = encoded_host(host)
    except UnicodeError:
        return (
            f"host {shown} cannot be encoded as an internationalized domain name (IDNA): "
            "an empty label, a label of over 63 characters, or a character a host cannot hold"
        )
    bare = name.removesuffix(".")
    labels = bare.split(".")
    if not host.isascii() and _NUMERIC_LABEL.match(labels[-1]):
        return f"host {shown} spells a numeric address with characters other than ASCII"
    if len(bare) > MAX_HOST_NAME:
        return f"host {shown} is longer than {MAX_HOST_NAME} characters once encoded"
    if not all(_HOST_LABEL.match(label) for label in labels):
        return (
            f"host {shown} is no host name: dot-separated labels of 1-63 letters, digits, "
            "hyphens and underscores"
        )
    return None


# Numeric spellings of these name the denial they hit, not only their spelling.
BUILT_IN_DENIALS = AddressPolicy()


def _numeric_host_problem(host: str) -> str | None:
    if ":" in host:  # an IPv6 literal ([::ffff:127.0.0.1] is one)
        return None
    labels = host.split(".")
    last = labels[-1] if labels[-1] or len(labels) == 1 else labels[-2]
    if not _NUMERIC_LABEL.match(last):
        return None
    try:
        canonical = str(ipaddress.IPv4Address(host))
    except ValueError:
        canonical = None
    if canonical == host:
        return None
    try:
        address = parse_host(host)
    except HostSpellingError:
        address = None
    if address is not None and (denial := BUILT_IN_DENIALS.denial(address)) is not None:
        return f"the host {host} is {denial}"  # 2852039166 is 169.254.169.254, ...
    return (
        f"host {host!r} is a numeric address but not in dotted-quad form (a.b.c.d, each "
        "0-255 in decimal without leading zeros)"
    )


# A batch often names one URL a thousand times: each is judged once (by its text alone).
@lru_cache(maxsize=1024)
def _url_problem(url: str, on_input: bool) -> str | None:
    """Why `url` is no webhook URL (with the input rules when `on_input`), or None."""
    parts = urlsplit(url)
    host = parts.hostname
    if parts.scheme not in ("http", "https") or not host:
        return "url must be an absolute http:// or https:// URL"
    if on_input:
        if _URL_UNSAFE.search(url):
            return "url contains a space or a control character"
        try:
            parts.port  # noqa: B018 (raises on a port outside 0-65535)
        except ValueError as exc:
            return f"url has an invalid port: {exc}"
        if problem := _numeric_host_problem(host):
            return problem
        if ":" not in host and (problem := _host_name_problem(host)):
            return problem
    return None


_TYPE = "The target's kind, which names the fields it takes"
_URL = (
    "The absolute http:// or https:// URL called (no spaces or control characters; the "
    "host must not be, or resolve to, a denied address)"
)
_METHOD = "The HTTP method of each delivery"
_HEADERS = (
    "Extra request headers (at most 64; names are RFC 9110 tokens of up to 256 characters "
    "that Chronoq does not set itself, values up to 8 KiB without CR, LF or NUL)"
)
_TIMEOUT = "Seconds an attempt may take before it counts as failed"
# An absolute http(s) URL with a host, and no space or control character anywhere.
URL_PATTERN = r"^[Hh][Tt][Tt][Pp][Ss]?://[^\x00-\x20\x7f-\x9f/?#]+[^\x00-\x20\x7f-\x9f]*$"
_HEADER_NAMES = {"minLength": 1, "maxLength": MAX_HEADER_NAME, "pattern": _TOKEN.pattern}


def _checked_url(value: str, info: ValidationInfo) -> str:
    if (problem := _url_problem(value, on_input(info))) is not None:
        raise ValueError(problem)
    return value


def _checked_headers(value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
    checked = on_input(info)
    if checked and len(value) > MAX_HEADERS:
        raise ValueError(f"at most {MAX_HEADERS} headers")
    if checked and len({name.lower() for name in value}) < len(value):
        raise ValueError("header names differ only in case: HTTP treats them as one")
    for name, header in value.items():
        if not _TOKEN.match(name) or (checked and len(name) > MAX_HEADER_NAME):
            raise ValueError(
                f"invalid header name {name!r}: a token (RFC 9110) of at most "
                f"{MAX_HEADER_NAME} characters"
            )
        if name.lower() in RESERVED_HEADERS:
            raise ValueError(f"header {name!r} is set by Chronoq and cannot be overridden")
        if checked and (name.lower() in FRAMING_HEADERS or name.lower().startswith("proxy-")):
            raise ValueError(
                f"header {name!r} is a hop-by-hop or framing header, which the HTTP "
                "client sets for each connection"
            )
        if checked and (
            name.lower() in FORWARDING_HEADERS or name.lower().startswith("x-forwarded-")
        ):
            raise error_at(
                (name,),
                "value_error",
                f"header {name!r} tells a receiver who the client is (a proxy sets it); a "
                "target cannot set it",
                None,
            )
        if "\r" in header or "\n" in header:
            raise ValueError(f"header {name!r} contains a line break")
        if checked:
            check_text(header, f"header {name!r}", tab=True, max_bytes=MAX_HEADER_VALUE_BYTES)
    return value


# A webhook's URL and headers, checked as a target's are, for models that are no target
# (an endpoint's change).
CheckedUrl = AfterValidator(_checked_url)
CheckedHeaders = AfterValidator(_checked_headers)


class WebhookRequest(InputModel):
    """The request a webhook makes: where, how, and with which headers and timeout (a
    webhook target's fields, and an endpoint's)."""

    model_config = ConfigDict(frozen=True)

    # The pattern and the least length are the validator's rules, shown: its messages say
    # what is wrong, and a stored URL is read as it was written.
    url: str = Field(
        max_length=2048,
        json_schema_extra={"minLength": 1, "pattern": URL_PATTERN},
        description=_URL,
        examples=["http://127.0.0.1:8080/hooks/invoice"],
    )
    method: Literal["POST", "PUT", "PATCH"] = Field(default="POST", description=_METHOD)
    headers: Annotated[
        dict[str, str],
        at_most_items(MAX_HEADERS, "headers"),
        Shown(
            propertyNames=_HEADER_NAMES,
            additionalProperties={
                "type": "string",
                "maxLength": MAX_HEADER_VALUE_BYTES,
                "pattern": TABBED_LINE_PATTERN,
            },
        ),
    ] = Field(
        default_factory=dict,
        json_schema_extra={"maxProperties": MAX_HEADERS},
        description=_HEADERS,
    )
    timeout_seconds: Annotated[float, at_most(MAX_TIMEOUT_SECONDS)] = Field(
        default=10.0,
        gt=0,
        json_schema_extra={"maximum": MAX_TIMEOUT_SECONDS},
        description=_TIMEOUT,
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str, info: ValidationInfo) -> str:
        return _checked_url(value, info)

    @model_validator(mode="after")
    def _credentials_once(self, info: ValidationInfo) -> WebhookRequest:
        # The HTTP client sends a URL's userinfo as Basic credentials in an Authorization
        # header of its own, and refuses a request that brings another: every attempt would
        # fail. Stored targets read as they are (their deliveries fail, as they did).
        if not on_input(info) or "@" not in urlsplit(self.url).netloc:
            return self
        for name in self.headers:
            if name.lower() == "authorization":
                raise error_at(
                    ("headers", name),
                    "value_error",
                    "a url with userinfo (user:password@) sends its own Authorization "
                    "header: give the credentials in the url or in this header, not both",
                    None,
                )
        return self

    @field_validator("headers")
    @classmethod
    def _plain_headers(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        return _checked_headers(value, info)


class WebhookTarget(WebhookRequest):
    """An HTTP(S) endpoint called with the payload as its JSON body."""

    type: Literal["webhook"] = Field(description=_TYPE)
    signing_secret: str | None = Field(
        default=None,
        max_length=1024,
        json_schema_extra={"pattern": "^whsec_"},
        description="Standard Webhooks secret (whsec_ and a base64 key) signing this "
        "target's deliveries instead of the service's; write-only: responses show it redacted",
    )

    @field_validator("signing_secret")
    @classmethod
    def _usable_secret(cls, value: str | None, info: ValidationInfo) -> str | None:
        # The redacted form passes here: the service puts the stored secret back for it.
        if value is None or not on_input(info) or REDACTED_SECRET.fullmatch(value):
            return value
        if not signing_key(value):
            raise ValueError("signing_secret must be whsec_ followed by a non-empty base64 key")
        return value


TOPIC_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"


class TopicTarget(InputModel):
    """A topic (`/v1/topics`): each occurrence fans out, as it fires, to one delivery per
    subscription that matches it then, each to its subscription's endpoint."""

    model_config = ConfigDict(frozen=True)

    type: Literal["topic"] = Field(description=_TYPE)
    topic: str = Field(
        min_length=1,
        max_length=128,
        pattern=TOPIC_PATTERN,
        description="The topic's name (1-128 of A-Z a-z 0-9 . _ : -)",
        examples=["billing"],
    )


class EndpointTarget(InputModel):
    """One of the tenant's endpoints (`/v1/endpoints`): each attempt goes to its URL with
    its headers and secrets as they are when the attempt starts, under its flow limits and
    circuit breaker."""

    model_config = ConfigDict(frozen=True)

    type: Literal["endpoint"] = Field(description=_TYPE)
    endpoint_id: Id = Field(
        description="The endpoint's id, from its creation or the list",
        examples=["0193a3c0-6c1e-7cc2-9d4b-3f1a2b4c5d6e"],
    )


class RabbitMQTarget(InputModel):
    """A publish to an exchange with a routing key, confirmed by the broker."""

    model_config = ConfigDict(frozen=True)

    model_config = ConfigDict(
        json_schema_extra={
            # The default exchange ("") routes by the routing key alone, which it then needs.
            "if": {"properties": {"exchange": {"const": ""}}},
            "then": {"required": ["routing_key"], "properties": {"routing_key": {"minLength": 1}}},
        }
    )

    type: Literal["rabbitmq"] = Field(description=_TYPE)
    exchange: str = Field(
        default="",
        max_length=255,
        json_schema_extra={"pattern": ONE_LINE_PATTERN},
        description='The exchange published to (up to 255 bytes); the default exchange ("") '
        "routes to the queue named by routing_key",
        examples=["billing"],
    )
    routing_key: str = Field(
        default="",
        json_schema_extra={"maxLength": 255, "pattern": ONE_LINE_PATTERN},
        description="The routing key (up to 255 bytes); needed with the default exchange",
        examples=["invoice.due"],
    )
    headers: Annotated[
        dict[str, JsonScalar],
        at_most_items(MAX_HEADERS, "headers"),
        Shown(
            propertyNames={
                "minLength": 1,
                "maxLength": MAX_AMQP_HEADER_KEY_BYTES,
                "pattern": ONE_LINE_PATTERN,
            }
        ),
    ] = Field(
        default_factory=dict,
        json_schema_extra={"maxProperties": MAX_HEADERS},
        description="Message headers (at most 64; names up to 128 bytes, not cc or bcc; "
        "integers within 64 bits, text without control characters but tab)",
    )

    @model_validator(mode="after")
    def _routable(self, info: ValidationInfo) -> RabbitMQTarget:
        if len(self.routing_key.encode()) > 255:
            raise ValueError("routing_key is longer than 255 bytes")
        if self.exchange == "" and not self.routing_key:
            raise ValueError("routing_key must not be empty with the default exchange")
        if on_input(info):
            check_text(self.exchange, "exchange", max_bytes=MAX_SHORT_STRING_BYTES)
            check_text(self.routing_key, "routing_key")
        return self

    @field_validator("headers")
    @classmethod
    def _table(cls, value: dict[str, JsonScalar], info: ValidationInfo) -> dict[str, JsonScalar]:
        """What an AMQP field table carries unchanged: short keys, 64-bit integers, text."""
        if not on_input(info):
            return value
        if len(value) > MAX_HEADERS:
            raise ValueError(f"at most {MAX_HEADERS} headers")
        for key, item in value.items():
            if not key:
                raise ValueError("a header name must not be empty")
            if key.lower() in BROKER_HEADERS:
                raise error_at(
                    (key,),
                    "value_error",
                    f"header {key!r} is read by RabbitMQ as a list of extra routing keys, and "
                    "a message that carries it otherwise closes the channel: route with "
                    "routing_key",
                    None,
                )
            check_text(key, f"header name {key!r}", max_bytes=MAX_AMQP_HEADER_KEY_BYTES)
            if isinstance(item, str):
                check_text(item, f"header {key!r}", tab=True, max_bytes=MAX_HEADER_VALUE_BYTES)
            elif isinstance(item, int) and not INT64_MIN <= item <= INT64_MAX:
                raise ValueError(f"header {key!r} is outside the 64-bit integer range")
        return value


Target = Annotated[
    WebhookTarget | RabbitMQTarget | EndpointTarget | TopicTarget, Field(discriminator="type")
]


def endpoint_of(target: object) -> uuid.UUID | None:
    """The endpoint an attempt to `target` goes to (None: none)."""
    return target.endpoint_id if isinstance(target, EndpointWebhook) else None


class EndpointWebhook(WebhookTarget):
    """An endpoint target as an attempt sends it: the endpoint's request as it stands when
    the attempt is claimed, signed with its live secrets (newest first). Built from stored
    rows, never from input."""

    endpoint_id: uuid.UUID
    signing_secrets: tuple[str, ...] = ()
