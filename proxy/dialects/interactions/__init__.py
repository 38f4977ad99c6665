"""Gemini's Interactions API (``POST /v1beta/interactions``, or ``/v1/interactions`` as
google-genai 3 sends it; ``stream: true`` streams; the paths go upstream as they are, the
upstream being Google's host): ``request`` parses and splices ``system_instruction`` and
``input`` (``steps`` reads the steps), ``usage`` reads the interaction's ``usage``,
errors take Google's shape (``gemini.errors``), ``recall`` offers and answers
``context_recall`` (``recall_stream`` reads a streamed reply). The key
travels as ``x-goog-api-key`` or ``?key=``. A ``previous_interaction_id`` continues
server-held state (recorded as ``server_state``). The other interaction endpoints (get,
cancel, delete) pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

from context_engine.proxy.dialects.dialect import DialectBase
from context_engine.proxy.dialects.gemini import errors
from context_engine.proxy.dialects.interactions import request, usage, write
from context_engine.proxy.dialects.interactions.recall import INTERACTIONS as RECALL


class InteractionsDialect(DialectBase):
    name = "interactions"
    routes = ("/v1beta/interactions", "/v1/interactions")
    conversation = ("system_instruction", "input")
    passthrough = ()  # get, cancel, delete: under Gemini's and chat's catch-all routes
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
        return path.startswith(("/v1beta/interactions", "/v1/interactions"))


INTERACTIONS = InteractionsDialect()
