"""What every part of the proxy asks of an API: the ``Dialect`` protocol.

sqlglot bundles a SQL dialect's tokenizer, parser and generator around one AST; a
dialect here bundles everything one LLM API says differently, around the neutral
conversation (chat-completions messages, ``proxy.dialects.base``):

- **the request**: ``parse`` reads the client's bytes into the neutral form, and the
  ``Parsed`` it returns splices the rules' result back into those bytes (only the
  ``conversation`` fields change); ``routes`` are
  the paths it serves, ``passthrough`` the routes of its other endpoints (forwarded as
  they are), ``versioned_paths`` whether its paths carry the API version;
- **the caller**: where its API key travels (``key_headers``, ``key_query``), for the
  caller's scope (``credential``: every credential presented, the client token too) and
  for spotting requests without one (``has_credential``: what goes upstream);
- **the response**: ``take_usage`` reads a body or one stream event into ``Usage``,
  ``ends`` says whether an event is the stream's own end, ``error_body`` writes the
  proxy's own errors in the API's shape (``speaks`` tells a client of this API on a
  route every API shares);
- **recall**: ``recall`` is the ``context_recall`` tool on this wire (its shape, when it
  may be offered, the follow-up, the streamed replies: ``proxy.dialects.recall_wire``);
- **writing**: ``write`` makes a fresh request of a neutral conversation (the
  generator half, as sqlglot's; ``bench --api`` sends its cases so);
- **caching**: ``prompt_cache_key`` says whether the API takes OpenAI's
  ``prompt_cache_key`` field; breakpoints (``cache_control``) ride on the neutral form.

The edge, the recall loop, the relay, billing and recording call this protocol and
never ask which API they serve; ``proxy.dialects.registry`` lists the dialects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol
from urllib.parse import parse_qsl

from context_engine.proxy.dialects.base import Parsed
from context_engine.proxy.dialects.recall_wire import Wire
from context_engine.proxy.dialects.usage import Usage
from context_engine.proxy.dialects.writing import Opaque
from context_engine.proxy.engine.session import TOKEN_HEADER, presented
from context_engine.proxy.errors import ProxyError


class Dialect(Protocol):
    @property
    def name(self) -> str:
        """The ledger's ``api``."""

    @property
    def routes(self) -> tuple[str, ...]: ...

    @property
    def conversation(self) -> tuple[str, ...]:
        """The body's top-level fields a rewrite may change; every other keeps its bytes."""

    @property
    def passthrough(self) -> tuple[str, ...]: ...

    @property
    def key_headers(self) -> tuple[str, ...]:
        """The headers that carry the caller's key, in the order they are read."""

    @property
    def key_query(self) -> str:
        """The query parameter that carries it ("" when none)."""

    @property
    def prompt_cache_key(self) -> bool: ...

    @property
    def versioned_paths(self) -> bool:
        """Its paths carry the API version (the upstream is the host's root): they go
        upstream as they are, where ``/v1/x`` otherwise maps to ``<upstream>/x``."""

    @property
    def recall(self) -> Wire: ...

    def parse(self, raw: bytes, path: str = "", max_items: int = 0) -> Parsed:
        """The request (``path``: where it was sent); ``BadRequest`` when invalid. With
        ``max_items`` (the message cap), a request that makes more neutral messages is
        counted first and only its head translated (``Parsed.over``)."""

    def error_body(self, exc: ProxyError) -> bytes: ...

    def speaks(self, path: str, headers: Mapping[str, str]) -> bool:
        """Whether a request on a shared route (a 404, a passthrough) is this API's client."""

    def take_usage(self, usage: Usage, obj: Any) -> None:
        """Read a whole reply body, or one stream event's JSON, into ``usage``."""

    def ends(self, data: bytes, obj: Any) -> bool:
        """Whether a stream event (its data line ``data``, parsed as ``obj``) is the end."""

    def credential(self, headers: Mapping[str, str], query: str) -> str: ...

    def write(self, model: str, messages: list[Any], tools: Any,
              opaque: Opaque = None) -> tuple[str, bytes]:
        """A fresh request holding a neutral conversation: its path and body (the
        generator half; the bench writes its cases with it)."""

    def has_credential(self, headers: Iterable[tuple[bytes, bytes]], query: str) -> bool: ...


class DialectBase:
    """What most dialects share: the key read from ``key_headers`` and ``key_query``,
    paths that do not carry the version, no claim on shared routes."""

    key_headers: tuple[str, ...] = ("authorization", "api-key", "x-api-key")
    key_query = ""
    versioned_paths = False

    def speaks(self, path: str, headers: Mapping[str, str]) -> bool:
        return False

    def credential(self, headers: Mapping[str, str], query: str) -> str:
        """Every credential the caller presents, canonically (``session.presented``): each
        key header set (each value of a repeated one), the query's key (each value), and
        the client token (``X-Context-Engine-Token``, kept from the upstream but the
        caller's all the same). Any difference in what the upstream checks is a
        different scope; a single key is its value alone."""
        getlist = getattr(headers, "getlist", None)
        found: list[tuple[str, str]] = []
        for name in dict.fromkeys((*self.key_headers, TOKEN_HEADER)):
            values = getlist(name) if getlist is not None else [headers.get(name, "")]
            found += [(name, v) for v in values]
        found += [("?" + self.key_query, v) for v in self._query_keys(query)]
        return presented(found)

    def has_credential(self, headers: Iterable[tuple[bytes, bytes]], query: str) -> bool:
        names = {n.encode() for n in self.key_headers}
        return any(k.lower() in names and v.strip() for k, v in headers) or \
            bool(self._query_key(query).strip())

    def _query_key(self, query: str) -> str:
        return next(iter(self._query_keys(query)), "")

    def _query_keys(self, query: str) -> list[str]:
        if not self.key_query or not query:
            return []
        return [v for k, v in parse_qsl(query, keep_blank_values=True) if k == self.key_query]
