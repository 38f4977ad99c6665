"""The parts a ledger row is built from, and the one constructor that builds it.

Each layer returns the part it knows; nobody assigns into a row:

- ``Received`` (the edge): who asked, for what, by which API, routed to which arm, when;
- ``Rewritten`` (the engine's ``Rewrite``, or the request counted as sent): tokens
  before and after, the rules' journal and savings, long memory's context columns;
- ``Answered`` (the upstream): status, usage, timing, error, the recall loop's cost;
- ``Measured`` (the finishing thread): context metrics, and the finisher's own notes;
- ``BillEstimate`` (``proxy/billing/estimate.py``): the bill columns.

``assemble`` puts them together into a ``LedgerRow``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from context_engine.proxy.billing.estimate import BillEstimate, BillFacts
from context_engine.proxy.engine.rewrite import Rewrite
from context_engine.proxy.recording.ledger import LedgerRow


@dataclass(frozen=True)
class Received:
    """What the edge knows before any rule runs."""

    session: str = "-"
    model: str = ""
    mode: str = "rewrite"
    arm: str = "rewrite"  # rewrite | shadow | passthrough | bypass
    path: str = ""
    api: str = "chat"
    stream: bool = False
    traceparent: str = ""
    agent: str = ""
    project: str = ""
    notes: Mapping[str, Any] = field(default_factory=dict)  # the adapter's, ``skipped``
    ts: float = 0.0  # when the request arrived
    proxy_ms: float = 0.0  # from arrival to the upstream call
    scope: str = ""  # the caller scope (an HMAC of its credentials, never a key)

    def sent(self, ts: float, proxy_ms: float) -> Received:
        return dataclasses.replace(self, ts=ts, proxy_ms=proxy_ms)


@dataclass(frozen=True)
class Rewritten:
    """What the rules did to the request (``of``), or the request counted as sent."""

    tokens_original: int = 0
    tokens_sent: int = 0
    failed_open: bool = False
    encoding: str = ""
    encoding_fallback: bool = False
    rule_errors: int = 0
    rule_savings: Mapping[str, int] = field(default_factory=dict)
    journal: tuple[dict[str, Any], ...] = ()
    context: Mapping[str, Any] = field(default_factory=dict)
    oscillation: float | None = None

    @classmethod
    def counted(cls, tokens: int) -> Rewritten:
        """Not rewritten: ``tokens`` before and after."""
        return cls(tokens, tokens)

    @classmethod
    def of(cls, rewrite: Rewrite | None, counted: Rewritten | None = None) -> Rewritten:
        """The engine's ``Rewrite``; None (the engine failed): ``counted`` (the request
        as counted before, else nothing) failed open."""
        if rewrite is None:
            return dataclasses.replace(counted or cls(), failed_open=True)
        res, memory = rewrite.result, rewrite.result.ctx.memory
        context = dict(memory.columns()) if memory is not None else {}
        context["kind"] = res.ctx.kind
        if res.ctx.compaction is not None:
            context["compaction"] = res.ctx.compaction.columns()
        if res.ctx.provider_compaction is not None:  # the rules acted only after it
            context["provider_compaction"] = res.ctx.provider_compaction.columns()
        journal = tuple({"rule": j.rule, "before": j.tokens_before, "after": j.tokens_after,
                         "ms": round(j.ms, 3), "note": j.note, "error": j.error} for j in res.journal)
        oscillation = memory.oscillation if memory is not None else None
        return cls(tokens_original=res.tokens_before, tokens_sent=res.tokens_after,
                   failed_open=res.failed_open, encoding=rewrite.encoding,
                   encoding_fallback=rewrite.encoding_fallback,
                   rule_errors=sum(1 for j in res.journal if j.error),
                   rule_savings={} if res.failed_open else {j.rule: j.saved for j in res.journal},
                   journal=journal, context=context,
                   oscillation=None if oscillation is None else float(oscillation))

    def with_tool(self, tokens: int) -> Rewritten:
        """The ``context_recall`` tool added to what was sent."""
        return dataclasses.replace(self, tokens_sent=self.tokens_sent + tokens)

    def unspliced(self) -> Rewritten:
        """The wire format could not carry the rewrite: the original went out."""
        return dataclasses.replace(self, failed_open=True, tokens_sent=self.tokens_original,
                                   rule_savings={})


class Metered(Protocol):
    """The usage the upstream reported (``dialects/usage.py``'s ``Usage`` is one)."""

    @property
    def prompt_tokens(self) -> int | None: ...
    @property
    def cached_tokens(self) -> int | None: ...
    @property
    def completion_tokens(self) -> int | None: ...
    @property
    def cache_write_tokens(self) -> int | None: ...
    @property
    def finish_reason(self) -> str | None: ...


@dataclass(frozen=True)
class Answered:
    """The upstream's answer."""

    status: int = 0
    error: str = ""
    upstream_ms: float = 0.0
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    cache_write_tokens: int | None = None
    finish_reason: str | None = None
    recall_rounds: int = 0
    recall_prompt_tokens: int = 0
    recall_completion_tokens: int = 0
    recall_calls: int = 0  # context_recall calls the loop answered or refused
    recall_answers: tuple[str, ...] = ()  # what they brought back (counted when finishing)

    @classmethod
    def of(cls, usage: Metered, status: int, upstream_ms: float, error: str,
           recall: tuple[int, int, int] = (0, 0, 0), loop: Any = None) -> Answered:
        """A relayed reply with its ``usage``; ``recall``: the recall loop's rounds and
        tokens; ``loop``: the loop itself (``proxy/recall/loop.py``), for its calls."""
        rounds = getattr(loop, "rounds", None) or ()
        answers = tuple(str(a) for _, results in rounds for a in results)
        return cls(status, error, upstream_ms, usage.prompt_tokens, usage.cached_tokens,
                   usage.completion_tokens, usage.cache_write_tokens, usage.finish_reason, *recall,
                   recall_calls=sum(len(turn.calls) for turn, _ in rounds), recall_answers=answers)


@dataclass(frozen=True)
class Measured:
    """What finishing found (``proxy/recording/finish.py``): context metrics, and its notes."""

    utilization: float | None = None
    oscillation: float | None = None  # when the rewrite reported none
    tool_retries: int = 0
    context: Mapping[str, Any] = field(default_factory=dict)  # retrieval_hit, unmeasured
    error: str = ""  # shadow skipped (when the upstream reported no error)
    signals: Mapping[str, Any] = field(default_factory=dict)  # ``rereads.Signals.columns()``
    recall_tokens: int = 0


def context_of(received: Received, rewritten: Rewritten, measured: Measured | None = None) -> dict[str, Any]:
    """The row's ``context`` column: the notes received, the rewrite's (long memory's
    columns among them), then finishing's."""
    return dict(received.notes) | dict(rewritten.context) | dict(measured.context if measured else {})


def bill_facts(received: Received, rewritten: Rewritten, answered: Answered) -> BillFacts:
    """What the bill estimate reads."""
    return BillFacts(received.model, received.session, received.ts, received.arm, answered.status,
                     rewritten.failed_open, rewritten.tokens_sent, answered.prompt_tokens,
                     answered.cached_tokens, answered.cache_write_tokens,
                     bool(context_of(received, rewritten).get("server_state")))


def assemble(received: Received, rewritten: Rewritten, answered: Answered,
             measured: Measured | None = None, bill: BillEstimate | None = None,
             replica: str = "") -> LedgerRow:
    """The ledger row of one request, from its parts."""
    measured = measured or Measured()
    oscillation = rewritten.oscillation if rewritten.oscillation is not None else measured.oscillation
    return LedgerRow(
        session=received.session, model=received.model, mode=received.mode, path=received.path,
        arm=received.arm, encoding=rewritten.encoding, encoding_fallback=rewritten.encoding_fallback,
        tokens_original=rewritten.tokens_original, tokens_sent=rewritten.tokens_sent,
        rule_savings=dict(rewritten.rule_savings), journal=list(rewritten.journal),
        prompt_tokens=answered.prompt_tokens, cached_tokens=answered.cached_tokens,
        completion_tokens=answered.completion_tokens, status=answered.status,
        proxy_ms=received.proxy_ms, upstream_ms=answered.upstream_ms, stream=received.stream,
        finish_reason=answered.finish_reason, failed_open=rewritten.failed_open,
        rule_errors=rewritten.rule_errors, error=answered.error or measured.error,
        tool_retries=measured.tool_retries, utilization=measured.utilization,
        oscillation=oscillation, context=context_of(received, rewritten, measured),
        **dataclasses.asdict(bill or BillEstimate()),
        ts=received.ts, api=received.api, cache_write_tokens=answered.cache_write_tokens,
        replica=replica, traceparent=received.traceparent, recall_rounds=answered.recall_rounds,
        recall_prompt_tokens=answered.recall_prompt_tokens,
        recall_completion_tokens=answered.recall_completion_tokens,
        agent=received.agent, project=received.project, scope=received.scope,
        **dict(measured.signals),
        recall_calls=answered.recall_calls, recall_tokens=measured.recall_tokens,
        rewrite_error=rewrite_error(received, rewritten, answered))


NOT_THE_REWRITE = frozenset({401, 403, 404, 408, 409, 429})  # key, model, rate: not the body


def rewrite_error(received: Received, rewritten: Rewritten, answered: Answered) -> bool:
    """A 4xx on a request the proxy changed (the original would likely not have had it)."""
    changed = not rewritten.failed_open and (rewritten.tokens_sent != rewritten.tokens_original
                                             or any(rewritten.rule_savings.values()))
    return (received.arm == "rewrite" and changed and 400 <= answered.status < 500
            and answered.status not in NOT_THE_REWRITE)
