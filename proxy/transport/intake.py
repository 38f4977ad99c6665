"""Request bodies in, under limits; body-size work off the event loop.

- ``Intake.read``: a body larger than ``max_body_bytes`` is refused (413); one not read
  within ``body_read_timeout`` seconds is refused (408), so a client that stalls mid-body
  holds no connection, memory or budget for long.
- One budget of body bytes in flight (``max_inflight_body_bytes``) for every request
  being read or prepared: a body is charged its declared length at once (chunked ones,
  chunk by chunk) and gives it back when its handler returns. A body that does not fit
  is refused with 503 and ``retry-after: 1``: many large bodies at once cannot take the
  process's memory.
- ``off_loop``: work that grows with a body (parsing, surrogate scrubbing, token
  counting, splicing) runs in a thread once the body passes ``OFFLOAD_BYTES``, so a
  large request never stalls every other request on the event loop.

One ``Intake`` per app (``create_app``), shared by its routes; it lives on the event loop
(no lock: the loop is one thread).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from starlette.requests import Request

from context_engine.proxy.errors import BodyTimeout, BodyTooLarge, ServerBusy

T = TypeVar("T")
OFFLOAD_BYTES = 64 * 1024  # bodies from this size on are handled in a thread


async def off_loop(size: int, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, in a thread when ``size`` (the bytes it works on) is large."""
    if size < OFFLOAD_BYTES:
        return fn(*args)
    return await asyncio.to_thread(fn, *args)


class Ticket:
    """The bytes one request holds of the budget."""

    def __init__(self, intake: Intake) -> None:
        self.intake = intake
        self.held = 0

    def take(self, n: int) -> None:
        if self.intake.in_flight + n > self.intake.budget:
            self.intake.refused += 1
            raise ServerBusy("The proxy is reading too many request bodies at once; retry shortly.")
        self.intake.in_flight += n
        self.held += n

    def release(self) -> None:
        self.intake.in_flight -= self.held
        self.held = 0


class Intake:
    def __init__(self, max_body_bytes: int, budget: int, read_timeout: float) -> None:
        self.max_body_bytes = max_body_bytes
        self.budget = budget
        self.read_timeout = read_timeout
        self.in_flight = 0  # bytes held by requests being read or prepared
        self.refused = 0  # requests refused because the budget was spent

    def ticket(self) -> Ticket:
        return Ticket(self)

    async def read(self, request: Request, ticket: Ticket) -> bytes:
        try:
            return await asyncio.wait_for(self._read(request, ticket), self.read_timeout)
        except TimeoutError:
            raise BodyTimeout(f"The request body was not received within {self.read_timeout:g} s.") from None

    async def _read(self, request: Request, ticket: Ticket) -> bytes:
        limit = self.max_body_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isdigit():
            if int(declared) > limit:
                raise BodyTooLarge(f"The request body is larger than the limit of {limit} bytes.")
            ticket.take(int(declared))
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(f"The request body is larger than the limit of {limit} bytes.")
            if size > ticket.held:
                ticket.take(size - ticket.held)
            chunks.append(chunk)
        return b"".join(chunks)
