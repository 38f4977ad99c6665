"""A conversation request, in any dialect (``proxy.dialects``): read, validate, rewrite,
forward, relay, record. The dialect translates the wire format and everything else the
API says its own way; nothing here asks which API it serves.

Fail open at run time: any problem in the rewrite sends the client's original bytes.
Errors of the proxy's own (bad body, upstream unreachable) answer in the API's own
error shape; upstream errors pass through untouched.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from context_engine.proxy.dialects.base import Parsed
from context_engine.proxy.dialects.dialect import Dialect
from context_engine.proxy.dialects.recall_wire import tool_tokens
from context_engine.proxy.dialects.usage import Usage
from context_engine.proxy.edge.keyless import KeylessRefusals
from context_engine.proxy.edge.tags import tags
from context_engine.proxy.engine import modes, profiles
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.engine.recall_state import RecallState
from context_engine.proxy.engine.rewrite import Rewrite
from context_engine.proxy.engine.session import caller_hash, session_id, session_key
from context_engine.proxy.errors import (
    BadRequest,
    ProxyError,
    ServerBusy,
    UpstreamBroken,
    error_response,
)
from context_engine.proxy.recall.loop import Recall, answer
from context_engine.proxy.recall.stream import RecallStream
from context_engine.proxy.recording.finish import Finisher
from context_engine.proxy.recording.row_parts import Answered, Received, Rewritten
from context_engine.proxy.sanitize import model_name
from context_engine.proxy.settings import Settings
from context_engine.proxy.transport.decoding import readable
from context_engine.proxy.transport.intake import Intake, Ticket, off_loop
from context_engine.proxy.transport.relay import relay
from context_engine.proxy.transport.upstream import (
    Upstream,
    kept_here,
    request_headers,
    response_headers,
)

log = logging.getLogger("context_engine.chat")


def accepting(headers: list[tuple[bytes, bytes]], encodings: str) -> list[tuple[bytes, bytes]]:
    """``headers`` with ``accept-encoding`` set to ``encodings`` (the client's dropped)."""
    return [(k, v) for k, v in headers if k.lower() != b"accept-encoding"] + [
        (b"accept-encoding", encodings.encode())]


class Conversation:
    """The routes of one dialect."""

    def __init__(self, engine: Engine, upstream: Upstream, finisher: Finisher,
                 dialect: Dialect, intake: Intake | None = None,
                 keyless: KeylessRefusals | None = None) -> None:
        self.dialect = dialect
        self.wire = dialect.recall
        self.engine = engine
        self.upstream = upstream
        self.finisher = finisher
        self.settings = engine.settings
        self.coalesce_s = engine.settings.stream_coalesce_ms / 1000
        self.session_key = session_key(self.settings.session_key, self.settings.store)
        self.intake = intake or Intake(self.settings.max_body_bytes, self.settings.max_inflight_body_bytes,
                                       self.settings.body_read_timeout)
        self.keyless = keyless or KeylessRefusals()

    async def handle(self, request: Request) -> Response:
        """The request, its body's bytes charged to the intake budget until it returns."""
        ticket = self.intake.ticket()
        try:
            return await self._handle(request, ticket)
        finally:
            ticket.release()

    async def _handle(self, request: Request, ticket: Ticket) -> Response:
        t0, arrived = time.perf_counter(), time.time()
        headers = request_headers(request.headers.raw, kept_here(request.scope))
        query = request.url.query
        has_key = self.dialect.has_credential(headers, query)
        secret = self.dialect.credential(request.headers, query)
        caller = caller_hash(request.headers, self.session_key, secret)
        try:
            url = self.upstream.url_for(request.scope, self.dialect.versioned_paths)
            raw = await self.intake.read(request, ticket)
            mode = modes.resolve(request.headers, self.settings.mode)
            if self.keyless.skip(caller, has_key):  # the upstream will refuse it: not even parsed
                return await self._refused(request, url, headers, raw, mode, t0, arrived, caller)
            body = await off_loop(len(raw), self.dialect.parse, raw, request.url.path,
                                  self.settings.rules_max_messages)  # over it: the head only
        except ProxyError as exc:
            return self._error(exc)
        try:
            choice = profiles.rules_choice(request.headers)
        except ValueError as exc:
            return self._error(BadRequest(str(exc), param=profiles.HEADER))
        self.finisher.begin()
        received, rewritten, rewrite, out, recall = await self.outgoing(request, body, raw, mode, choice,
                                                                        caller, arrived, t0)
        arm = received.arm
        started = time.perf_counter()
        if recall is not None:  # the proxy must read the reply: gzip (decoded on the side) or plain
            headers = accepting(headers, "identity" if body.stream else "gzip")
        try:
            r = await self.upstream.send("POST", url, headers, out)
        except ProxyError as exc:
            await self.engine.settle(rewrite, exc.status)  # unreachable (502/504): not a refusal
            answered = Answered(exc.status, exc.message, (time.perf_counter() - started) * 1000)
            self.finisher.schedule(received, rewritten, answered, body.chat, rewrite, Usage(),
                                   shadow=False, size=len(raw))
            return self._error(exc)
        except asyncio.CancelledError:  # shutdown cut it (proxy/edge/shutdown.py): still a row
            if rewrite is not None and rewrite.pending is not None:
                rewrite.pending.drop()  # nothing is known of its answer
            answered = Answered(503, "cut by shutdown before the upstream answered",
                                (time.perf_counter() - started) * 1000)
            self.finisher.schedule(received, rewritten, answered, body.chat, rewrite, Usage(),
                                   shadow=False, size=len(raw))
            raise
        self.keyless.observe(caller, has_key, r.status_code)
        try:
            await self.engine.settle(rewrite, r.status_code)  # a refusal (4xx) leaves the store as it was
        except BaseException:  # cancelled (the client left): the reply is let go
            await r.aclose()
            raise

        def done(usage: Usage, upstream_ms: float, error: str, status: int) -> None:
            cost = loop.cost() if loop is not None else (0, 0, 0)
            self.finisher.schedule(received, rewritten, Answered.of(usage, status, upstream_ms, error, cost, loop),
                                   body.chat, rewrite, usage,
                                   shadow=arm == "shadow" and body.rewritable and not body.over,
                                   size=len(raw))

        extra = [(b"x-context-engine-tokens-before", str(rewritten.tokens_original).encode()),
                 (b"x-context-engine-tokens-after", str(rewritten.tokens_sent).encode())]
        loop = None if recall is None or r.status_code != 200 else Recall(
            self.upstream, url, headers, out, recall.scope, self.settings.recall.max_rounds, self.dialect,
            lane=self.engine.requests, session=received.session,
            max_calls=self.settings.recall.max_calls, deadline_s=self.engine.deadline_s)
        if loop is not None:
            if not r.headers.get("content-type", "").lower().startswith("text/event-stream"):
                return await answer(loop, r, started, extra, done)
            if not readable(r.headers.get("content-encoding", "")):  # it may call the tool
                await r.aclose()
                problem = UpstreamBroken("the upstream streamed in a content-encoding the proxy "
                                         "cannot read to a request offering context_recall")
                done(Usage(), (time.perf_counter() - started) * 1000, problem.message, problem.status)
                return self._error(problem)
            return RecallStream(loop, r, response_headers(r.headers.raw) + extra, started, done,
                                self.settings.recall.max_held_bytes)
        return await relay(r, started, extra, done, buffer=True, dialect=self.dialect,
                           coalesce_s=self.coalesce_s)

    async def outgoing(self, request: Any, body: Parsed, raw: bytes, mode: str, choice: str | None,
                       caller: str, arrived: float, t0: float,
                       ) -> tuple[Received, Rewritten, Rewrite | None, bytes, RecallState | None]:
        """What goes upstream for one request (a POST, or a turn on a socket: ``request``
        gives the headers and url.path): ``_prepare``'s parts, the original on any failure
        (fail open), ``context_recall`` added when offered (its state, else None), and
        ``Received`` stamped with the time this took since ``t0``."""
        offer = self.settings.recall.enabled and self.wire.can_offer(body.data)
        try:
            received, rewritten, rewrite, out = await self._prepare(request, body, raw, mode, choice, offer,
                                                                    caller)
        except Exception:  # the edge: whatever breaks before sending, the original goes out
            log.exception("preparing the request failed; forwarding the original request")
            self.engine.stats.invariant_failures += 1
            received = Received(model=model_name(body.data.get("model")), mode=mode,
                                arm="passthrough", path=request.url.path, api=self.dialect.name,
                                scope=caller)
            rewritten, rewrite, out = Rewritten(failed_open=True), None, raw
        recall = rewrite.recall if rewrite is not None and rewrite.recall and rewrite.recall.offer \
            else None
        tooled = await off_loop(len(out), self.wire.add_tool, out) if recall is not None else out
        if tooled is out:
            recall = None
        else:
            out, rewritten = tooled, rewritten.with_tool(tool_tokens(rewritten.encoding or "o200k_base"))
        return received.sent(arrived, (time.perf_counter() - t0) * 1000), rewritten, rewrite, out, recall

    async def _prepare(self, request: Request, body: Parsed, raw: bytes, mode: str,
                       choice: str | None = None, offer: bool = False,
                       caller: str = "") -> tuple[Received, Rewritten, Rewrite | None, bytes]:
        """The ledger row's ``Received`` and ``Rewritten`` parts, the rewrite (rewrite arm
        only) and the bytes to send upstream; ``caller``: the caller's scope (``caller_hash``
        of every credential it presented)."""
        sid = session_id(request.headers, body.chat["messages"], self.session_key, caller=caller)
        arm = modes.arm(mode, sid, self.settings.ab_share)
        agent, project = tags(request.headers)
        notes = dict(body.notes)
        rewrite = None
        too_big = cap_exceeded(self.settings, len(raw), body.chat.get("messages")) or (
            "rules_max_messages" if body.over else "")  # before any work starts
        if too_big and arm == "rewrite":
            notes["skipped"] = too_big
        if arm == "rewrite" and body.rewritable and choice != "off" and not too_big:
            rewrite = await self._rewrite(body.chat, sid, choice, offer, caller, len(raw), agent)
            rewritten = Rewritten.of(rewrite)
        else:  # shadow/ab-control arms, X-Context-Engine-Rules: off, bodies the rules cannot handle
            if arm == "rewrite" and (choice == "off" or too_big):
                arm = "bypass"
            rewritten = Rewritten.counted(len(raw) // 4 if body.over else  # over the cap: not translated
                                          await off_loop(len(raw), self.engine.count, body.chat))
        received = Received(session=sid, model=model_name(body.chat.get("model")), mode=mode,
                            arm=arm, path=request.url.path, api=self.dialect.name,
                            stream=body.stream, agent=agent, project=project, notes=notes,
                            traceparent=request.headers.get("traceparent", "")[:128], scope=caller)
        out = raw
        if rewrite is not None and rewrite.result.changed:
            spliced = await off_loop(len(raw), self._splice, body, rewrite)
            if spliced is None:  # the wire format cannot carry the rewrite: the original goes out
                rewritten = rewritten.unspliced()
            out = raw if spliced is None else spliced
        if (self.settings.cache.prompt_cache_key == "session" and self.dialect.prompt_cache_key
                and "prompt_cache_key" not in body.data):
            out = await off_loop(len(out), profiles.add_prompt_cache_key, out, sid)
        return received, rewritten, rewrite, out

    async def _refused(self, request: Request, url: str, headers: list[tuple[bytes, bytes]],
                       raw: bytes, mode: str, t0: float, arrived: float, caller: str) -> Response:
        """A request without a credential to an upstream that refuses those
        (``proxy.edge.keyless``): sent as it came, never parsed, counted from its length."""
        self.finisher.begin()
        received = Received(mode=mode, arm="bypass", path=request.url.path, api=self.dialect.name,
                        notes={"skipped": "no_credentials"}, ts=arrived, scope=caller,
                        proxy_ms=(time.perf_counter() - t0) * 1000)
        counted = Rewritten.counted(len(raw) // 4)
        started = time.perf_counter()
        nothing: dict[str, Any] = {"messages": []}
        try:
            r = await self.upstream.send("POST", url, headers, raw)
        except (ProxyError, asyncio.CancelledError) as exc:
            answered = Answered(exc.status, exc.message) if isinstance(exc, ProxyError) else Answered(
                503, "cut by shutdown before the upstream answered")
            self.finisher.schedule(received, counted, answered, nothing, None, Usage(), shadow=False)
            if isinstance(exc, ProxyError):
                return self._error(exc)
            raise
        self.keyless.observe(caller, False, r.status_code)

        def done(usage: Usage, upstream_ms: float, error: str, status: int) -> None:
            self.finisher.schedule(received, counted, Answered(status, error, upstream_ms), nothing, None,
                                   usage, shadow=False)

        return await relay(r, started, [], done, buffer=True, dialect=self.dialect,
                           coalesce_s=self.coalesce_s)

    def _error(self, exc: ProxyError) -> Response:
        headers = {"retry-after": "1"} if isinstance(exc, ServerBusy) else None
        return error_response(exc, self.dialect.error_body, headers)

    def _splice(self, body: Parsed, rewrite: Rewrite) -> bytes | None:
        """The rewrite in the client's bytes; None when the wire format cannot carry it."""
        try:
            return body.splice(rewrite.result.ctx.messages)
        except Exception:  # the edge: a rewrite the wire format cannot carry sends the original
            log.exception("splicing the rewrite failed; forwarding the original request")
            self.engine.stats.invariant_failures += 1
            return None

    async def _rewrite(self, body: dict[str, Any], sid: str, choice: str | None,
                       offer: bool = False, caller: str = "", size: int = 0,
                       agent: str = "") -> Rewrite | None:
        try:
            return await self.engine.rewrite_off_loop(body, sid, choice, offer, caller, size, agent)
        except Exception:  # the edge: a broken engine never breaks a request
            log.exception("rewrite failed; forwarding the original request")
            self.engine.stats.invariant_failures += 1
            return None



def cap_exceeded(settings: Settings, size: int, messages: Any) -> str:
    """The setting a request is over, so the rules never start on it ("" when within):
    its body's bytes or its number of messages (50k tiny turns cost more to index than
    their bytes say)."""
    if size > settings.rules_max_body_bytes:
        return "rules_max_body_bytes"
    if isinstance(messages, list) and len(messages) > settings.rules_max_messages:
        return "rules_max_messages"
    return ""
