"""The upstream's WebSocket for one client socket (the ``websockets`` client: httpx has
no WebSocket support).

The URL is the HTTP route's (``Upstream.url_for``) with ``ws``/``wss`` for
``http``/``https``. The client's handshake headers go as they go on HTTP
(``upstream.request_headers``: auth, ``OpenAI-Beta``, ``originator``, ... without the
proxy's own and hop-by-hop ones), minus the handshake's own (key, version, extensions:
each hop negotiates those); its subprotocols are offered as they came, and the one the
upstream picks is the one the client gets. No proxy from the environment, no
``User-Agent`` of the library's (the client's own goes), no size cap on the upstream's
messages (as on HTTP, its bytes are relayed whatever their size).

A handshake the upstream answers with an HTTP response (401, 404, ...) raises
``Refused`` with that response, for the client to get as it came; an upstream that
cannot be reached raises the proxy's own ``UpstreamUnreachable``/``UpstreamTimeout``.
"""

from __future__ import annotations

from collections.abc import Iterable

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidHandshake, InvalidStatus

from context_engine.proxy.errors import UpstreamTimeout, UpstreamUnreachable
from context_engine.proxy.transport.upstream import HOP_BY_HOP, request_headers

HANDSHAKE = frozenset({"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
                       "sec-websocket-protocol", "sec-websocket-accept"})
# the upstream's 101 headers the client's own handshake sets again
NOT_RELAYED = HANDSHAKE | HOP_BY_HOP | {"content-length", "date", "server"}


class Refused(Exception):
    """The upstream answered the handshake with an HTTP response instead of a socket."""

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        super().__init__(f"the upstream refused the WebSocket: {status}")
        self.status, self.headers, self.body = status, headers, body


def ws_url(http_url: str) -> str:
    """``http(s)://…`` as ``ws(s)://…``."""
    scheme, sep, rest = http_url.partition("://")
    return {"http": "ws", "https": "wss"}.get(scheme.lower(), scheme) + sep + rest


def handshake_headers(raw: Iterable[tuple[bytes, bytes]],
                      also: Iterable[str] = ()) -> list[tuple[str, str]]:
    """The client's handshake headers for the upstream's handshake."""
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request_headers(raw, also)
            if k.decode("latin-1").lower() not in HANDSHAKE]


def subprotocols(raw: Iterable[tuple[bytes, bytes]]) -> list[str]:
    """The subprotocols the client offered, in its order."""
    return [p.strip() for k, v in raw if k.lower() == b"sec-websocket-protocol"
            for p in v.decode("latin-1").split(",") if p.strip()]


def accepted_headers(connection: ClientConnection) -> list[tuple[bytes, bytes]]:
    """The upstream's 101 headers the client's handshake carries too (``x-codex-turn-state``,
    ``openai-model``, rate limits, ...)."""
    response = connection.response
    if response is None:
        return []
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.raw_items()
            if k.lower() not in NOT_RELAYED]


async def open_upstream(url: str, headers: list[tuple[str, str]], protocols: list[str],
                        open_timeout: float) -> ClientConnection:
    """The upstream's socket, open; ``Refused`` or the proxy's own error when not."""
    try:
        return await connect(url, additional_headers=headers, subprotocols=protocols or None,  # type: ignore[arg-type]
                             user_agent_header=None, proxy=None, open_timeout=open_timeout,
                             max_size=None, compression="deflate")
    except InvalidStatus as exc:
        r = exc.response
        raise Refused(r.status_code, [(k.lower().encode("latin-1"), v.encode("latin-1"))
                                      for k, v in r.headers.raw_items()
                                      if k.lower() not in HOP_BY_HOP | {"content-length"}],
                      bytes(r.body or b"")) from None
    except TimeoutError:
        raise UpstreamTimeout("The upstream did not open the WebSocket in time.") from None
    except (OSError, InvalidHandshake) as exc:
        raise UpstreamUnreachable(f"Cannot open the upstream WebSocket: {type(exc).__name__}.") from None
