"""Chat Completions (``POST /v1/chat/completions``): the neutral form itself.

``request`` parses and splices (``body`` does the work), ``usage`` reads replies,
``recall`` is the ``context_recall`` tool on this wire; errors take OpenAI's shape, the
default every other client gets too.
"""

from __future__ import annotations

from context_engine.proxy.dialects.chat import request, usage, write
from context_engine.proxy.dialects.chat.recall import CHAT as RECALL
from context_engine.proxy.dialects.dialect import DialectBase
from context_engine.proxy.errors import openai_body


class ChatDialect(DialectBase):
    name = "chat"
    routes = ("/v1/chat/completions", "/chat/completions")
    conversation = ("messages",)
    passthrough = ("/v1/{path:path}",)
    prompt_cache_key = True
    recall = RECALL
    parse = staticmethod(request.parse)
    error_body = staticmethod(openai_body)
    take_usage = staticmethod(usage.take_usage)
    ends = staticmethod(usage.ends)
    write = staticmethod(write.write)


CHAT = ChatDialect()
