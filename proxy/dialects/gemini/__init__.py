"""Gemini ``generateContent`` and ``streamGenerateContent`` (``POST
/v1beta/models/{model}:generateContent``, or ``/v1/…`` as google-genai 3 sends it;
``?alt=sse`` streams; the paths go upstream as they are, the upstream being Google's host): ``request`` parses and
splices ``contents`` and ``systemInstruction``, ``usage`` reads ``usageMetadata``,
``errors`` has Google's error shape, ``recall`` is the ``context_recall`` tool on this
wire. The key travels as ``x-goog-api-key`` or ``?key=``. Gemini's other endpoints
(``models``, ``countTokens``, ``cachedContents``, …) pass through unchanged; a
``cachedContent`` reference is left as it is. Caching is implicit (or explicit through
``cachedContents``): there are no breakpoints to keep.
"""

from __future__ import annotations

from collections.abc import Mapping

from context_engine.proxy.dialects.dialect import DialectBase
from context_engine.proxy.dialects.gemini import errors, request, usage, write
from context_engine.proxy.dialects.gemini.recall import GEMINI as RECALL

METHODS = (":generateContent", ":streamGenerateContent")


class GeminiDialect(DialectBase):
    name = "gemini"
    routes = tuple(f"/{v}/models/{{model}}{m}" for v in ("v1beta", "v1") for m in METHODS)
    conversation = ("systemInstruction", "contents")
    passthrough = ("/v1beta/{path:path}",)
    versioned_paths = True
    key_headers = ("x-goog-api-key", "authorization")
    key_query = "key"
    prompt_cache_key = False
    recall = RECALL
    parse = staticmethod(request.parse)
    error_body = staticmethod(errors.error_body)
    take_usage = staticmethod(usage.take_usage)
    ends = staticmethod(usage.ends)
    write = staticmethod(write.write)

    def speaks(self, path: str, headers: Mapping[str, str]) -> bool:
        return path.startswith("/v1beta/") or path.endswith(METHODS) or "x-goog-api-key" in headers


GEMINI = GeminiDialect()
