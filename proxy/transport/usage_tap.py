"""Reads ``usage`` (and the reply text) out of response bytes without changing them.

It reads each API's shape: chat completions (``usage.prompt_tokens``), Responses
(``response.completed``: ``input_tokens``, ``input_tokens_details.cached_tokens``,
``output_tokens``) and Anthropic Messages (``message_start`` + ``message_delta``:
``input_tokens``, ``cache_read_input_tokens``, ``cache_creation_input_tokens``,
``output_tokens``, summed over ``usage.iterations`` where present). ``prompt_tokens`` is
always every input token the upstream billed, cache reads and writes included, so the
three APIs compare.

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
ANTHROPIC = {"message", "message_start", "message_delta", "content_block_delta"}


@dataclass
class Usage:
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    text_parts: list[str] = field(default_factory=list)
    cache_write_tokens: int | None = None
    notes: list[str] = field(default_factory=list)  # malformed usage, kept for the ledger
    iterated: bool = False  # Anthropic: counts summed over usage.iterations; they stand
    text_chars: int = field(default=0, repr=False, compare=False)  # in text_parts

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def _text(self, s: Any) -> None:
        if isinstance(s, str) and self.text_chars < MAX_TEXT:
            self.text_parts.append(s)
            self.text_chars += len(s)

    def take(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            return
        kind = obj.get("type") or obj.get("object")
        if isinstance(kind, str) and (kind == "response" or kind.startswith("response.")):
            self._responses(obj)
        elif kind in ANTHROPIC:
            self._anthropic(obj)
        else:
            self._chat(obj)

    def _responses(self, obj: dict[str, Any]) -> None:
        if obj.get("type") == "response.output_text.delta":
            self._text(obj.get("delta"))
            return
        resp = obj.get("response") if "response" in obj else obj
        if not isinstance(resp, dict):
            return
        usage = resp.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = _int(usage.get("input_tokens"))
            self.completion_tokens = _int(usage.get("output_tokens"))
            details = usage.get("input_tokens_details")
            self.cached_tokens = _int(details.get("cached_tokens")) if isinstance(details, dict) else None
        status = resp.get("status")
        if isinstance(status, str) and status not in ("in_progress", "queued"):
            reason = _dict(resp.get("incomplete_details")).get("reason")
            self.finish_reason = str(reason or status)
        if obj is resp:  # a whole response body: its text is in the output items
            for item in _list(resp.get("output")):
                for part in _list(_dict(item).get("content")):
                    if isinstance(part, dict) and part.get("type") == "output_text":
                        self._text(part.get("text"))

    def _anthropic(self, obj: dict[str, Any]) -> None:
        kind = obj.get("type")
        if kind == "content_block_delta":
            delta = obj.get("delta")
            if isinstance(delta, dict):
                self._text(delta.get("text"))
            return
        msg = obj.get("message") if kind == "message_start" else obj
        if not isinstance(msg, dict):
            return
        usage = msg.get("usage")
        if isinstance(usage, dict) and (not self.iterated or "iterations" in usage):
            summed = _sum_iterations(usage)
            self.iterated, usage = summed is not usage, summed
            fresh = _int(usage.get("input_tokens"))
            read = _int(usage.get("cache_read_input_tokens"))
            write = _int(usage.get("cache_creation_input_tokens"))
            if fresh is not None:
                self.prompt_tokens = fresh + (read or 0) + (write or 0)
            if read is not None:
                self.cached_tokens = read
            if write is not None:
                self.cache_write_tokens = write
            if _int(usage.get("output_tokens")) is not None:
                self.completion_tokens = _int(usage["output_tokens"])
        stop = _dict(obj.get("delta")).get("stop_reason") if kind == "message_delta" else msg.get("stop_reason")
        if isinstance(stop, str):
            self.finish_reason = stop
        if kind == "message":
            for block in _list(msg.get("content")):
                if isinstance(block, dict) and block.get("type") == "text":
                    self._text(block.get("text"))

    def _chat(self, obj: dict[str, Any]) -> None:
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self._usage(usage)
        elif usage is not None:
            self._note(f"usage is a {type(usage).__name__}, not an object")
        for choice in _list(obj.get("choices")):
            if not isinstance(choice, dict):
                continue
            if isinstance(choice.get("finish_reason"), str) and choice["finish_reason"]:
                self.finish_reason = choice["finish_reason"]
            part = choice.get("delta") or choice.get("message") or {}
            self._text(part.get("content") if isinstance(part, dict) else None)

    def _usage(self, usage: dict[str, Any]) -> None:
        """OpenAI's fields, plus cache writes and reads as litellm and Anthropic's
        OpenAI-compatible layer report them; bad values are noted and ignored."""
        self.prompt_tokens = self._count(usage, "prompt_tokens")
        self.completion_tokens = self._count(usage, "completion_tokens")
        details = usage.get("prompt_tokens_details")
        if details is not None and not isinstance(details, dict):
            self._note("prompt_tokens_details is not an object")
            details = None
        details = details or {}
        cached = self._count(details, "cached_tokens")
        if cached is None:
            cached = self._count(usage, "cache_read_input_tokens")
        write = self._count(usage, "cache_creation_input_tokens")
        if write is None:
            write = self._count(details, "cache_write_tokens")
        if self.prompt_tokens is not None and (cached or 0) + (write or 0) > self.prompt_tokens:
            self._note(f"cached {cached} + written {write} > prompt_tokens {self.prompt_tokens}")
            cached, write = min(cached or 0, self.prompt_tokens), None
        self.cached_tokens, self.cache_write_tokens = cached, write

    def _count(self, d: dict[str, Any], key: str) -> int | None:
        v = d.get(key)
        if v is None:
            return None
        n = _int(v)
        if n is None or n < 0:
            self._note(f"usage {key}={str(v)[:30]!r} is not a count")
            return None
        return n

    def _note(self, text: str) -> None:
        if text not in self.notes and len(self.notes) < 5:
            self.notes.append(text)


_END_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed",
                         "message_stop"})
ITERATION_FIELDS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
                    "output_tokens")


def _sum_iterations(usage: dict[str, Any]) -> dict[str, Any]:
    """Anthropic's usage with ``iterations`` (server-side compaction runs more than one
    sampling step per request): the top-level counts leave the compaction steps out, and
    what is billed is the sum over the iterations, field by field."""
    steps = usage.get("iterations")
    if not isinstance(steps, list) or not steps or not all(isinstance(i, dict) for i in steps):
        return usage
    summed = dict(usage)
    for key in ITERATION_FIELDS:
        counts = [_int(i.get(key)) for i in steps]
        if any(c is not None for c in counts):
            summed[key] = sum(c or 0 for c in counts)
    return summed


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


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
        self._line_parts: list[bytes] = []  # the line being read, before its newline
        self._body: list[bytes] = []
        # the stream's own end was relayed ([DONE], response.completed/incomplete/failed,
        # message_stop): a client that leaves after it had the whole answer
        self.ended = False

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
        if b"\n" not in data:  # a long line in pieces: joined once, at its end
            self._line_parts.append(data)
            return
        first, *lines, rest = data.split(b"\n")
        self._line(b"".join(self._line_parts) + first)
        for line in lines:
            self._line(line)
        self._line_parts = [rest] if rest else []

    def _line(self, line: bytes) -> None:
        line = line.rstrip(b"\r")
        if not line.startswith(b"data:"):
            return
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.ended = True
        if not payload or payload == b"[DONE]":
            return
        try:
            event = json.loads(payload)
        except ValueError:
            return
        self.usage.take(event)
        if isinstance(event, dict) and event.get("type") in _END_EVENTS:
            self.ended = True

    def close(self) -> Usage:
        if not self._readable:
            return self.usage
        if self.stream:
            if self._line_parts:
                self._line(b"".join(self._line_parts))
                self._line_parts = []
        else:
            try:
                self.usage.take(json.loads(b"".join(self._body)))
            except ValueError:
                pass
        return self.usage
