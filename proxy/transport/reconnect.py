"""When a request is sent to the upstream a second time: a pooled connection it closed.

A kept-alive connection can be closed by the upstream (an idle timeout, a load
balancer, a server that closes after an error) just as the proxy reuses it. The proxy
sends the request once more (never a third time) only when all of these hold:

- the request went out on a connection reused from the pool (no new connection was
  opened for it), and its body is bytes the proxy holds (never a streamed upload);
- the upstream closed that connection before the response's status line arrived;
- the close proves the request was never acted on, or acting twice is harmless:
  a **reset** (``ECONNRESET``/``EPIPE``: the upstream's socket was closed with the
  request unread, so no server read it) for any method, including ``POST``; a clean
  close (EOF) only for idempotent methods (RFC 9110 §9.2.2: ``GET``, ``HEAD``,
  ``OPTIONS``, ``TRACE``, ``PUT``, ``DELETE``), since a server may read a request,
  act on it, and die before answering.

Never on a timeout, on a new connection, after any response header, or twice.
``Attempt`` watches one send through httpcore's ``trace`` extension.
"""

from __future__ import annotations

from typing import Any

import httpx

IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})


class Attempt:
    """The trace of one send: whether it opened a connection, where it failed."""

    def __init__(self) -> None:
        self.connected = False
        self.sent = False
        self.failed_before_response = False

    async def __call__(self, event: str, info: dict[str, Any]) -> None:
        if event.startswith("connection.connect_tcp."):
            self.connected = True
        elif event.endswith(".send_request_headers.started"):
            self.sent = True
        elif event.endswith(".receive_response_headers.failed"):
            self.failed_before_response = True


def _reset(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, (ConnectionResetError, BrokenPipeError)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def send_again(attempt: Attempt, exc: httpx.TransportError, method: str, body: object) -> bool:
    """Whether the request that failed with ``exc`` goes out once more (module doc)."""
    if isinstance(exc, httpx.TimeoutException) or not isinstance(body, bytes):
        return False
    if attempt.connected or not attempt.sent or not attempt.failed_before_response:
        return False
    return _reset(exc) or method.upper() in IDEMPOTENT
