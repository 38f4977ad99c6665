"""Reads ``usage`` (and the reply text) out of response bytes without changing them.

What a reply says is read by the request's dialect (``Dialect.take_usage``, and
``Dialect.ends`` for a stream's own end); the tap only frames the bytes. Non-streamed
bodies are parsed once at the end; streamed SSE bodies are fed chunk by chunk and read
event by event whatever the chunking (``proxy.transport.sse``), the last non-null usage
winning. Compressed bodies are decoded on the side (``proxy.transport.decoding``); the
client still gets the raw bytes.
"""

from __future__ import annotations

import json

from context_engine.proxy.dialects.dialect import Dialect
from context_engine.proxy.dialects.usage import Usage
from context_engine.proxy.transport.decoding import Decoder
from context_engine.proxy.transport.sse import Events, payloads


class UsageTap:
    def __init__(self, dialect: Dialect, content_encoding: str = "", stream: bool = False) -> None:
        self.dialect = dialect
        self.usage = Usage()
        self.stream = stream
        self._decoder = Decoder(content_encoding)
        self._events = Events()
        self._body: list[bytes] = []
        # the stream's own end was relayed (``Dialect.ends``: ``[DONE]``,
        # ``response.completed``, ``message_stop``, …): a client that leaves after it had
        # the whole answer
        self.ended = False

    def feed(self, chunk: bytes) -> None:
        data = self._decoder.feed(chunk)
        if not self._decoder.ok:
            return
        if not self.stream:
            self._body.append(data)
            return
        for event in self._events.feed(data):
            self._event(event)

    def _event(self, event: bytes) -> None:
        for payload in payloads(event):
            try:
                obj = json.loads(payload) if payload[:1] in (b"{", b"[") else None
            except ValueError:
                obj = None
            if obj is not None:
                self.dialect.take_usage(self.usage, obj)
            if payload and self.dialect.ends(payload, obj):
                self.ended = True

    def close(self) -> Usage:
        if not self._decoder.ok:
            return self.usage
        if self.stream:
            for event in self._events.close():
                self._event(event)
        else:
            try:
                self.dialect.take_usage(self.usage, json.loads(b"".join(self._body)))
            except ValueError:
                pass
        return self.usage
