"""Secrets a target carries: Standard Webhooks signing secrets, credential headers, URL
passwords and credential query parameters; which values count as secret, and the redacted
forms that responses show.

Redacted forms appear only in responses (`app.api.target_schemas`, and through them the
console and the CLI); what a write that sends one back means is `app.domain.placeholders`.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar
from urllib.parse import quote, quote_plus, unquote_plus, urlsplit, urlunsplit

SECRET_PREFIX = "whsec_"
# What a response shows instead of a secret header value or a URL password.
PLACEHOLDER = "***"
# Header and query parameter names whose values are credentials: any name containing one of
# these words, in any case (Authorization, X-Api-Key, Set-Cookie, X-Amz-Signature, X-Jwt,
# ...). Broad on purpose: a value shown as *** that was no secret costs a reader little.
_SECRET_WORDS = (
    "auth",
    "token",
    "secret",
    "key",
    "pass",
    "pwd",
    "credential",
    "signature",
    "session",
    "cookie",
    "jwt",
    "bearer",
    "hmac",
)
# Words too short to look for inside others ("design", "footprint", "encode"): a name is
# secret when one of its parts (split at anything but a letter or digit, and where a lower
# case letter or digit meets an upper case one) is one of these (X-Sig, sig, otp_code, otpCode).
_SECRET_PARTS = frozenset({"sig", "otp", "code"})
_PARTS = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
# `whsec_…abcd`: the prefix, an ellipsis, and the last 4 characters of the secret.
REDACTED_SECRET = re.compile(r"whsec_….{4}", re.DOTALL)

V = TypeVar("V")


def signing_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret (`whsec_` + base64, padding optional);
    empty when the secret is malformed."""
    if not secret.startswith(SECRET_PREFIX):
        return b""
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        return base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except binascii.Error:
        return b""


def redacted_secret(secret: str) -> str:
    """`whsec_…` and the secret's last 4 characters: enough to tell secrets apart."""
    return "whsec_…" + secret[-4:]


def is_secret_name(name: str) -> bool:
    """Whether a header or query parameter of this name carries a credential."""
    lowered = name.lower()
    if any(word in lowered for word in _SECRET_WORDS):
        return True
    return any(part.lower() in _SECRET_PARTS for part in _PARTS.split(name))


def redacted_headers(headers: Mapping[str, V]) -> dict[str, V | str]:
    return {name: PLACEHOLDER if is_secret_name(name) else value for name, value in headers.items()}


def with_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    user = parts.netloc.rpartition("@")[0].partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


def url_password(url: str) -> str | None:
    userinfo, at, _ = urlsplit(url).netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return None
    return userinfo.partition(":")[2]


