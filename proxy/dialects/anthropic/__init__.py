"""Anthropic Messages (``POST /v1/messages``): ``request`` parses and splices (``turns``
keeps the rewrite valid for Anthropic), ``usage`` reads replies, ``errors`` has
Anthropic's error shape, ``recall`` is the ``context_recall`` tool on this wire. A
client of Anthropic's is known on any route by ``/v1/messages*`` or its
``anthropic-version`` header."""

from __future__ import annotations

from collections.abc import Mapping

from context_engine.proxy.dialects.anthropic import errors, request, usage, write
from context_engine.proxy.dialects.anthropic.recall import ANTHROPIC as RECALL
from context_engine.proxy.dialects.dialect import DialectBase


class AnthropicDialect(DialectBase):
    name = "anthropic"
    routes = ("/v1/messages",)
    conversation = ("system", "messages")
    passthrough = ()
    prompt_cache_key = False
    recall = RECALL
    parse = staticmethod(request.parse)
    error_body = staticmethod(errors.error_body)
    take_usage = staticmethod(usage.take_usage)
    ends = staticmethod(usage.ends)
    write = staticmethod(write.write)

    def speaks(self, path: str, headers: Mapping[str, str]) -> bool:
        return path.startswith(("/v1/messages", "/messages")) or "anthropic-version" in headers


ANTHROPIC = AnthropicDialect()
