"""Who may reach what: the admin token, the Host check, and what /healthz may show.

- Bound to a non-loopback address, the server refuses to start without ``admin_token``;
  with a token set (on any address), ``/stats``, ``/dashboard`` and ``/metrics`` need
  ``Authorization: Bearer <token>`` (or HTTP Basic with the token as password, so a
  browser can open the dashboard: it asks once, then sends it with the dashboard's own
  ``/stats`` calls). The ``/v1`` API itself is guarded by the upstream's keys, as before.
- Bound to loopback, every request's ``Host`` must name loopback (``localhost``,
  ``127.0.0.1``, ``[::1]``, any port) or one of ``allowed_hosts``: a web page that
  rebinds its own DNS name to 127.0.0.1 cannot then read the ledger or use the proxy.
- ``redact_url`` strips credentials and the query from the upstream URL shown by
  ``/healthz``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable

import httpx
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from context_engine.proxy.edge.errors import error_json, speaks_anthropic
from context_engine.proxy.settings import ConfigError, Settings

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


def check_exposure(settings: Settings) -> None:
    """Fail closed at start-up: a server reachable from other hosts needs ``admin_token``."""
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


def admin_only(handler: Handler, token: str) -> Handler:
    """``handler`` behind the admin token (unchanged when no token is configured)."""
    if not token:
        return handler
    expected = token.encode()

    async def guarded(request: Request) -> Response:
        given = _presented_token(request.headers.get("authorization", "")).encode()
        if not hmac.compare_digest(given, expected):
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
        if scope["type"] == "http":
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)
            if host is not None and not self._ok(host):
                headers = {k.decode("latin-1"): "" for k, _ in scope["headers"]}
                anthropic = speaks_anthropic(scope.get("path", ""), headers)
                response = error_json(400, "The Host header does not name this server; add the "
                                      "name to allowed_hosts if it does.", "invalid_request_error",
                                      "invalid_host", anthropic)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def redact_url(url: str) -> str:
    """``url`` without user, password or query (they may hold credentials)."""
    try:
        u = httpx.URL(url)
    except httpx.InvalidURL:
        return "(invalid URL)"
    host = f"[{u.host}]" if ":" in u.host else u.host
    port = f":{u.port}" if u.port else ""
    return f"{u.scheme}://{host}{port}{u.path}"
