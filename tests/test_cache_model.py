"""Provider cache models (proxy/billing/cache_model.py) and the bench's token-level simulators
(bench/billing.py) on the same conversations: they must agree on what gets cached."""

from __future__ import annotations

import asyncio
from typing import Any

from context_engine.bench import billing
from context_engine.bench.systems import Outcome
from context_engine.proxy.billing import cache_model
from context_engine.proxy.billing.cache_model import PrefixCache
from context_engine.proxy.engine.prefix import MARK, shared_segments, signature
from context_engine.proxy.engine.tokens import TokenCounter

COUNTER = TokenCounter()


def turns(n: int, words: int = 150) -> list[dict]:
    msgs = [{"role": "system", "content": "Be brief. " + "rule " * 50}]
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        msgs.append({"role": role, "content": f"turn {i}: " + " ".join(f"w{i}x{k}" for k in range(words))})
    return msgs


def test_openai_reads_the_longest_earlier_prefix_in_128_steps():
    cache = PrefixCache(600)
    msgs = turns(12)
    first = signature(msgs[:4], None, COUNTER)
    assert cache_model.openai_use(first, cache, 0).read == 0
    nxt = signature(msgs[:8], None, COUNTER)
    use = cache_model.openai_use(nxt, cache, 1)
    assert use.read == first.tokens // 128 * 128 and use.write == 0
    edited = [dict(m) for m in msgs[:8]]
    edited[2] = {"role": "user", "content": "changed"}
    assert cache_model.openai_use(signature(edited, None, COUNTER), cache, 2).read == 0  # < 1,024
    assert cache_model.openai_use(signature(msgs[:8], None, COUNTER), cache, 1000).read == 0  # expired


def marked(msgs: list[dict], *at: int) -> list[dict]:
    out = [dict(m) for m in msgs]
    for i in at:
        out[i][MARK] = {"type": "ephemeral"}
    return out


def test_anthropic_writes_at_breakpoints_and_reads_back_within_20_blocks():
    cache = PrefixCache(300)
    msgs = turns(30)
    one = cache_model.anthropic_use(signature(marked(msgs[:6], 0, 5), None, COUNTER), cache, 0)
    s6 = signature(msgs[:6], None, COUNTER)
    assert one.read == 0 and one.write == s6.tokens  # the system prompt alone is < 1,024
    two = cache_model.anthropic_use(signature(marked(msgs[:10], 0, 9), None, COUNTER), cache, 1)
    assert two.read == s6.tokens and two.write == signature(msgs[:10], None, COUNTER).tokens - s6.tokens
    far = cache_model.anthropic_use(signature(marked(msgs[:31], 0, 30), None, COUNTER), cache, 2)
    assert far.read == 0  # the last written prefix is more than 20 blocks back
    assert cache_model.anthropic_use(signature(marked(msgs[:8], 1, 2, 3, 4, 5), None, COUNTER),
                                     cache, 3) == cache_model.CacheUse()  # 5 markers: a 400
    assert cache_model.anthropic_use(signature(msgs[:8], None, COUNTER), cache, 4) == cache_model.CacheUse()


def test_signatures_ignore_markers_and_one_part_lists():
    msgs = turns(4)
    variant = [dict(m) for m in msgs]
    variant[2] = {"role": variant[2]["role"], "content": [{"type": "text", "text": variant[2]["content"],
                                                           MARK: {"type": "ephemeral"}}]}
    a, b = signature(msgs, None, COUNTER), signature(variant, None, COUNTER)
    assert a.chain == b.chain and b.breakpoints == (3,)
    assert shared_segments(a, signature(msgs[:3], None, COUNTER)) == 4


def test_harness_simulators_agree_with_the_models_on_an_append_only_session():
    msgs = turns(24)
    for kind, sim_cls in (("openai", billing.OpenAISim), ("anthropic", billing.AnthropicSim)):
        sim, cache = sim_cls(), PrefixCache(600)
        for n in range(2, 25, 2):
            req = msgs[: n + 1]
            if kind == "anthropic":
                req = billing.with_client_breakpoints(req)
            prompt, read, write = sim.bill(billing.render(req, None))
            sig = signature(req, None, COUNTER)
            use = cache_model.use(kind, sig, cache, n)
            assert abs(read / prompt - use.read / sig.tokens) < 0.06, (kind, n)
            assert abs(write / prompt - use.write / sig.tokens) < 0.06, (kind, n)


class _Same:
    """A system that sends every request unchanged (the passthrough arm)."""

    def open(self, session_id: str, model: str | None = None):
        return self

    async def rewrite(self, messages, tools):
        return Outcome(list(messages), 0.0)


def _unchanged_replay(case_id: str) -> billing.CaseBill:
    """A 40-message conversation replayed by an Anthropic client, sent unchanged."""

    class Case:
        id = case_id
        messages = turns(40)
        tools = None

    class T:
        bill: Any = None

        def add_bill(self, b):
            self.bill = b

    t = T()
    asyncio.run(billing.replay_anthropic(Case, _Same(), COUNTER, t))
    return t.bill


def test_report_equals_the_bill_when_nothing_is_rewritten():
    b = _unchanged_replay("c1")
    assert b.direct == b.billed and b.requests == 20
    assert abs(b.report_original / b.report_actual - 1) < 0.03


def test_replay_shows_the_ab_arms_beside_the_estimate():
    from rich.console import Console

    from context_engine.bench.report import ab_table

    totals = billing.BillTotals()
    totals.add(_unchanged_replay("c2"))
    summary = totals.summary()
    assert summary["harness_saving"] == 0.0  # both arms sent the same requests
    assert abs(summary["estimate_vs_direct_pct"]) < 3  # the estimate of the original vs its bill
    result = {"systems": {"none": {"replay": {"billing": {"anthropic": summary}}}}}
    console = Console(width=200, record=True)
    console.print(ab_table("f", result))
    text = console.export_text()
    assert "passthrough arm $" in text and f"{summary['estimate_vs_direct_pct']:+.1f}%" in text
