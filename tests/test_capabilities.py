"""The engine uses what a rule offers through the contract (``Fencing``, ``ClosedBlocks``,
``Lossless``, ``Embedding``), never its name: a rule it has never heard of gets the same
treatment."""

from __future__ import annotations

import asyncio
import os

from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.engine.messages import closed_prefix_end
from context_engine.proxy.engine.prefix import has_mark
from context_engine.proxy.settings import load_settings
from context_engine.proxy.store.stores import MemoryStore
from tests.fakes.rules import Capable, DropOldAssistant

REGISTRY = {"drop_old_assistant": DropOldAssistant, "capable": Capable}
TURNS = [{"role": "system", "content": "sys"}] + [
    m for i in range(4) for m in ({"role": "user", "content": f"question {i} about Lisbon"},
                                  {"role": "assistant", "content": f"a long answer {i} " * 20})
] + [{"role": "user", "content": "and tomorrow?"}]


def engine(rules: str, **flags) -> Engine:
    flags.update(rules=rules, store="memory://")
    settings = load_settings(flags=flags, env={}, config_path=os.devnull, registry=REGISTRY)
    return Engine(settings, store=MemoryStore(), registry=REGISTRY)


def rewrite(e: Engine, messages=TURNS, choice=None):
    try:
        return asyncio.run(e.rewrite({"model": "gpt-4o", "messages": messages}, "s1", choice,
                                     can_offer=True))
    finally:
        e.close()


def test_a_rule_declaring_lossless_options_runs_with_them_in_the_lossless_profile():
    e = engine("drop_old_assistant,capable")
    e.close()
    lossless, default = e.pipelines["lossless"].rules, e.pipelines["default"].rules
    assert [r.name for r in lossless] == ["capable"] and isinstance(lossless[0], Capable)
    assert lossless[0].config.loud is False
    assert isinstance(default[1], Capable) and default[1].config.loud is True


def test_recalled_text_is_fenced_by_the_rule_that_ran():
    done = rewrite(engine("capable"))
    assert done.recall is not None and done.recall.scope.fence is not None
    assert done.recall.scope.fence("text") == "<<s1>>text<</s1>>"


def test_no_fence_when_the_fencing_rule_left_no_note():
    done = rewrite(engine("capable"), TURNS[:2])  # nothing to drop: the rule did nothing
    assert done.recall is not None and done.recall.scope.fence is None
    done = rewrite(engine("drop_old_assistant"))  # a rule that offers no fence
    assert done.recall is not None and done.recall.scope.fence is None


def test_auto_breakpoints_follow_the_closed_blocks_a_rule_declares():
    profiles = [{"match": "small-*", "rules": {"drop_old_assistant": True}}]
    e = engine("capable", cache={"auto_breakpoints": True}, profiles=profiles)
    assert e.blocks == {"default": (1, 1), "off": (1, 1), "lossless": (1, 1), "profile:0": (1, 1)}
    sent = rewrite(e).result.ctx.messages
    marked = [i for i, m in enumerate(sent) if has_mark(m)]
    assert marked == [0, closed_prefix_end(sent, 1, 1) - 1] and marked[1] > 2
    plain = engine("drop_old_assistant", cache={"auto_breakpoints": True})
    assert plain.blocks["default"] is None  # no rule lays out blocks: breakpoints.AUTO_BLOCKS
    plain.close()


def test_texts_embedded_are_summed_over_the_rules_that_embed():
    e = engine("drop_old_assistant,capable")
    e.close()
    assert e.embedded() == 6  # the default pipeline's instance and the lossless one's
