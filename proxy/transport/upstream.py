"""Raw forwarding to the upstream with httpx: bytes in, bytes out. A request goes out
a second time only when a pooled keep-alive connection the upstream closed could not have
carried it (``proxy.transport.reconnect`` says exactly when); otherwise never a retry.

Request headers pass through except hop-by-hop ones, those ``Connection`` names, the
proxy's own (``X-Context-Engine-*``, ``X-Session-Id``), Host and Content-Length (httpx
sets those for the new connection); httpx's own default headers are not added.
Response status, headers (minus hop-by-hop) and raw body bytes come back as sent.

The upstream URL is built from the raw request path (still percent-encoded, so ``%3F``
or ``%23`` can never turn into a query or a fragment). Paths that could climb out of
the upstream base answer 400 before anything is sent: dot segments, raw or encoded
(``..``, ``%2e%2e``, ``%252e%252e``, and with parameters: ``..;``), encoded slashes and backslashes, ``#``, ``?`` or
NUL hidden in an escape, and control characters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, unquote

import httpx

from context_engine.proxy.errors import BadRequest, UpstreamTimeout, UpstreamUnreachable
from context_engine.proxy.transport.reconnect import Attempt, send_again

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
    "trailer", "trailers", "transfer-encoding", "upgrade", "proxy-connection",
})
NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length"}


OWN_PREFIX = "x-context-engine-"  # the proxy's own request headers, and X-Session-Id
OWN = frozenset({"x-session-id"})


KEPT_HERE = "context_engine.kept_here"  # scope state: header names that held a client token


def kept_here(scope: Mapping[str, Any]) -> tuple[str, ...]:
    """The request's headers that carried a client token (``exposure.ClientTokens``)."""
    state = scope.get("state")
    return tuple(state.get(KEPT_HERE, ())) if isinstance(state, Mapping) else ()


def request_headers(raw: Iterable[tuple[bytes, bytes]],
                    also: Iterable[str] = ()) -> list[tuple[bytes, bytes]]:
    """The client's headers for the upstream: without hop-by-hop ones, those its
    ``Connection`` header names, the proxy's own (``X-Context-Engine-*``,
    ``X-Session-Id``) and ``also`` (a client token given as the API key)."""
    pairs = [(k, v, k.decode("latin-1").lower()) for k, v in raw]
    dropped = {t.strip().lower() for _, v, name in pairs if name == "connection"
               for t in v.decode("latin-1").split(",")} | OWN | set(also)
    return [(k, v) for k, v, name in pairs if name not in NOT_FORWARDED and name not in dropped
            and not name.startswith(OWN_PREFIX)]


def response_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(k.lower(), v) for k, v in raw if k.decode("latin-1").lower() not in HOP_BY_HOP]


HIDDEN = ("%2f", "%5c", "%23", "%3f", "%00")


class BadPath(BadRequest):
    code = "invalid_path"


def check_path(raw: str) -> str:
    """Return ``raw`` if no decoding of it can leave the path it names; else raise."""
    if not raw.startswith("/"):
        raise BadPath("The request path must start with '/'.")
    stage = raw
    for _ in range(4):
        lowered = stage.lower()
        if any(ord(c) < 32 or c in "\\#?\x7f" for c in stage) or any(h in lowered for h in HIDDEN):
            raise BadPath("The request path holds an encoded slash, '#', '?', '\\' or a "
                          "control character.")
        if any(seg.split(";", 1)[0] in (".", "..") for seg in stage.split("/")):
            raise BadPath("The request path holds a '.' or '..' segment (or '..;').")
        decoded = unquote(stage, encoding="latin-1") if "%" in stage else stage
        if decoded == stage:
            return raw
        stage = decoded
    raise BadPath("The request path is percent-encoded too many times.")


def raw_target(scope: Mapping[str, Any]) -> tuple[str, str]:
    """The request's path as sent (percent-encoded) and its query string."""
    raw = scope.get("raw_path")
    if isinstance(raw, bytes):
        path = raw.decode("latin-1")
    else:  # a server without raw_path: re-encode the decoded path
        path = quote(scope["path"], safe="/:@!$&'()*+,;=-._~")
    query = scope.get("query_string", b"").decode("latin-1")
    if "#" in query or any(ord(c) < 32 or ord(c) == 127 for c in query):
        raise BadPath("The query string holds '#' or a control character.")
    return check_path(path), query


class Upstream:
    def __init__(self, base_url: str, timeout: float, connect_timeout: float,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.base_path = httpx.URL(self.base_url).raw_path.decode("ascii").rstrip("/") + "/"
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            transport=transport,
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100),
            follow_redirects=False,
            trust_env=False,
        )

    def url_for(self, scope: Mapping[str, Any], versioned: bool = False) -> str:
        """``/v1/x`` and ``/x`` both map to ``<upstream base>/x``, or with ``versioned``
        (an API whose paths carry their version, as Gemini's do) ``/v1/x`` to
        ``<upstream base>/v1/x``; tricks raise ``BadPath``."""
        path, query = raw_target(scope)
        tail = path[3:] if path.startswith("/v1/") and not versioned else path
        return f"{self.base_url}{tail}" + (f"?{query}" if query else "")

    async def send(self, method: str, url: str,
                   headers: list[tuple[bytes, bytes]], body: bytes | Any) -> httpx.Response:
        """Send to ``url`` (from ``url_for``); return the response with its body streaming."""
        try:
            request = self.client.build_request(method, url, headers=headers, content=body)
        except httpx.InvalidURL:
            raise BadPath("The request path is not a valid URL path.") from None
        if not request.url.raw_path.decode("ascii", "replace").startswith(self.base_path):
            raise BadPath("The request path leaves the upstream base.")
        sent = {k.decode("latin-1").lower() for k, _ in headers}
        for name in ("user-agent", "accept", "accept-encoding"):
            if name not in sent and name in request.headers:
                del request.headers[name]
        try:
            return await self._send(request, method, body)
        except httpx.TimeoutException:
            raise UpstreamTimeout("The upstream did not answer in time.") from None
        except httpx.TransportError as exc:
            raise UpstreamUnreachable(f"Cannot reach the upstream: {type(exc).__name__}.") from None

    async def _send(self, request: httpx.Request, method: str, body: bytes | Any) -> httpx.Response:
        attempt = Attempt()
        request.extensions = {**request.extensions, "trace": attempt}
        try:
            return await self.client.send(request, stream=True)
        except httpx.TransportError as exc:
            if not send_again(attempt, exc, method, body):
                raise
        request.extensions = {k: v for k, v in request.extensions.items() if k != "trace"}
        return await self.client.send(request, stream=True)

    async def aclose(self) -> None:
        await self.client.aclose()
