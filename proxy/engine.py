"""The rewrite engine: settings → deps → rules → pipeline. Shared by the server and the bench."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.context import RequestContext
from proxy.pipeline import Pipeline, PipelineResult, PipelineStats
from proxy.settings import Settings, build_rules
from proxy.store import Store, open_store
from proxy.tokens import counter_for_model, get_encoding
from rules.base import RuleDeps


@dataclass
class Rewrite:
    result: PipelineResult
    encoding: str
    encoding_fallback: bool


class Engine:
    def __init__(self, settings: Settings, store: Store | None = None,
                 rules: list[Any] | None = None, extra: dict[str, Any] | None = None) -> None:
        self.settings = settings
        self.store = store if store is not None else open_store(settings.store)
        self.deps = RuleDeps(store=self.store, extra=dict(extra or {}))
        self.stats = PipelineStats()
        self.pipeline = Pipeline(rules if rules is not None else build_rules(settings, self.deps),
                                 self.stats)
        for name in ("o200k_base", "cl100k_base"):  # load encodings now, not on a first request
            get_encoding(name)

    def count(self, body: dict[str, Any]) -> int:
        """Tokens of a request as the client sent it."""
        counter, _ = counter_for_model(str(body.get("model") or ""))
        tools = body.get("tools")
        return counter.request(body["messages"], tools if isinstance(tools, list) else None)

    async def rewrite(self, body: dict[str, Any], session_id: str) -> Rewrite:
        """Run the pipeline over a parsed chat-completions body (not mutated)."""
        model = str(body.get("model") or "")
        counter, fallback = counter_for_model(model)
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        tools = body.get("tools")
        ctx = RequestContext(
            messages=body["messages"],
            model=model,
            tools=tools if isinstance(tools, list) else None,
            session_id=session_id,
            encoding=counter.encoding,
            max_tokens=max_tokens if isinstance(max_tokens, int) else None,
            original=body["messages"],
        )
        result = await self.pipeline.run(ctx, counter)
        return Rewrite(result, counter.encoding, fallback)
