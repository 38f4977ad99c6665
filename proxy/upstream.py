"""Raw forwarding to the upstream with httpx: bytes in, bytes out, never a retry.

Request headers pass through except hop-by-hop ones, Host and Content-Length (httpx
sets those for the new connection); httpx's own default headers are not added.
Response status, headers (minus hop-by-hop) and raw body bytes come back as sent.
"""

from __future__ import annotations

from typing import Any, Iterable

import httpx

from proxy.errors import UpstreamTimeout, UpstreamUnreachable

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
    "trailer", "trailers", "transfer-encoding", "upgrade", "proxy-connection",
})
NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length"}


def request_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in raw if k.decode("latin-1").lower() not in NOT_FORWARDED]


def response_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(k.lower(), v) for k, v in raw if k.decode("latin-1").lower() not in HOP_BY_HOP]


class Upstream:
    def __init__(self, base_url: str, timeout: float, connect_timeout: float,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            transport=transport,
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100),
            follow_redirects=False,
            trust_env=False,
        )

    def url_for(self, path: str, query: str) -> str:
        """``/v1/x`` and ``/x`` both map to ``<upstream base>/x``."""
        tail = path[3:] if path.startswith("/v1/") else path
        return f"{self.base_url}{tail}" + (f"?{query}" if query else "")

    async def send(self, method: str, path: str, query: str,
                   headers: list[tuple[bytes, bytes]], body: bytes | Any) -> httpx.Response:
        """Send and return the response with its body still streaming."""
        request = self.client.build_request(method, self.url_for(path, query),
                                            headers=headers, content=body)
        sent = {k.decode("latin-1").lower() for k, _ in headers}
        for name in ("user-agent", "accept", "accept-encoding"):
            if name not in sent and name in request.headers:
                del request.headers[name]
        try:
            return await self.client.send(request, stream=True)
        except httpx.TimeoutException:
            raise UpstreamTimeout("The upstream did not answer in time.") from None
        except httpx.TransportError as exc:
            raise UpstreamUnreachable(f"Cannot reach the upstream: {type(exc).__name__}.") from None

    async def aclose(self) -> None:
        await self.client.aclose()
