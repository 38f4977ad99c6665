"""The one SSE reader: a byte stream, chunked anyhow, into its events.

``Events`` is fed chunks and returns each event whole, with its blank-line terminator,
as the upstream sent it (the recall loop relays or holds events byte for byte; the usage
tap reads them). Linear in the body: an event's chunks are joined once, when its end
arrives, and each byte is searched once for an end. ``payloads`` gives an event's
``data:`` lines, ``event_json`` its data as a JSON object, ``with_data`` the event with
new data (its other lines as sent).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx

from context_engine.proxy.transport.decoding import Decoder

EVENT_END = re.compile(rb"\n\n|\r\n\r\n")


class Events:
    """Chunks in, whole events out."""

    def __init__(self) -> None:
        self.pending: list[bytes] = []  # the chunks of an event whose end has not arrived
        self.tail = b""  # the last bytes of ``pending``: an end may begin there

    def feed(self, chunk: bytes) -> list[bytes]:
        if not EVENT_END.search(self.tail + chunk):
            if chunk:
                self.pending.append(chunk)
                self.tail = (self.tail + chunk)[-3:]
            return []
        buf = b"".join(self.pending) + chunk
        out = []
        start, pos = 0, max(0, len(buf) - len(chunk) - len(self.tail))
        while (end := EVENT_END.search(buf, pos)) is not None:
            out.append(buf[start:end.end()])
            start = pos = end.end()
        rest = buf[start:]
        self.pending, self.tail = ([rest] if rest else []), rest[-3:]
        return out

    def close(self) -> list[bytes]:
        """The unterminated rest, as a last event."""
        rest, self.pending, self.tail = b"".join(self.pending), [], b""
        return [rest] if rest else []


async def sse_events(r: httpx.Response) -> AsyncIterator[bytes]:
    """The body's SSE events, decoded here (``proxy.transport.decoding``: a ``readable``
    encoding, at most ``MAX_DECODED_BYTES``; past that, or corrupt, ``httpx.DecodingError``)."""
    events, decoder = Events(), Decoder(r.headers.get("content-encoding", ""))
    async for chunk in r.aiter_raw():
        data = decoder.feed(chunk)
        if not decoder.ok:  # past the bound, or corrupt: a fault, as a broken transfer is
            raise httpx.DecodingError(f"the upstream's stream cannot be decoded ({decoder.encoding}"
                                      f"{', past the bound of decompressed bytes' if decoder.over else ''})",
                                      request=r.request)
        for event in events.feed(data):
            yield event
    for event in events.close():
        yield event


def payloads(event: bytes) -> list[bytes]:
    """The event's ``data:`` payloads, stripped."""
    return [line[5:].strip() for line in event.splitlines() if line.startswith(b"data:")]


def event_json(event: bytes) -> dict[str, Any] | None:
    """The event's first data line as a JSON object (None: not one)."""
    for payload in payloads(event):
        if payload[:1] != b"{":
            return None
        try:
            data = json.loads(payload)
        except ValueError:
            return None
        return data if isinstance(data, dict) else None
    return None


def with_data(event: bytes, obj: dict[str, Any]) -> bytes:
    """The event with its data line replaced by ``obj`` (its other lines as sent)."""
    lines = [line for line in event.splitlines() if line.strip()]
    data = b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    out = [data if line.startswith(b"data:") else line for line in lines]
    return b"\n".join(out) + b"\n\n"
