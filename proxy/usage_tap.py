"""Reads ``usage`` (and the reply text) out of response bytes without changing them.

Non-streamed bodies are parsed once at the end; streamed SSE bodies are fed chunk by
chunk, split at line boundaries whatever the chunking, and the last non-null ``usage``
wins. Compressed bodies (gzip, deflate) are decoded on the side; the client still gets
the raw bytes.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any

MAX_TEXT = 200_000


@dataclass
class Usage:
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    text_parts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def take(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            return
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = _int(usage.get("prompt_tokens"))
            self.completion_tokens = _int(usage.get("completion_tokens"))
            details = usage.get("prompt_tokens_details") or {}
            self.cached_tokens = _int(details.get("cached_tokens")) if isinstance(details, dict) else None
        for choice in obj.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
            part = choice.get("delta") or choice.get("message") or {}
            content = part.get("content") if isinstance(part, dict) else None
            if isinstance(content, str) and sum(map(len, self.text_parts)) < MAX_TEXT:
                self.text_parts.append(content)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _decompressor(encoding: str) -> Any:
    encoding = encoding.lower().strip()
    if encoding == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    return None


class UsageTap:
    def __init__(self, content_encoding: str = "", stream: bool = False) -> None:
        self.usage = Usage()
        self.stream = stream
        self._dec = _decompressor(content_encoding) if content_encoding else None
        self._readable = not content_encoding or self._dec is not None
        self._buf = b""
        self._body: list[bytes] = []

    def feed(self, chunk: bytes) -> None:
        if not self._readable:
            return
        try:
            data = self._dec.decompress(chunk) if self._dec else chunk
        except zlib.error:
            self._readable = False
            return
        if not self.stream:
            self._body.append(data)
            return
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            self._line(line)

    def _line(self, line: bytes) -> None:
        line = line.rstrip(b"\r")
        if not line.startswith(b"data:"):
            return
        payload = line[5:].strip()
        if not payload or payload == b"[DONE]":
            return
        try:
            self.usage.take(json.loads(payload))
        except ValueError:
            pass

    def close(self) -> Usage:
        if not self._readable:
            return self.usage
        if self.stream:
            if self._buf:
                self._line(self._buf)
                self._buf = b""
        else:
            try:
                self.usage.take(json.loads(b"".join(self._body)))
            except ValueError:
                pass
        return self.usage
