"""Small stream chunks, relayed in batches: the same bytes in order, in fewer writes.

An upstream that streams a token a millisecond hands the proxy one small chunk per token
(HTTP/1.1 chunked encoding: the parser yields chunk by chunk, however many arrived in one
read). Relayed one by one, each costs the event loop a parse, a usage read and a write,
and every other request waits behind them. ``batches`` reads the chunks as they come (in
its own task) and yields what has arrived, joined; after a small batch it waits
``wait_s`` before yielding the next, so a fast stream goes out in a write per ``wait_s``
and a slow one (events further apart than ``wait_s``) as it comes, at most ``wait_s``
later. The reader, too, waits ``wait_s`` after a small chunk it had to wait for: the chunks
that come meanwhile gather in the socket's buffer and are taken in one read, not a loop
turn each; once one of those waits lets more than ``FLOWING`` bytes through, the upstream
streams faster than the waits let it (a socket not read holds little, and the upstream
waits while it is full), and the reader reads on. At most ``limit`` bytes are read ahead
of a slow client; past that, reading waits for the client. A fault of the source is raised after every chunk read before it was
yielded, as a plain loop would.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator

import anyio

# a chunk that took longer than this to come was not yet read: the pump had caught up
CAUGHT_UP_S = 0.0005
# more than this gathered during one of the reader's waits: the upstream streams faster
# than the waits let through (a paused socket holds little), so the reader reads on
FLOWING = 8192


class _Pump:
    """Reads ``source`` into ``pending`` until it ends, a fault or a cancel."""

    def __init__(self, source: AsyncIterator[bytes], limit: int, wait_s: float = 0.0,
                 below: int = 0) -> None:
        self.source, self.limit, self.wait_s, self.below = source, limit, wait_s, below
        self.pending: list[bytes] = []
        self.size = 0
        self.more, self.room = asyncio.Event(), asyncio.Event()
        self.room.set()
        self.ended = False
        self.fault: Exception | None = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        chunks = aiter(self.source)
        waits, gathered = self.wait_s > 0, -1  # bytes read since the last wait (-1: none yet)
        try:
            while True:
                asked = loop.time()
                try:
                    chunk = await anext(chunks)
                except StopAsyncIteration:
                    break
                self.pending.append(chunk)
                self.size += len(chunk)
                self.more.set()
                if self.size >= self.limit:
                    self.room.clear()
                    await self.room.wait()
                elif waits and len(chunk) < self.below and loop.time() - asked > CAUGHT_UP_S:
                    # a small chunk that had to be waited for: what was read is out, so let
                    # the next ones gather in the socket's buffer and take them in one read,
                    # unless the last wait let more than FLOWING through: then read on
                    waits = gathered < FLOWING
                    if waits:
                        await anyio.sleep(self.wait_s)
                        gathered = 0
                elif gathered >= 0:
                    gathered += len(chunk)
        except Exception as exc:  # the consumer raises it once the chunks before it are out
            self.fault = exc
        finally:
            self.ended = True
            self.more.set()

    def take(self) -> bytes:
        batch = b"".join(self.pending)
        self.pending.clear()
        self.size = 0
        self.room.set()
        return batch


async def batches(source: AsyncIterator[bytes], wait_s: float, below: int,
                  limit: int = 1 << 20) -> AsyncGenerator[bytes, None]:
    pump = _Pump(source, limit, wait_s, below)
    task = asyncio.get_running_loop().create_task(pump.run())
    try:
        while True:
            await pump.more.wait()
            pump.more.clear()
            ended = pump.ended  # everything it read is in ``pending`` now
            batch = pump.take() if pump.pending else b""
            if batch:
                yield batch
            if ended:
                if pump.fault is not None:
                    raise pump.fault
                return
            if len(batch) < below:
                await anyio.sleep(wait_s)
    finally:
        task.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait([task])
