"""Answering ``context_recall`` inside the proxy: the client sees only the final reply.

The same loop serves every API; what differs (where the calls are, the follow-up,
the stream's events) is the request's dialect's ``recall`` (a ``dialects.recall_wire.Wire``).

When the upstream's reply calls ``context_recall``, the proxy resolves the calls from the
caller's own session (``engine/recall_resolve.py``: in the request lane, at most
``recall.max_calls`` per reply, ``recall.max_total_chars`` of text per request), appends the assistant's recall calls and their
results to what it sent, and asks again, at most ``recall.max_rounds`` times; the last
follow-up goes without the tool, so its reply cannot call it again. A reply that mixes
recall calls with the client's own tool calls is asked again with only the recall calls
answered: the model repeats its client calls in the next reply, and the client never sees
a recall call. The usage the client gets is summed over the rounds; the ledger records
the follow-ups' tokens as the cost of recall.

Non-streamed replies are read whole (``answer``); streamed ones in ``recall.stream``. A
reply without a recall call is relayed byte for byte. A follow-up that fails reaches the
client as that failure. Compressed bodies are read (gzip, deflate, raw deflate); a reply
the proxy changed (summed usage) goes out uncompressed, any other with its encoding; a
200 reply in an encoding the proxy cannot read (br, zstd) answers 502, since it may
call the tool (the request asks for gzip or identity: ``proxy.edge.conversation``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.background import BackgroundTask
from starlette.responses import Response

from context_engine.proxy.dialects.dialect import Dialect
from context_engine.proxy.dialects.jsonspan import object_spans, replace_spans
from context_engine.proxy.dialects.recall_wire import Round, Turn, Wire, sum_counts
from context_engine.proxy.dialects.usage import Usage
from context_engine.proxy.engine.lanes import RequestLane
from context_engine.proxy.engine.recall_resolve import RecallScope, resolve_calls
from context_engine.proxy.errors import ProxyError, UpstreamBroken, error_response
from context_engine.proxy.transport.decoding import decoded
from context_engine.proxy.transport.intake import off_loop
from context_engine.proxy.transport.relay import Done, fault
from context_engine.proxy.transport.upstream import Upstream, response_headers
from context_engine.proxy.transport.usage_tap import UsageTap

log = logging.getLogger("context_engine.recall")
ROUNDS_HEADER = b"x-context-engine-recall-rounds"


@dataclass
class Recall:
    """One request's recall loop: where to ask again and what was asked so far."""

    upstream: Upstream
    url: str
    headers: list[tuple[bytes, bytes]]
    sent: bytes  # the request body as sent (with the tool); parsed only for a follow-up
    scope: RecallScope
    max_rounds: int
    dialect: Dialect
    lane: RequestLane | None = None  # where calls are resolved (None: inline, tests)
    session: str = ""  # the lane's key: the session's rewrites and recalls run in order
    max_calls: int = 8
    deadline_s: float | None = None
    rounds: list[Round] = field(default_factory=list)
    usages: list[Usage] = field(default_factory=list)  # one per upstream reply
    raw_usages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def wire(self) -> Wire:
        return self.dialect.recall

    def answer_calls(self, turn: Turn) -> bool:
        """Open a new round for the reply's recall calls; False when it has none or no
        round is left. ``ask_again`` resolves them (off the event loop)."""
        if not turn.calls or len(self.rounds) >= self.max_rounds:
            return False
        self.rounds.append((turn, []))
        return True

    async def ask_again(self) -> httpx.Response:
        turn, results = self.rounds[-1]
        if not results:
            results[:] = await resolve_calls(self.scope, [c.arguments for c in turn.calls],
                                             lane=self.lane, session=self.session,
                                             max_calls=self.max_calls, deadline_s=self.deadline_s)
        body = await off_loop(len(self.sent), self._follow_up)
        return await self.upstream.send("POST", self.url, self.headers, body)

    def _follow_up(self) -> bytes:
        return self.wire.follow_up(json.loads(self.sent), self.rounds,
                                   last=len(self.rounds) >= self.max_rounds)

    def usage(self) -> Usage:
        """Usage over every reply: counts summed, the last reply's finish and text."""
        total = Usage()
        for u in self.usages:
            for name in ("prompt_tokens", "cached_tokens", "completion_tokens", "cache_write_tokens"):
                value = getattr(u, name)
                if value is not None:
                    setattr(total, name, (getattr(total, name) or 0) + value)
            total.notes += u.notes
        if self.usages:
            total.finish_reason, total.text_parts = self.usages[-1].finish_reason, self.usages[-1].text_parts
        return total

    def cost(self) -> tuple[int, int, int]:
        """Follow-up calls, and their input and output tokens: the cost of recall."""
        extra = self.usages[1:]
        return (len(self.rounds), sum(u.prompt_tokens or 0 for u in extra),
                sum(u.completion_tokens or 0 for u in extra))

    def summed_usage(self, last: dict[str, Any]) -> dict[str, Any]:
        """``last`` (the final reply's usage object) with every count summed over rounds."""
        return sum_counts(last, self.raw_usages)


