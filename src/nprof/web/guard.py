"""DNS-rebinding and cross-site request guard for the viewer (the viewer has no login).

Contract: `HostGuard(app, names)` is an ASGI middleware.
* `Host`: a request is served only when its Host header names this server: an IP
  literal (a rebinding page has a DNS name as its origin, never an IP), one of
  `LOOPBACK_NAMES`, or one of `names` (the `--host` given, and the machine's names
  when bound to every interface). Anything else gets 421 {"error": "<one line>"}.
* Origin: a state-changing request (POST, PUT, PATCH, DELETE) carrying an `Origin`
  header must come from the server's own origin (`http://<Host header>`); a foreign or
  `null` origin, or, without `Origin`, `Sec-Fetch-Site: cross-site|same-site`, gets
  403. Clients that send neither (curl, scripts) are not browsers and pass.
* Query parameters: a whole-number value outside the 64-bit range gets 422 (DuckDB and the JSON
  encoder would fail on it later with a 500).
`allowed_names(host)` gives the names for a bound address. Websocket/lifespan scopes pass through.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
WILDCARD = frozenset({"0.0.0.0", "::"})

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def is_loopback(host: str) -> bool:
    """True for localhost and loopback IP literals (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_names(host: str) -> frozenset[str]:
    """Host names accepted for a server bound to `host` (besides loopback names and IP literals)."""
    names = {host.lower().strip("[]")}
    if host in WILDCARD:
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    return frozenset(n for n in names if n)


def split_host(value: str) -> tuple[str, str]:
    """(host name lower-cased without brackets, port or '') of a Host header value."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return value, ""
        rest = value[end + 1 :]
        return value[1:end], rest[1:] if rest.startswith(":") else ""
    name, _, port = value.partition(":")
    return name, port


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


INT64 = (-(2**63), 2**63 - 1)
_INT_RE = re.compile(r"[+-]?\d+")


def query_refusal(query: str) -> tuple[int, str] | None:
    """(422, reason) when a query parameter is a whole number outside the 64-bit range."""
    for key, value in parse_qsl(query, keep_blank_values=True):
        if len(value) > 18 and _INT_RE.fullmatch(value) and not INT64[0] <= int(value) <= INT64[1]:
            return 422, f"invalid parameter {key[:40]}: {value[:30]} is outside the 64-bit integer range"
    return None


def refusal(headers: dict[str, str], method: str, names: frozenset[str]) -> tuple[int, str] | None:
    """(status, one-line reason) when the request must be refused, else None."""
    host_header = headers.get("host", "")
    name, _port = split_host(host_header)
    if not name or not (_is_ip(name) or name in LOOPBACK_NAMES or name in names):
        shown = host_header[:80] or "(none)"
        return 421, f"host {shown!r} is not served here (DNS rebinding guard); open the viewer at the URL nprof printed"
    if method not in UNSAFE_METHODS:
        return None
    origin = headers.get("origin")
    if origin is not None:
        parts = urlsplit(origin)
        if origin == "null" or parts.scheme not in ("http", "https") or parts.netloc.lower() != host_header.lower():
            shown = origin[:80]
            return 403, f"cross-origin {method} from {shown!r} refused; the viewer accepts changes only from its page"
        return None
    if headers.get("sec-fetch-site", "") in ("cross-site", "same-site"):
        return 403, f"cross-site {method} refused; the viewer accepts changes only from its own page"
    return None


class HostGuard:
    """ASGI middleware applying `refusal` to every HTTP request (see module doc)."""

    def __init__(self, app: ASGIApp, names: Iterable[str] = ()) -> None:
        self.app = app
        self.names = frozenset(n.lower().strip("[]") for n in names if n)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        method = scope.get("method", "GET").upper() if scope["type"] == "http" else "POST"
        refused = refusal(headers, method, self.names) or query_refusal(
            scope.get("query_string", b"").decode("latin-1")
        )
        if refused is None:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        status, reason = refused
        body = orjson.dumps({"error": reason})
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})
