"""The same agent trace loses the same share of its tokens on every API.

One airline-agent trace (JSON tool results, as tau-bench's) goes through the real server
with each real SDK, its tool results sent the way clients send them as content parts:
Chat Completions ``[{"type": "text", ...}]``, a Responses ``function_call_output`` of
``input_text`` parts, an Anthropic ``tool_result`` of text blocks. The ledger's original
and sent tokens give each API's reduction; they agree within a point, every identifier
the next step needs reaches the upstream, and each tool result goes out in the form the
client sent it (one part, its text compacted).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import pytest

from context_engine.bench.cases import Case
from context_engine.bench.systems import EngineSystem, engine_settings
from context_engine.bench.wire import WireSystem, convert_case
from context_engine.proxy.engine.tokens import TokenCounter
from tests.fakes.recall_upstream import RecallUpstream
from tests.fakes.recall_upstream_apis import RecallApisUpstream
from tests.test_recall import recall_proxies

SYSTEM = "You are an airline agent. Look reservations up before you change them."
TASK = "Hi, I'm mia_li_3668. Please move my trip to New York to a later flight."
RULES = "compact,fold_duplicates,tool_json"
IDS = ["mia_li_3668", "credit_card_4421486", "certificate_7504069", "Z7GOZK", "HAT136", "HAT039"]


def _flight(n: int, number: str) -> dict[str, Any]:
    return {"flight_number": number, "origin": "JFK", "destination": "SEA", "date": f"2024-05-{20 + n}",
            "price": 150 + 7 * n, "status": "available", "seats": {"economy": 10 + n, "business": 0},
            "notes": "", "gate": None}


def _results() -> list[tuple[str, dict[str, Any], Any]]:
    """(tool, arguments, result object) of each step."""
    user = {"user_id": "mia_li_3668", "name": {"first_name": "Mia", "last_name": "Li"},
            "payment_methods": {"credit_card_4421486": {"source": "credit_card", "brand": "visa",
                                                        "last_four": "7447", "id": "credit_card_4421486"},
                                "certificate_7504069": {"source": "certificate", "amount": 250,
                                                        "id": "certificate_7504069"}},
            "saved_passengers": [], "membership": "gold", "reservations": ["Z7GOZK", "K1NW8N"]}
    reservation = {"reservation_id": "Z7GOZK", "user_id": "mia_li_3668", "origin": "JFK",
                   "destination": "SEA", "flight_type": "one_way", "cabin": "economy",
                   "flights": [_flight(n, f"HAT{100 + n:03d}") for n in range(3)],
                   "passengers": [{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"}],
                   "payment_history": [{"payment_id": "credit_card_4421486", "amount": 305}],
                   "created_at": "2024-05-01T10:00:00", "total_baggages": 1, "insurance": "no"}
    search = [_flight(n, number) for n, number in enumerate(
        ["HAT136", "HAT039", "HAT218", "HAT301", "HAT412", "HAT520", "HAT611", "HAT777"])]
    return [("get_user_details", {"user_id": "mia_li_3668"}, user),
            ("get_reservation_details", {"reservation_id": "Z7GOZK"}, reservation),
            ("search_direct_flight", {"origin": "JFK", "destination": "SEA", "date": "2024-05-20"}, search),
            ("get_reservation_details", {"reservation_id": "Z7GOZK"}, reservation),
            ("search_direct_flight", {"origin": "JFK", "destination": "SEA", "date": "2024-05-21"}, search[2:])]


def _text(result: Any) -> str:
    return json.dumps(result)


QUESTION = "Yes, the earliest one please, paid with the certificate."


def chat_messages() -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    for i, (tool, args, result) in enumerate(_results()):
        msgs += [{"role": "assistant", "content": None, "tool_calls": [{
                     "id": f"call_{i}", "type": "function",
                     "function": {"name": tool, "arguments": json.dumps(args)}}]},
                 {"role": "tool", "tool_call_id": f"call_{i}",
                  "content": [{"type": "text", "text": _text(result)}]}]
    return msgs + [{"role": "assistant", "content": "HAT136 leaves first. Shall I book it?"},
                   {"role": "user", "content": QUESTION}]


def responses_input() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for i, (tool, args, result) in enumerate(_results()):
        items += [{"type": "function_call", "call_id": f"call_{i}", "name": tool, "arguments": json.dumps(args)},
                  {"type": "function_call_output", "call_id": f"call_{i}",
                   "output": [{"type": "input_text", "text": _text(result)}]}]
    return items + [{"role": "assistant", "content": "HAT136 leaves first. Shall I book it?"},
                    {"role": "user", "content": QUESTION}]


def anthropic_messages() -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for i, (tool, args, result) in enumerate(_results()):
        msgs += [{"role": "assistant", "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": tool,
                                                     "input": args}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}",
                                               "content": [{"type": "text", "text": _text(result)}]}]}]
    return msgs + [{"role": "assistant", "content": "HAT136 leaves first. Shall I book it?"},
                   {"role": "user", "content": QUESTION}]


NAMES = sorted({tool for tool, _, _ in _results()})
TOOLS = {"chat": [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in NAMES],
         "responses": [{"type": "function", "name": n, "parameters": {"type": "object"}} for n in NAMES],
         "anthropic": [{"name": n, "input_schema": {"type": "object"}} for n in NAMES]}


def _send(p: Any, api: str) -> None:
    if api == "chat":
        p.client().chat.completions.create(model="plain", messages=chat_messages(), tools=TOOLS[api])
    elif api == "responses":
        p.client().responses.create(model="plain", instructions=SYSTEM, input=responses_input(),
                                    tools=TOOLS[api], store=False)
    else:
        client = anthropic.Anthropic(base_url=p.url, api_key="sk-ant-test", max_retries=0)
        kw: dict[str, Any] = {"messages": anthropic_messages(), "tools": TOOLS[api]}
        client.messages.create(model="plain", system=SYSTEM, max_tokens=64, **kw)


def _tool_results(api: str, body: dict[str, Any]) -> list[Any]:
    """Each tool result's content as the upstream got it, in order."""
    if api == "chat":
        return [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if api == "responses":
        return [i["output"] for i in body["input"] if i.get("type") == "function_call_output"]
    return [b["content"] for m in body["messages"] if isinstance(m["content"], list)
            for b in m["content"] if b["type"] == "tool_result"]


@pytest.fixture(scope="module")
def sent(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Per API: the ledger row and the body the upstream got."""
    out = {}
    with RecallUpstream() as chat, RecallApisUpstream() as others:
        ups: dict[str, Any] = {"chat": chat, "responses": others, "anthropic": others}
        for api in ("chat", "responses", "anthropic"):
            with recall_proxies(ups[api].url, tmp_path_factory.mktemp(api)) as start:
                p = start(rules=RULES, rule_options={})
                before = len(ups[api].requests)
                _send(p, api)
                out[api] = (p.rows()[-1], ups[api].requests[before])
    return out


def test_the_three_apis_save_the_same_share_within_a_point(sent):
    saved = {api: 1 - row["tokens_sent"] / row["tokens_original"] for api, (row, _) in sent.items()}
    assert min(saved.values()) > 0.10, saved  # the JSON results were compacted on each
    assert max(saved.values()) - min(saved.values()) < 0.01, saved


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
def test_each_result_goes_out_as_one_part_with_the_evidence_kept(sent, api):
    _, body = sent[api]
    results = _tool_results(api, body)
    kind = "input_text" if api == "responses" else "text"
    assert len(results) == len(_results())
    assert all(isinstance(r, list) and len(r) == 1 and set(r[0]) == {"type", "text"}
               and r[0]["type"] == kind for r in results)
    texts = [r[0]["text"] for r in results]
    assert texts[0] != _text(_results()[0][2])  # compacted in place
    assert "_ce_" not in json.dumps(body)  # no tag of the engine's own reaches the upstream
    wire = json.dumps(body)
    for value in IDS:
        assert value in wire, value


def test_the_bench_writes_parts_as_parts_and_saves_alike_on_each_api():
    """``bench --api``: the trace written in each API's form (``Dialect.write``) and rewritten
    through its dialect saves what the chat form saves; a content of two parts stays two
    parts on every API (the Messages writer had joined them into one string)."""
    counter = TokenCounter("o200k_base")
    case = Case("parity", chat_messages(), tools=TOOLS["chat"])
    engine = EngineSystem("engine", engine_settings(RULES))
    saved = {}
    for api in ("chat", "responses", "anthropic"):
        sent = case if api == "chat" else convert_case(case, api, "gpt-4o", False)
        system = engine if api == "chat" else WireSystem(engine, api)
        out = asyncio.run(system.open(api).rewrite(sent.messages, sent.tools))
        saved[api] = 1 - counter.messages(out.messages) / counter.messages(sent.messages)
    assert min(saved.values()) > 0.10 and max(saved.values()) - min(saved.values()) < 0.01, saved
    two = [{"type": "text", "text": "first half"}, {"type": "text", "text": "second half"}]
    split = Case("split", [{"role": "user", "content": "go"}, *chat_messages()[2:3],
                       {"role": "tool", "tool_call_id": "call_0", "content": two}])
    for api in ("responses", "anthropic"):
        tool = [m for m in convert_case(split, api, "gpt-4o", False).messages if m["role"] == "tool"]
        assert [p["text"] for p in tool[0]["content"]] == ["first half", "second half"], api