def reply_json(body: bytes, encoding: str) -> dict[str, Any] | None:
    plain = decoded(body, encoding)
    try:
        data = json.loads(plain) if plain is not None else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


async def answer(loop: Recall, r: httpx.Response, started: float,
                 extra: list[tuple[bytes, bytes]], on_done: Done) -> Response:
    """The non-streamed reply the client gets, after any recall rounds."""
    def finish(status: int, error: str) -> None:
        on_done(loop.usage(), (time.perf_counter() - started) * 1000, error, status)

    while True:
        try:
            body = b"".join([chunk async for chunk in r.aiter_raw()])
        except httpx.HTTPError as exc:
            problem = fault(exc, "mid-body")
            log.warning(problem.message)
            finish(problem.status, problem.message)
            return error_response(problem, loop.dialect.error_body)
        finally:
            await r.aclose()
        encoding = r.headers.get("content-encoding", "")
        tap = UsageTap(loop.dialect, encoding)
        tap.feed(body)
        loop.usages.append(tap.close())
        data = reply_json(body, encoding) if r.status_code == 200 else None
        if r.status_code == 200 and decoded(body, encoding) is None:  # it may call the tool
            problem = UpstreamBroken(f"the upstream answered in a content-encoding the proxy "
                                     f"cannot read ({encoding}) to a request offering context_recall")
            log.warning(problem.message)
            finish(problem.status, problem.message)
            return error_response(problem, loop.dialect.error_body)
        key = loop.wire.usage_key
        if data is not None and isinstance(data.get(key), dict):
            loop.raw_usages.append(data[key])
        if data is None or not loop.answer_calls(loop.wire.turn(data)):
            break
        try:
            r = await loop.ask_again()
        except ProxyError as exc:
            finish(exc.status, exc.message)
            return error_response(exc, loop.dialect.error_body)
    headers = response_headers(r.headers.raw) + extra
    if loop.rounds:
        plain = decoded(body, encoding) if data is not None else None
        gone = (b"content-length", b"content-encoding") if plain is not None else (b"content-length",)
        headers = [(k, v) for k, v in headers if k not in gone]  # encoding: only if decoded
        headers.append((ROUNDS_HEADER, str(len(loop.rounds)).encode()))
        if plain is not None and data is not None:
            body = _with_usage(loop, plain, data)
    if not any(k == b"content-length" for k, _ in headers):
        headers.append((b"content-length", str(len(body)).encode()))
    response = Response(content=body, status_code=r.status_code,
                        background=BackgroundTask(_call, finish, r.status_code, ""))
    response.raw_headers = headers
    return response


def _with_usage(loop: Recall, body: bytes, data: dict[str, Any]) -> bytes:
    """The final reply with its usage summed over the rounds, and the fields the wire
    shows as they would be without the rounds (``Wire.shown``); the rest as sent."""
    key = loop.wire.usage_key
    edits = {k: json.dumps(v, ensure_ascii=False, separators=(",", ":"))
             for k, v in loop.wire.shown(data, loop.sent).items()}
    if isinstance(data.get(key), dict):
        edits[key] = json.dumps(loop.summed_usage(data[key]), separators=(",", ":"))
    if not edits:
        return body
    text = body.decode("utf-8")
    _, spans = object_spans(text)
    return replace_spans(text, [(spans[k], v) for k, v in edits.items() if k in spans])


async def _call(fn: Callable[[int, str], None], status: int, error: str) -> None:
    fn(status, error)
