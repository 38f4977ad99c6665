"""``bench --api``: cases as Responses / Anthropic / Gemini requests through the engine's
dialects, each test run for every dialect that is not chat's own form."""

import asyncio

import pytest

from context_engine.bench.cases import Case, Probe
from context_engine.bench.runner import run_replay, run_single, summarize
from context_engine.bench.systems import build_systems, engine_settings
from context_engine.bench.wire import (
    APIS,
    WireSystem,
    convert_case,
    outside_kept,
    to_wire,
)
from context_engine.proxy.dialects.registry import BY_NAME
from context_engine.proxy.engine.tokens import TokenCounter
from tests.bench.conftest import agent_messages

COUNTER = TokenCounter("o200k_base")


def _case(api, opaque=False):
    case = Case(id="t/1", messages=agent_messages(), probes=(Probe("gate?", "B12", ("B12",)),),
                meta={"dataset": "test"})
    return case if api == "chat" else convert_case(case, api, "gpt-4o", opaque)


WIRED = [api for api in APIS if api != "chat"]
OPAQUE = {"responses": b'"reasoning"', "anthropic": b'"thinking"', "gemini": b'"thoughtSignature"',
          "interactions": b'"thought"'}


@pytest.mark.parametrize("api", WIRED)
def test_conversion_round_trips_through_the_dialect(api):
    case = _case(api, opaque=True)
    path, raw = to_wire(api, "gpt-4o", case.messages, case.tools)
    parsed = BY_NAME[api].parse(raw, path)
    assert parsed.splice(list(parsed.chat["messages"])) == raw
    assert OPAQUE[api] in raw


def test_outside_kept_sees_any_byte_changed_outside_the_conversation():
    raw = b'{"contents": [1], "tools": [ 1 ], "x": 2}'
    assert outside_kept(raw, b'{"contents":[],"tools": [ 1 ], "x": 2}', ("contents",))
    assert not outside_kept(raw, b'{"contents": [1], "tools": [1], "x": 2}', ("contents",))
    assert not outside_kept(raw, b'{"contents": [1], "tools": [ 1 ]}', ("contents",))


@pytest.mark.parametrize("api", WIRED)
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
            assert tally.sent == 1 and tally.transparent == 1
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
