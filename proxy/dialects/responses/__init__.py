"""The Responses API (``POST /v1/responses``): ``request`` parses and splices, ``usage``
reads replies, ``recall`` is the ``context_recall`` tool on this wire; errors take
OpenAI's shape."""

from __future__ import annotations

from context_engine.proxy.dialects.dialect import DialectBase
from context_engine.proxy.dialects.responses import request, usage, write
from context_engine.proxy.dialects.responses.recall import RESPONSES as RECALL
from context_engine.proxy.errors import openai_body


class ResponsesDialect(DialectBase):
    name = "responses"
    routes = ("/v1/responses", "/responses")
    conversation = ("instructions", "input")
    passthrough = ()
    prompt_cache_key = True
    recall = RECALL
    parse = staticmethod(request.parse)
    error_body = staticmethod(openai_body)
    take_usage = staticmethod(usage.take_usage)
    ends = staticmethod(usage.ends)
    write = staticmethod(write.write)


RESPONSES = ResponsesDialect()
