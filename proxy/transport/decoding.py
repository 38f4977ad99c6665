"""The one decompressor: response bodies in a ``content-encoding`` the proxy reads on the
side (gzip; deflate with a zlib header or raw, as some servers send it), whole or chunk
by chunk. The client always gets the bytes as they came; ``readable`` says which
encodings the proxy decodes.

Decompressing is bounded: a body decodes to at most ``MAX_DECODED_BYTES`` (64 MiB, twice
the default ``max_body_bytes``; an LLM reply, images included, is far smaller), fed to
zlib in steps of 1 MiB that never produce more than what is left of that, so a small gzip "bomb"
that expands to gigabytes costs the proxy at most the bound. Past it the decoder stops
(``ok`` false, ``over`` true): the usage tap stops reading on the side (the client
still gets the upstream's bytes as sent), and a reply the proxy must read to answer
(``decoded``: recall) cannot be read, which the caller answers with a 502 in the
client's API shape; a stream the proxy reads (``proxy.transport.sse.sse_events``) is
aborted like any upstream fault mid-stream.
"""

from __future__ import annotations

import zlib

READABLE = frozenset({"", "identity", "gzip", "deflate"})  # the encodings decoded here
GZIP_OR_ZLIB, RAW = 47, -15  # wbits: a gzip or zlib header; else raw deflate
MAX_DECODED_BYTES = 64 * 1024 * 1024  # what one body may decompress to
STEP = 1024 * 1024  # the most zlib is asked for at once


def _codings(encoding: str) -> list[str]:
    """The codings a ``content-encoding`` applies (``identity`` and blanks left out)."""
    return [e for e in (c.strip().lower() for c in encoding.split(",")) if e not in ("", "identity")]


def readable(encoding: str) -> bool:
    """Whether the proxy decodes a body of this ``content-encoding`` (one coding at most)."""
    codings = _codings(encoding)
    return len(codings) <= 1 and all(c in READABLE for c in codings)


class Decoder:
    """A body in ``encoding``, decoded chunk by chunk, to at most ``limit`` bytes; ``ok``
    false once it cannot be (``over`` true when that is because of the bound)."""

    def __init__(self, encoding: str, limit: int = MAX_DECODED_BYTES) -> None:
        codings = _codings(encoding)
        self.encoding = codings[0] if len(codings) == 1 else ",".join(codings)
        self.ok = readable(encoding)
        self.plain = not codings
        self.limit = limit
        self.size = 0  # bytes decoded so far
        self.over = False
        self._dec = zlib.decompressobj(GZIP_OR_ZLIB)
        self._first = True

    def feed(self, chunk: bytes) -> bytes:
        """The decoded bytes of ``chunk`` (``b""`` once ``ok`` is false)."""
        if not self.ok or self.plain:
            return chunk if self.ok else b""
        first, self._first = self._first, False
        try:
            return self._bounded(chunk)
        except zlib.error:
            if not first:
                self.ok = False
                return b""
        self._dec, self.size = zlib.decompressobj(RAW), 0  # no gzip or zlib header: raw deflate
        try:
            return self._bounded(chunk)
        except zlib.error:
            self.ok = False
            return b""

    def _bounded(self, chunk: bytes) -> bytes:
        """``chunk`` decompressed in steps of at most ``STEP`` bytes, never past what is
        left of the bound (plus one byte, to tell "exactly at the bound" from "past it")."""
        out: list[bytes] = []
        data = chunk
        while True:
            ask = min(STEP, self.limit - self.size + 1)
            piece = self._dec.decompress(data, ask)
            self.size += len(piece)
            if self.size > self.limit:
                self.ok, self.over = False, True
                return b""
            out.append(piece)
            data = self._dec.unconsumed_tail
            if not data and len(piece) < ask:  # input used up, nothing held back
                return b"".join(out)

    @property
    def complete(self) -> bool:
        """The compressed stream reached its end (always true for a plain body)."""
        return self.plain or self._dec.eof


def decoded(body: bytes, encoding: str) -> bytes | None:
    """A whole body decoded; None when it cannot be (unknown encoding, corrupt, cut, or
    decompressing past ``MAX_DECODED_BYTES``)."""
    decoder = Decoder(encoding)
    out = decoder.feed(body)
    return out if decoder.ok and decoder.complete else None
