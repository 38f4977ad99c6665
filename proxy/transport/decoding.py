"""The one decompressor: response bodies in a ``content-encoding`` the proxy reads on the
side (gzip; deflate with a zlib header or raw, as some servers send it), whole or chunk
by chunk. The client always gets the bytes as they came; ``readable`` says which
encodings httpx itself decodes (``aiter_bytes``)."""

from __future__ import annotations

import zlib

READABLE = frozenset({"", "identity", "gzip", "deflate"})  # httpx decodes these
GZIP_OR_ZLIB, RAW = 47, -15  # wbits: a gzip or zlib header; else raw deflate


def readable(encoding: str) -> bool:
    """Whether httpx decodes a body of this ``content-encoding`` (``aiter_bytes``)."""
    return all(e.strip().lower() in READABLE for e in encoding.split(","))


class Decoder:
    """A body in ``encoding``, decoded chunk by chunk; ``ok`` false once it cannot be."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding.lower().strip()
        self.ok = self.encoding in ("", "identity", "gzip", "deflate")
        self.plain = self.encoding in ("", "identity")
        self._dec = zlib.decompressobj(GZIP_OR_ZLIB)
        self._first = True

    def feed(self, chunk: bytes) -> bytes:
        """The decoded bytes of ``chunk`` (``b""`` once ``ok`` is false)."""
        if not self.ok or self.plain:
            return chunk if self.ok else b""
        first, self._first = self._first, False
        try:
            return self._dec.decompress(chunk)
        except zlib.error:
            if not first:
                self.ok = False
                return b""
        self._dec = zlib.decompressobj(RAW)  # no gzip or zlib header: raw deflate
        try:
            return self._dec.decompress(chunk)
        except zlib.error:
            self.ok = False
            return b""

    @property
    def complete(self) -> bool:
        """The compressed stream reached its end (always true for a plain body)."""
        return self.plain or self._dec.eof


def decoded(body: bytes, encoding: str) -> bytes | None:
    """A whole body decoded; None when it cannot be (unknown encoding, corrupt, cut)."""
    decoder = Decoder(encoding)
    out = decoder.feed(body)
    return out if decoder.ok and decoder.complete else None
