"""Reading a request costs time proportional to its size, in every dialect.

Each dialect parses pathological bodies of n and 4n parts (many unmatched tool calls
and results, many parts in one turn, many turns, assistant runs of many items), and
splices back a rewrite that changes every part it can. The check is the rules' one
(``tests/rules/test_linear_time.py``): best CPU time of the parsing thread at 4n within 8× that at n (linear
≈ 4×, quadratic ≈ 16×), measured again on a miss. Only the parse and the splice are
timed: each body is built (with a fresh first item, so the translation memo cannot
answer from an earlier run) before the clock starts.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from context_engine.proxy.dialects.registry import BY_NAME
from context_engine.proxy.engine.opaque import SRC
from tests.rules.test_linear_time import grows_linearly

pytestmark = pytest.mark.slow  # timed per size

N = 1000
GEMINI_PATH = "/v1beta/models/gemini-2.5-pro:generateContent"
_nonce = itertools.count()

Body = dict[str, Any]


def gemini_unmatched(n: int) -> Body:
    """n calls without ids, then n responses none of them answers: every response
    looks for its call among all the open ones."""
    calls = [{"role": "model", "parts": [{"functionCall": {"name": f"f{k}", "args": {}}}]}
             for k in range(n)]
    results = [{"role": "user", "parts": [{"functionResponse": {"name": f"g{k}", "response": {"o": "x"}}}]}
               for k in range(n)]
    return {"contents": [{"role": "user", "parts": [{"text": "go"}]}, *calls, *results]}


def gemini_one_turn(n: int) -> Body:
    """One model turn of n calls answered, last first, by one turn of n responses, and one
    user turn of n text parts."""
    calls = [{"functionCall": {"name": f"f{k}", "args": {"k": k}}} for k in range(n)]
    results = [{"functionResponse": {"name": f"f{k}", "response": {"output": "r"}}} for k in reversed(range(n))]
    texts = [{"text": f"t{k}"} for k in range(n)]
    return {"systemInstruction": {"parts": [{"text": "s"}] * 3},
            "contents": [{"role": "user", "parts": texts}, {"role": "model", "parts": calls},
                         {"role": "user", "parts": results}]}


def anthropic_turns(n: int) -> Body:
    uses = [{"type": "tool_use", "id": f"t{k}", "name": "f", "input": {"k": k}} for k in range(n)]
    results = [{"type": "tool_result", "tool_use_id": f"t{k}", "content": "r"} for k in reversed(range(n))]
    texts = [{"type": "text", "text": f"t{k}"} for k in range(n)]
    many = [{"role": r, "content": "x"} for _ in range(n) for r in ("user", "assistant")]
    return {"model": "claude", "max_tokens": 10, "system": [{"type": "text", "text": "s"}] * 3,
            "messages": [*many, {"role": "user", "content": texts}, {"role": "assistant", "content": uses},
                         {"role": "user", "content": results}]}


def anthropic_unmatched(n: int) -> Body:
    return {"model": "claude", "max_tokens": 10, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"u{k}", "content": "r"}
                                     for k in range(n)]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{k}", "name": "f", "input": {}}
                                          for k in range(n)]}]}


def responses_items(n: int) -> Body:
    """An assistant run of n reasoning items and n calls, n outputs last first, then
    turns that alternate."""
    run = [{"type": "reasoning", "id": f"r{k}", "summary": []} for k in range(n)]
    calls = [{"type": "function_call", "call_id": f"c{k}", "name": "f", "arguments": "{}"} for k in range(n)]
    outs = [{"type": "function_call_output", "call_id": f"c{k}", "output": "r"} for k in reversed(range(n))]
    talk = [{"role": r, "content": "x"} for _ in range(n) for r in ("user", "assistant")]
    return {"model": "gpt", "instructions": "s",
            "input": [{"role": "user", "content": "go"}, *run, *calls, *outs, *talk]}


def chat_messages(n: int) -> Body:
    calls = [{"id": f"c{k}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
             for k in range(n)]
    return {"model": "gpt", "messages": [
        {"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "x"}] * n},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *[{"role": "tool", "tool_call_id": f"c{k}", "content": "r"} for k in range(n)]]}


CASES: dict[str, tuple[str, Callable[[int], Body]]] = {
    "gemini_unmatched_calls_and_results": ("gemini", gemini_unmatched),
    "gemini_many_parts_per_turn": ("gemini", gemini_one_turn),
    "anthropic_many_blocks_and_turns": ("anthropic", anthropic_turns),
    "anthropic_unmatched_results": ("anthropic", anthropic_unmatched),
    "responses_long_runs_and_outputs": ("responses", responses_items),
    "chat_many_calls_and_results": ("chat", chat_messages),
}


def fresh(body: Body) -> bytes:
    """The body with a first item no earlier run sent (the memo keys on the array's start)."""
    out = json.loads(json.dumps(body))
    tag = f"run {next(_nonce)} " + "." * 1100
    for key in ("contents", "messages", "input"):
        if isinstance(out.get(key), list):
            out[key].insert(0, {"role": "user", "parts": [{"text": tag}]} if key == "contents"
                            else {"role": "user", "content": tag})
    return json.dumps(out).encode()


def rewritten(messages: list[Any]) -> list[Any]:
    """Every message changed: a tool result's text, a call's arguments, a content part."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("role") == "tool":
            m["content"] = "short"
        for_calls = m.get("tool_calls")
        if for_calls:
            m["tool_calls"] = [{**c, "function": {**c["function"], "arguments": '{"new":1}'}} for c in for_calls]
        if isinstance(m.get("content"), list) and m["content"] and SRC in m:
            m["content"] = [{"type": "text", "text": "changed"}, *m["content"][1:]]
        out.append(m)
    return out


def timed(api: str, build: Callable[[int], Body], splice: bool) -> Callable[[int], float]:
    """CPU seconds of this thread to parse a body of ``n`` (and splice a rewrite back)."""
    dialect = BY_NAME[api]

    def run(n: int) -> float:
        raw = fresh(build(n))
        start = time.thread_time()
        parsed = dialect.parse(raw, GEMINI_PATH)
        out = parsed.splice(rewritten(parsed.chat["messages"])) if splice else b"{}"
        took = time.thread_time() - start
        json.loads(out)  # still one JSON object
        return took

    return run


@pytest.mark.parametrize("case", CASES)
def test_every_dialect_parses_in_linear_time(case):
    api, build = CASES[case]
    ok, detail = grows_linearly(timed(api, build, splice=False), N, slack=0.02)
    assert ok, f"{case}: parsing grows faster than linearly:{detail}"


@pytest.mark.parametrize("case", CASES)
def test_every_dialect_splices_a_rewrite_back_in_linear_time(case):
    api, build = CASES[case]
    ok, detail = grows_linearly(timed(api, build, splice=True), N, slack=0.02)
    assert ok, f"{case}: splicing grows faster than linearly:{detail}"


def test_the_pathological_bodies_are_valid_requests_of_their_dialect():
    for case, (api, build) in CASES.items():
        parsed = BY_NAME[api].parse(fresh(build(5)), GEMINI_PATH)
        assert parsed.rewritable and len(parsed.chat["messages"]) >= 5, case
