"""Web pages cannot use the proxy: a request a browser sends on behalf of another site's
page is refused.

A page the user opens can ``fetch`` (or post a form to) ``http://127.0.0.1:8787``: it
cannot read the answer (CORS), but the request itself would run (forged ledger rows
tagged with the user's agent and project, the parse cost of a large body, a call to the
upstream with whatever key the page holds). Browsers mark such requests: an ``Origin``
header on every cross-origin request and on every POST, and ``Sec-Fetch-Site`` on every
request. Agents, SDKs and ``curl`` send neither. So a request is refused (403
``invalid_origin``, in its API's error shape) when its ``Origin`` is not this server's own
(the dashboard calling ``/stats``) or one of ``allowed_origins``, or when
``Sec-Fetch-Site`` says ``cross-site`` or ``same-site`` without an allowed ``Origin``.
``Origin: null`` (sandboxed frames, ``file:`` pages) is refused too.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from context_engine.proxy.dialects.registry import for_client
from context_engine.proxy.errors import OwnError, error_response
from context_engine.proxy.settings import ConfigError

CROSS = frozenset({"cross-site", "same-site"})


def allowed_origins(value: str) -> frozenset[str]:
    """``allowed_origins`` as a set of lower-case origins without a trailing slash;
    ConfigError naming the key for one that is not ``scheme://host[:port]``."""
    found = frozenset(o.strip().rstrip("/").lower() for o in value.split(",") if o.strip())
    for origin in found:
        scheme, sep, host = origin.partition("://")
        if not sep or scheme not in ("http", "https") or not host or "/" in host:
            raise ConfigError(f"allowed_origins: {origin!r} is not an origin; write "
                              "scheme://host[:port], e.g. https://app.example.com")
    return found


class OriginCheck:
    """ASGI middleware: refuse what a browser sends for another site's page."""

    def __init__(self, app: ASGIApp, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = allowed

    def _refused(self, scope: Scope) -> bool:
        headers = {k.lower(): v.decode("latin-1").strip() for k, v in scope["headers"]
                   if k.lower() in (b"origin", b"sec-fetch-site", b"host")}
        origin = headers.get(b"origin")
        if origin is not None:
            own = f"{scope.get('scheme', 'http')}://{headers.get(b'host', '')}".lower()
            return origin.rstrip("/").lower() not in self.allowed | {own}
        return headers.get(b"sec-fetch-site", "").lower() in CROSS

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and self._refused(scope):
            shape = {k.decode("latin-1").lower(): "" for k, _ in scope["headers"]}
            response = error_response(OwnError(
                403, "Requests from web pages are refused; add the page's origin to "
                "allowed_origins if it should call this proxy.", "invalid_request_error",
                "invalid_origin"), for_client(scope.get("path", ""), shape).error_body)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
