"""What a cleared result keeps whatever the tool (issue 48, part 2): the identifiers a next
call takes survive in its placeholder, or the result is kept; an item is cleared only when
it is worth more than its expected way back; tool_json's clip lists what it cut."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.proxy.store.stores import MemoryStore
from context_engine.rules.compact import Compact
from context_engine.rules.compact.config import CompactConfig
from context_engine.rules.compact.placeholder import CLEARED, placeholder
from context_engine.rules.compact.way_back import reread_rate, worth_clearing
from context_engine.rules.identifiers import text_identifiers
from context_engine.rules.tool_json.rule import ToolJson, ToolJsonConfig
from tests.harness import make_ctx, make_deps

COUNTER = TokenCounter("o200k_base")
PROSE = "This product is loved by customers for its comfort, durability and style. " * 4

LISTING = json.dumps({"user_id": "ava_kovacs_4827", "orders": [
    {"order_id": f"#W{2470317 + k}", "status": "delivered", "total": 120.5 + k,
     "item_id": str(2444431651 + k), "url": f"https://shop.example/o/{k}", "review": PROSE}
    for k in range(8)]})
PAGE = "\n".join(
    [f"## Section {k}\nSee [the guide](https://docs.example.org/guide/{k}/) for release v0.11{k}.0 "
     + "and the details of how request bodies are declared and validated. " * 6
     for k in range(6)])


def tool(content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": "c1", "content": content}


def test_a_cleared_json_listing_keeps_every_id_name_number_and_url_but_not_its_text() -> None:
    text = placeholder(tool(LISTING), 300, 0, ids=True)
    assert text is not None and text.startswith(CLEARED)
    for k in range(8):
        for value in (f"#W{2470317 + k}", str(2444431651 + k), f"https://shop.example/o/{k}",
                      str(120.5 + k)):
            assert value in text
    assert "ava_kovacs_4827" in text and "order_id" in text
    assert "comfort" not in text  # the review text is cut
    assert 2 * COUNTER.text(text) < COUNTER.text(LISTING)


def test_a_cleared_page_keeps_its_urls_and_letter_digit_ids_not_code_names() -> None:
    text = placeholder(tool(PAGE + "\nvalue_3_7 = compute(7)"), 300, 0, ids=True)
    assert text is not None
    for k in range(6):
        assert f"https://docs.example.org/guide/{k}/" in text and f"v0.11{k}.0" in text
    assert "value_3_7" not in text and "validated" not in text
    assert placeholder(tool(PAGE), 300, 0, ids=False) is not None
    assert "https://" not in str(placeholder(tool(PAGE), 300, 0, ids=False))


def test_identifier_patterns_are_linear_on_hostile_text() -> None:
    for hostile in ("a1" * 40_000, "-" * 80_000 + "1", "http://" + "a" * 80_000, "@." * 40_000):
        text_identifiers(hostile)  # returns (a quadratic pattern would not finish)


def session(results: list[str], rerun: bool = False) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Audit every order."}]
    for k, content in enumerate(results):
        arg = 0 if rerun and k == len(results) - 1 else k  # the last call fetches #0 again
        msgs.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": f"c{k}", "type": "function",
            "function": {"name": "get_order", "arguments": json.dumps({"n": arg})}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{k}", "content": content})
    return msgs


def cleared(msgs: list[dict[str, Any]], **options: Any) -> int:
    config = CompactConfig(**{"trigger_tokens": 1500, "clear_at_least": 300, "keep_recent": 2,
                              "min_item_tokens": 20, **options})
    out = asyncio.run(Compact(config, make_deps(store=MemoryStore())).apply(
        make_ctx(msgs, model="gpt-5", session_id="s")))
    return sum(1 for m in out.messages if str(m.get("content") or "").startswith(CLEARED))


def test_a_result_whose_identifiers_are_most_of_it_stays_whole() -> None:
    dense = [json.dumps([{"id": f"#W{k}{j}", "sku": f"A{j}B{k}"} for j in range(40)])
             for k in range(12)]
    assert cleared(session(dense), way_back=False, identifiers=False) > 0
    assert cleared(session(dense), way_back=False) == 0


def test_the_way_back_keeps_what_is_not_worth_its_recall_round() -> None:
    # clearing saves (tokens - kept) x cached x horizon; a recall round costs the request
    # cached plus the item: a small item in a long request with few requests ahead stays
    assert not worth_clearing(200, 20, 40_000, 4, 0.1, 0.1)
    assert worth_clearing(5_000, 50, 40_000, 4, 0.1, 0.1)
    pages = [PAGE + f"\n# page {k}" for k in range(30)]
    assert cleared(session(pages), way_back=True) == cleared(session(pages), way_back=False) > 0
    small = "delivered, paid, packed and shipped to the customer on time and in full; " * 2
    mix = [PAGE * 3 if k % 2 else f"{small}{k}" for k in range(30)]  # 34-token notes among pages
    assert cleared(session(mix), way_back=True) == cleared(session(mix), way_back=False) - 12


def test_the_sessions_own_rereads_raise_the_way_back_rate() -> None:
    base = session([PAGE] * 6)
    again = session([PAGE] * 6, rerun=True)
    first_result = 2
    assert reread_rate(base, [first_result]) == (0 + 1) / (1 + 10)
    assert reread_rate(again, [first_result]) == (1 + 1) / (1 + 10)


def test_tool_json_clip_lists_the_identifiers_of_the_middle_it_cut() -> None:
    page = "\n".join(f"line {k}: see https://docs.example.org/p/{k} (ref R{k}X) " + "text " * 20
                     for k in range(400))
    rule = ToolJson(ToolJsonConfig(max_chars=16000), make_deps())
    msgs = [{"role": "user", "content": "read"}, {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "fetch", "arguments": "{}"}}]}, tool(page)]
    out = str(asyncio.run(rule.apply(make_ctx(msgs))).messages[-1]["content"])
    assert len(out) <= 16000 and "identifiers in it:" in out
    listed = [f"https://docs.example.org/p/{k}" for k in range(400)
              if f"https://docs.example.org/p/{k} " in out or f"https://docs.example.org/p/{k}\n" in out]
    assert len(listed) > 150  # head, tail and a good share of the middle, by their URLs
