"""Who may reach what: the admin token, the Host check, and what /healthz may show.

- Bound to a non-loopback address, the server refuses to start without ``admin_token``;
  with a token set (on any address), ``/stats``, ``/dashboard`` and ``/metrics`` need
  ``Authorization: Bearer <token>`` (or HTTP Basic with the token as password, so a
  browser can open the dashboard: it asks once, then sends it with the dashboard's own
  ``/stats`` calls). Without the token, ``/healthz`` answers its status only.
- The ``/v1`` API is guarded by the upstream's keys; before a keyless upstream (an open
  relay otherwise), ``client_tokens`` makes every request present one of them in
  ``X-Context-Engine-Token`` or as its API key (``Authorization: Bearer``, ``x-api-key``);
  401 otherwise. A client token never goes upstream.
- Bound to loopback, every request's ``Host`` must name loopback (``localhost``,
  ``127.0.0.1``, ``[::1]``, any port) or one of ``allowed_hosts``: a web page that
  rebinds its own DNS name to 127.0.0.1 cannot then read the ledger or use the proxy.
- ``sanitize.redact_url`` strips credentials and the query from every URL shown.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from context_engine.proxy.dialects.registry import for_client
from context_engine.proxy.errors import OwnError, error_response
from context_engine.proxy.settings import ConfigError, Settings
from context_engine.proxy.transport.upstream import KEPT_HERE

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
Handler = Callable[[Request], Awaitable[Response]]


def is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


MIN_CLIENT_TOKEN = 16
ADMIN_PATHS = frozenset({"/healthz", "/metrics", "/stats", "/dashboard",
                         "/_launcher/identity", "/_launcher/stop"})  # launch_identity.py
TOKEN_HEADER = b"x-context-engine-token"


def client_tokens(settings: Settings) -> tuple[str, ...]:
    return tuple(t.strip() for t in settings.client_tokens.split(",") if t.strip())


def check_exposure(settings: Settings) -> None:
    """Fail closed at start-up: a server reachable from other hosts needs ``admin_token``;
    client tokens must be long enough to be secrets."""
    short = [t for t in client_tokens(settings) if len(t) < MIN_CLIENT_TOKEN]
    if short:
        raise ConfigError(f"client_tokens: each token needs at least {MIN_CLIENT_TOKEN} "
                          f"characters ({len(short)} shorter); use long random secrets")
    if not is_loopback(settings.host) and not settings.admin_token:
        raise ConfigError(
            f"admin_token: required when host is {settings.host!r} (not loopback), to guard "
            "/stats, /dashboard and /metrics; set CONTEXT_ENGINE_ADMIN_TOKEN or admin_token "
            "in config.yaml to a long random secret")


def _error(status: int, message: str, code: str, headers: dict[str, str] | None = None) -> Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None,
                      "code": code}}
    return Response(json.dumps(body), status_code=status, media_type="application/json",
                    headers=headers)


def _presented_token(authorization: str) -> str:
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            return base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            return ""
    return ""


def is_admin(request: Request, token: str) -> bool:
    """Whether the request presents the admin token (True when none is configured)."""
    if not token:
        return True
    given = _presented_token(request.headers.get("authorization", "")).encode()
    return hmac.compare_digest(given, token.encode())


def admin_only(handler: Handler, token: str) -> Handler:
    """``handler`` behind the admin token (unchanged when no token is configured)."""
    if not token:
        return handler

    async def guarded(request: Request) -> Response:
        if not is_admin(request, token):
            return _error(401, "This endpoint needs the admin token: Authorization: Bearer "
                          "<admin_token>.", "invalid_admin_token",
                          {"www-authenticate": 'Basic realm="context-engine admin"'})
        return await handler(request)

    return guarded


class HostCheck:
    """ASGI middleware: on loopback, answer 400 to a ``Host`` that is not ours."""

    def __init__(self, app: ASGIApp, allowed: tuple[str, ...]) -> None:
        self.app = app
        self.allowed = frozenset(LOOPBACK_NAMES) | {h.lower() for h in allowed}

    def _ok(self, host: str) -> bool:
        if host.startswith("["):
            name = host[1:].partition("]")[0]
        else:
            name = host.rpartition(":")[0] if ":" in host else host
        return name.lower() in self.allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)
            if host is not None and not self._ok(host):
                headers = {k.decode("latin-1"): "" for k, _ in scope["headers"]}
                dialect = for_client(scope.get("path", ""), headers)
                response = error_response(OwnError(
                    400, "The Host header does not name this server; add the name to "
                    "allowed_hosts if it does.", "invalid_request_error", "invalid_host"),
                    dialect.error_body)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class ClientTokens:
    """ASGI middleware: every request but the admin routes presents a client token
    (``client_tokens``); the headers that carried it never go upstream."""

    def __init__(self, app: ASGIApp, tokens: tuple[str, ...]) -> None:
        self.app = app
        self.tokens = tuple(t.encode() for t in tokens)

    def _match(self, value: bytes) -> bool:
        return any(hmac.compare_digest(value, t) for t in self.tokens)

    def _given(self, name: bytes, value: bytes) -> bool:
        if name in (TOKEN_HEADER, b"x-api-key"):
            return self._match(value.strip())
        if name == b"authorization":
            scheme, _, rest = value.strip().partition(b" ")
            return scheme.lower() == b"bearer" and self._match(rest.strip())
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("path", "") in ADMIN_PATHS:
            await self.app(scope, receive, send)
            return
        headers = scope["headers"]
        given = [self._given(k.lower(), v) for k, v in headers]
        if not any(given):
            shape = {k.decode("latin-1").lower(): "" for k, _ in headers}
            response = error_response(OwnError(
                401, "This proxy needs a client token: X-Context-Engine-Token: <token>.",
                "invalid_request_error", "invalid_client_token"),
                for_client(scope.get("path", ""), shape).error_body)
            await response(scope, receive, send)
            return
        # the headers stay for the caller's scope (sessions and recall stay per token); they
        # are left out when the request goes upstream
        used = sorted({k.decode("latin-1").lower() for (k, _), hit in zip(headers, given) if hit})
        state = {**scope.get("state", {}), KEPT_HERE: tuple(used)}
        await self.app({**scope, "state": state}, receive, send)