def with_user(url: str, user: str) -> str:
    """`url` with `user` as the whole of its userinfo (which has no password)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}"))


def url_lone_user(url: str) -> str | None:
    """The user of a userinfo that has no password (`https://TOKEN@host/`: a credential
    sent as the user name, as token-in-URL services take one); None otherwise."""
    userinfo, at, _ = urlsplit(url).netloc.rpartition("@")
    if not at or ":" in userinfo or not userinfo:
        return None
    return userinfo


def redacted_url(url: str) -> str:
    """The URL with the password of its userinfo (or its user, when it has no password)
    and the values of its secret query parameters replaced:
    `https://user:***@host/hook?page=2&token=***`, `https://***@host/`."""
    shown = url
    if url_password(url) is not None:
        shown = with_password(url, PLACEHOLDER)
    elif url_lone_user(url) is not None:
        shown = with_user(url, PLACEHOLDER)
    return with_query_values(shown, lambda _name, _index, _value: PLACEHOLDER)


def _query_span(url: str) -> tuple[int, int] | None:
    """Where the query of `url` lies in its text (after its `?`, up to any fragment)."""
    end_of_path = next((i for i, c in enumerate(url) if c in "?#"), len(url))
    if end_of_path == len(url) or url[end_of_path] == "#":
        return None
    start = end_of_path + 1
    fragment = url.find("#", start)
    return start, len(url) if fragment < 0 else fragment


def secret_query_values(url: str) -> list[tuple[str, int, int]]:
    """The secret query values of `url`: (parameter name, start, end) in the URL's text.

    Parameters are split on `&` and on `;` (some servers take either); a secret value runs
    to the next `&`, so that neither kind of server reads part of it as another parameter.
    A name is read percent-decoded (`access%5Ftoken` is access_token)."""
    span = _query_span(url)
    if span is None:
        return []
    found: list[tuple[str, int, int]] = []
    position = span[0]
    for part in url[span[0] : span[1]].split("&"):
        offset = position
        for piece in part.split(";"):
            name, equals, _ = piece.partition("=")
            decoded = unquote_plus(name)
            if equals and is_secret_name(decoded):
                found.append((decoded, offset + len(name) + 1, position + len(part)))
                break
            offset += len(piece) + 1
        position += len(part) + 1
    return found


def with_query_values(url: str, value: Callable[[str, int, str], str]) -> str:
    """`url` with each secret query value replaced by `value(name, index, current)`, where
    `index` counts the earlier parameters of that name (a name may repeat)."""
    spans = secret_query_values(url)
    if not spans:
        return url
    parts: list[str] = []
    seen: dict[str, int] = {}
    last = 0
    for name, start, end in spans:
        index = seen.get(name, 0)
        seen[name] = index + 1
        parts += [url[last:start], value(name, index, url[start:end])]
        last = end
    parts.append(url[last:])
    return "".join(parts)


def redacted_query(query: str, secrets: Iterable[str] = ()) -> str:
    """A query string (without its `?`) as answers show a URL's: the values of its secret
    parameters replaced by ***; and each of `secrets` (the API keys) wherever it appears in
    it, as written or percent-encoded, as logs mask them."""
    shown = with_query_values("?" + query, lambda _name, _index, _value: PLACEHOLDER)[1:]
    for secret in secrets:
        for spelling in {secret, quote_plus(secret), quote(secret, safe="")}:
            shown = shown.replace(spelling, PLACEHOLDER)
    return shown


# A URL's userinfo in free text: its scheme, a user, then a password up to the last `@`
# before the path, query or fragment (a password may hold an unencoded @, and the text
# quoting it may not have refused spaces or line breaks). Too much rather than too little.
_USERINFO_IN_TEXT = re.compile(
    r"(?i)\b([a-z][a-z0-9+.\-]{0,31}://)([^\s/?#@:]{0,256}):[^/?#]{0,1024}@"
)
# A whole URL in free text, up to a space or a quote. (Schemes, users and passwords have
# bounded lengths here, so that a long text costs linear time.)
_URL_IN_TEXT = re.compile(r"""(?i)\b[a-z][a-z0-9+.\-]{0,31}://[^\s'"<>]*""")


# A userinfo without a password (`https://TOKEN@host`), once passwords are redacted.
_LONE_USER_IN_TEXT = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]{0,31}://)[^\s/?#@:]{1,1024}@")


def _without_password(match: re.Match[str]) -> str:
    return f"{match.group(1)}{match.group(2)}:{PLACEHOLDER}@"


def scrub_credentials(text: str) -> str:
    """`text` (an error's message, a log line) with the credentials of every URL in it
    redacted as responses show them: the password of its userinfo (its user, when it has
    no password) and the values of its secret query parameters become ***. The HTTP
    client quotes a whole URL in some of its errors (an invalid URL, a refused redirect)."""
    if "://" not in text:
        return text
    text = _USERINFO_IN_TEXT.sub(_without_password, text)
    text = _LONE_USER_IN_TEXT.sub(lambda match: f"{match.group(1)}{PLACEHOLDER}@", text)
    return _URL_IN_TEXT.sub(
        lambda match: with_query_values(match.group(0), lambda _n, _i, _v: PLACEHOLDER), text
    )


_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int | None]:
    """Where a URL sends its requests (scheme, host, port: a scheme's default port when the
    URL names none); userinfo and path aside."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(scheme)


def resource(url: str) -> tuple[str, str, int | None, str]:
    """What a URL asks for up to its query: its origin and its path, as written (another
    path on the same host is another resource, which may echo what it is sent)."""
    return (*origin(url), urlsplit(url).path or "/")
