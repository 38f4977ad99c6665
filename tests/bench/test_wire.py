"""``bench --api``: cases as Responses / Anthropic requests through the engine's adapters."""

import asyncio

import pytest

from context_engine.bench.cases import Case, Probe
from context_engine.bench.runner import run_replay, run_single, summarize
from context_engine.bench.systems import build_systems, engine_settings
from context_engine.bench.wire import WireSystem, convert_case, to_wire
from context_engine.proxy.dialects.registry import BY_NAME
from context_engine.proxy.engine.tokens import TokenCounter
from tests.bench.conftest import agent_messages

COUNTER = TokenCounter("o200k_base")


def _case(api, opaque=False):
    case = Case(id="t/1", messages=agent_messages(), probes=(Probe("gate?", "B12", ("B12",)),),
                meta={"dataset": "test"})
    return case if api == "chat" else convert_case(case, api, "gpt-4o", opaque)


@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_conversion_round_trips_through_the_adapter(api):
    case = _case(api, opaque=True)
    raw = to_wire(api, "gpt-4o", case.messages, case.tools)
    parsed = BY_NAME[api].parse(raw)
    assert parsed.splice(list(parsed.chat["messages"])) == raw
    assert (b'"reasoning"' if api == "responses" else b'"thinking"') in raw


@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_engine_through_each_api_matches_chat(api):
    settings = engine_settings("fold_duplicates,tool_json")
    results = {}
    for name in ("chat", api):
        systems = build_systems(settings, kinds=("engine",))
        if name != "chat":
            systems = [systems[0], WireSystem(systems[1], api, opaque=True)]
        results[name] = summarize(asyncio.run(run_single([_case(name, opaque=True)], systems, [COUNTER])))
        if name != "chat":
            tally = systems[1].tally
            assert tally.requests == 1 and tally.intact == 1
    chat, other = results["chat"]["engine"], results[api]["engine"]
    assert other["retention"] == chat["retention"] == 1.0
    assert other["invalid"] == 0 and other["failed_open"] == 0
    r_chat, r_other = chat["reduction"]["o200k_base"], other["reduction"]["o200k_base"]
    assert r_chat > 0.02 and abs(r_other - r_chat) < 0.05


def test_replay_keeps_every_opaque_item():
    settings = engine_settings("fold_duplicates,tool_json,budget")
    systems = build_systems(settings, kinds=("engine",))
    wired = WireSystem(systems[1], "anthropic", opaque=True)
    asyncio.run(run_replay([_case("anthropic", opaque=True)], [systems[0], wired], COUNTER, 0.1))
    assert wired.tally.requests >= 3 and wired.tally.intact == wired.tally.requests
