"""The replay's bill: each provider's prompt caching simulated token by token, beside what
the proxy's own report would say about the same requests.

For every request point of a replay, per billing model (``openai``, ``anthropic``):

- the *harness* renders the client's original request and the rewritten one as token
  ids (tool schemas, then each message's role and content, one segment per content
  part) and runs a provider cache simulator on each stream: OpenAI caches the longest
  token prefix shared with an earlier request, from 1,024 tokens in 128-token steps;
  Anthropic writes prefixes ending at ``cache_control`` breakpoints (1.25x) and reads
  the longest one written earlier at a breakpoint or up to 20 blocks before it (0.1x).
  direct = the originals' bill (the passthrough arm), billed = the rewrites' bill;
- the *report* prices the same requests the way ``context-engine report`` does: a
  ledger row with the simulator's usage for the rewrite (prompt, cache reads and
  writes), the counterfactual estimate of ``proxy/billing/estimate.py`` for the original
  (message granularity, the proxy's token counts) and ``billing.row_bill``.

``report saving − harness saving`` is how far the report is from the bill. Input tokens
only (the bench has no replies). Anthropic runs give the client breakpoints the way
Claude Code places them: on the system prompt and on the newest message.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from context_engine.bench.way_back import WayBack, worse, worst_session
from context_engine.proxy.billing.estimate import BillEstimator, BillFacts
from context_engine.proxy.billing.row_bill import row_bill
from context_engine.proxy.engine.prefix import MARK, strip_marks
from context_engine.proxy.engine.tokens import get_encoding
from context_engine.proxy.recording.ledger import LedgerRow

MODELS = {"openai": "gpt-5", "anthropic": "claude-sonnet-4-5"}
KINDS = tuple(MODELS)
MIN_TOKENS, STEP, LOOKBACK, HISTORY, ROUTE = 1024, 128, 20, 8, 64
SECONDS_PER_REQUEST = 10.0  # the estimator's clock: well inside the providers' cache TTL
Segments = list[tuple[tuple[int, ...], bool]]  # (token ids, carries a breakpoint)
SAME: Any = object()


@functools.lru_cache(maxsize=50_000)
def _ids(text: str) -> tuple[int, ...]:
    return tuple(get_encoding("o200k_base").encode_ordinary(text)) if text else ()


def render(messages: list[Any], tools: list[Any] | None) -> Segments:
    """A request as the provider tokenizes it, one segment per tool list, content part
    and tool-call list; markers are not content (they only flag their segment)."""
    segs: Segments = []
    if tools:
        segs.append((_ids(json.dumps(strip_marks(tools), sort_keys=True)), any(MARK in t for t in tools)))
    for m in messages:
        head = _ids(f"<|{m.get('role')}|>")
        content = m.get("content")
        parts = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        first = len(segs)
        for part in parts:
            text = part.get("text") if isinstance(part, dict) else None
            body = _ids(text) if isinstance(text, str) else _ids(json.dumps(strip_marks(part), sort_keys=True))
            segs.append((head + body if len(segs) == first else body,
                         isinstance(part, dict) and MARK in part))
        if m.get("tool_calls") or m.get("tool_call_id"):
            extra = json.dumps([m.get("tool_calls"), m.get("tool_call_id")])
            segs.append((_ids(extra), False))
        if MARK in m:  # a marker on the message itself flags its last segment
            segs[-1] = (segs[-1][0], True)
    return segs


@dataclass
class OpenAISim:
    """Requests are routed by their first tokens (the provider routes on a hash of the
    prefix): each route remembers its last ``HISTORY`` requests."""

    history: dict[tuple[int, ...], list[list[tuple[int, ...]]]] = field(default_factory=dict)

    def bill(self, segs: Segments) -> tuple[int, int, int]:
        cur = [s for s, _ in segs]
        route = self.history.setdefault(cur[0][:ROUTE] if cur else (), [])
        best = 0
        for prev in route[-HISTORY:]:
            n = 0
            for a, b in zip(prev, cur):
                if a == b:
                    n += len(a)
                    continue
                for x, y in zip(a, b):
                    if x != y:
                        break
                    n += 1
                break
            best = max(best, n)
        route.append(cur)
        del route[:-HISTORY]
        total = sum(map(len, cur))
        return total, min(total, 0 if best < MIN_TOKENS else best // STEP * STEP), 0

    def fork(self) -> OpenAISim:
        """A copy to price requests on that never happened to this cache (the way back)."""
        return OpenAISim({k: list(v) for k, v in self.history.items()})


@dataclass
class AnthropicSim:
    written: set[int] = field(default_factory=set)

    def bill(self, segs: Segments) -> tuple[int, int, int]:
        chain, ends, marks, h, total = [], [], [], 0, 0
        for i, (ids, marked) in enumerate(segs):
            h = hash((h, ids))
            total += len(ids)
            chain.append(h)
            ends.append(total)
            if marked:
                marks.append(i)
        if not marks or len(marks) > 4:
            return total, 0, 0
        read = 0
        for b in marks:
            for j in range(b, max(-1, b - LOOKBACK - 1), -1):
                if chain[j] in self.written:
                    read = max(read, ends[j])
                    break
        end = ends[marks[-1]]
        write = end - read if end >= MIN_TOKENS and end > read else 0
        self.written.update(chain[b] for b in marks if ends[b] >= MIN_TOKENS)
        return total, read, write

    def fork(self) -> AnthropicSim:
        return AnthropicSim(set(self.written))


def with_client_breakpoints(messages: list[Any]) -> list[Any]:
    """The request a Claude Code-like client sends: a breakpoint on the (last) system
    prompt and on the newest message."""
    out = [dict(m) for m in messages]
    systems = [i for i, m in enumerate(out) if m.get("role") == "system"]
    for i in {systems[-1] if systems else None, len(out) - 1} - {None}:
        out[i][MARK] = {"type": "ephemeral"}  # type: ignore[index]
    return out


def new_sims(kind: str) -> tuple[Any, Any]:
    """A provider cache for each arm: the direct requests' and the proxy's."""
    sim = OpenAISim if kind == "openai" else AnthropicSim
    return sim(), sim()


@dataclass
class Caches:
    """Which requests share a provider cache. ``session``: each replayed session starts
    cold (one conversation per cache lifetime). ``caller``: every session a system
    replays shares one cache per arm, as one organisation's traffic does at the
    provider, so a session's first request reads the tool schemas and system prompt
    another session of the same agent wrote."""

    scope: str = "session"
    shared: dict[tuple[str, str], tuple[Any, Any]] = field(default_factory=dict)

    def bill(self, kind: str, system: str, session: str) -> CaseBill:
        if self.scope == "session":
            return CaseBill(kind, session)
        if (kind, system) not in self.shared:
            self.shared[kind, system] = new_sims(kind)
        direct, proxy = self.shared[kind, system]
        return CaseBill(kind, session, direct, proxy)


@dataclass
class CaseBill:
    """One replayed session under one billing model."""

    kind: str
    session: str
    direct_sim: Any = None
    proxy_sim: Any = None
    estimator: BillEstimator = field(default_factory=BillEstimator)
    direct: float = 0.0
    billed: float = 0.0
    report_original: float = 0.0
    report_actual: float = 0.0
    requests: int = 0
    way_back: WayBack | None = None  # the re-read model's figures (bench/reread.py), when on

    def __post_init__(self) -> None:
        if self.direct_sim is None:
            self.direct_sim, self.proxy_sim = new_sims(self.kind)

    def add(self, request: list[Any], tools: list[Any] | None, out: Any,
            tokens_before: int, tokens_after: int, sent_tools: Any = SAME) -> None:
        """One request point: ``request`` with the client's ``tools`` as sent direct, ``out``
        as the proxy sent it, with ``sent_tools`` (default: the client's)."""
        model = MODELS[self.kind]
        prompt, read, write = self.direct_sim.bill(render(request, tools))
        direct = _usage_row(model, prompt, read, write)
        sent = tools if sent_tools is SAME else sent_tools
        prompt, read, write = self.proxy_sim.bill(render(out.messages, sent))
        ts, failed_open = self.requests * SECONDS_PER_REQUEST, bool(out.failed_open)
        result = SimpleNamespace(ctx=SimpleNamespace(messages=out.messages), journal=out.journal,
                                 failed_open=out.failed_open)
        body = {"messages": request, **({"tools": tools} if tools else {})}
        facts = BillFacts(model, self.session, ts, "rewrite", 200, failed_open, tokens_after,
                          prompt, read, write)
        bill = self.estimator.observe(facts, body, SimpleNamespace(result=result), [])
        row = LedgerRow(model=model, prompt_tokens=prompt, cached_tokens=read, cache_write_tokens=write,
                        completion_tokens=0, session=self.session, arm="rewrite", status=200,
                        tokens_original=tokens_before, tokens_sent=tokens_after,
                        failed_open=failed_open, ts=ts, **dataclasses.asdict(bill))
        self.requests += 1
        d, r = row_bill(vars(direct)), row_bill(vars(row))
        assert d is not None and r is not None
        self.direct += d.actual
        self.billed += r.actual
        self.report_original += r.original
        self.report_actual += r.actual


def _usage_row(model: str, prompt: int, read: int, write: int) -> LedgerRow:
    return LedgerRow(model=model, prompt_tokens=prompt, cached_tokens=read, cache_write_tokens=write,
                     completion_tokens=0, arm="passthrough", tokens_original=prompt, tokens_sent=prompt)


@dataclass
class BillTotals:
    direct: float = 0.0
    billed: float = 0.0
    report_original: float = 0.0
    report_actual: float = 0.0
    requests: int = 0
    worst: tuple[float, str] | None = None  # the session billed highest against its direct bill
    way_back: WayBack | None = None
    worst_way_back: tuple[float, str] | None = None  # the same, the way back included

    def add(self, case: CaseBill) -> None:
        self.direct += case.direct
        self.billed += case.billed
        self.report_original += case.report_original
        self.report_actual += case.report_actual
        self.requests += case.requests
        self.worst = worse(self.worst, case.billed, case.direct, case.session)
        if case.way_back is not None:
            self.way_back = self.way_back or WayBack()
            self.way_back.merge(case.way_back)
            self.worst_way_back = worse(self.worst_way_back, case.billed + case.way_back.total_usd,
                                         case.direct, case.session)

    def summary(self) -> dict[str, Any]:
        harness = 1 - self.billed / self.direct if self.direct else None
        report = 1 - self.report_actual / self.report_original if self.report_original else None
        gap = None if harness is None or report is None else round(100 * (report - harness), 2)
        # A/B: the passthrough arm's bill (direct) against the counterfactual estimate of the
        # same original requests, and the rewrite arm's bill against the report's actual
        est_err = round(100 * (self.report_original / self.direct - 1), 2) if self.direct else None
        return {"model": None, "requests": self.requests, "estimate_vs_direct_pct": est_err,
                "report_original_usd": round(self.report_original, 4),
                "cost_vs_direct": None if harness is None else round(1 - harness, 4),
                "harness_saving": None if harness is None else round(harness, 4),
                "report_saving": None if report is None else round(report, 4),
                "gap_points": gap, "direct_usd": round(self.direct, 4), "billed_usd": round(self.billed, 4),
                "worst_session": worst_session(self.worst),
                **({} if self.way_back is None else {"way_back": {
                    **self.way_back.summary(self.direct, self.billed),
                    "worst_session": worst_session(self.worst_way_back)}})}


async def replay_anthropic(case: Any, system: Any, counter: Any, tally: Any,
                           caches: Caches | None = None, reread: bool = False) -> None:
    """A replay of ``case`` by a client that sets Anthropic breakpoints (its own session).
    The bill counts the tools the proxy sends: the Messages adapter offers
    ``context_recall`` on the same terms as Chat Completions. ``reread``: the agent's way
    back to evidence missing at a cut point is priced too (``bench/reread.py``)."""
    from context_engine.bench.cases import request_points
    from context_engine.bench.reread import Rereads

    session = system.open(f"replay-anthropic:{getattr(system, 'name', '')}:{case.id}",
                          MODELS["anthropic"])
    bill = (caches or Caches()).bill("anthropic", getattr(system, "name", ""), case.id)
    way = Rereads(bill, counter) if reread else None
    cuts = dict(getattr(case, "cuts", ()))
    for i in request_points(case.messages):
        request = with_client_breakpoints(case.messages[: i + 1])
        out = await session.rewrite(request, case.tools)
        tools = out.tools_sent(case.tools)
        bill.add(request, case.tools, out, counter.request(request, case.tools),
                 counter.request(out.messages, tools), tools)
        if way is not None:
            way.after(request, out, tools, cuts.get(i + 1, ()))
    tally.add_bill(bill)
