"""The LLM summarizer against a loopback mock upstream (real HTTP through litellm), its
reply validation, and the fallback to rule-based slots on bad JSON or a timeout."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from context_engine.proxy.engine.messages import SUMMARY_HEADER
from context_engine.rules.summarize.llm import LiteLLMSummarizer, parse_slots, transcript
from context_engine.rules.summarize.rule import Summarize, SummarizeConfig
from context_engine.rules.summarize.slots import Slots
from tests.harness import assert_valid_rewrite, make_ctx, make_deps

SLOT_JSON = {"confirmed_facts": ["user id mia_li_3668", "flight HAT069 on 2024-05-20"],
             "preferences": ["aisle seat"], "decisions": [], "pending_tasks": ["add a bag"],
             "revocations": []}


class Upstream(BaseHTTPRequestHandler):
    """Plays an OpenAI chat-completions endpoint; ``server.reply`` picks the behaviour."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)  # type: ignore[attr-defined]
        mode = self.server.reply  # type: ignore[attr-defined]
        if mode == "slow":
            time.sleep(1.5)
        content = json.dumps(SLOT_JSON) if mode in ("slots", "slow") else "Sorry, I cannot."
        payload = json.dumps({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "mock",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        }).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (the timeout case)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def upstream(monkeypatch: pytest.MonkeyPatch) -> Iterator[ThreadingHTTPServer]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-loopback")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    server.daemon_threads = True
    server.requests = []  # type: ignore[attr-defined]
    server.reply = "slots"  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def chat() -> list[dict]:
    msgs = [{"role": "system", "content": "You are a travel agent."}]
    for i in range(4):
        msgs.append({"role": "user", "content": f"My user ID is mia_li_3668; please book flight "
                     f"HAT069 on 2024-05-20 and add bag number {i}."})
        msgs.append({"role": "assistant", "content": f"I will book HAT069 and add bag {i}."})
    msgs.append({"role": "user", "content": "Done?"})
    return msgs


# a generous timeout where the model answers: under a loaded CI machine the first call
# (litellm imported lazily inside it) took over 10 s and fell back, failing the test
def summarize_with(server: ThreadingHTTPServer, timeout: float = 60.0) -> Any:
    config = SummarizeConfig(min_tokens=0, window=2, block=4, summary_model="openai/mock-model",
                             summary_api_base=f"http://127.0.0.1:{server.server_port}/v1",
                             summary_timeout=timeout)
    rule = Summarize(config, make_deps())
    return asyncio.run(rule.apply(make_ctx(chat())))


@pytest.mark.slow
def test_the_model_fills_the_slots_once_per_block(upstream):
    out = summarize_with(upstream)
    assert_valid_rewrite(chat(), out)
    summary = next(m["content"] for m in out.messages if m["content"].startswith(SUMMARY_HEADER))
    assert "- flight HAT069 on 2024-05-20" in summary and "- aisle seat" in summary
    assert out.notes["summarize"]["llm_blocks"] == 1
    sent = upstream.requests[0]
    assert sent["model"] == "mock-model" and "pending_tasks" in sent["messages"][0]["content"]
    assert "user: My user ID is mia_li_3668" in sent["messages"][1]["content"]


@pytest.mark.parametrize("mode,timeout", [("prose", 60.0), ("slow", 0.3)])
def test_bad_json_or_a_timeout_falls_back_to_the_rules(upstream, mode, timeout):
    upstream.reply = mode
    out = summarize_with(upstream, timeout)
    rules = Summarize(SummarizeConfig(min_tokens=0, window=2, block=4), make_deps())
    rules_only = asyncio.run(rules.apply(make_ctx(chat())))
    assert out.notes["summarize"]["llm_blocks"] == 0
    assert out.messages == rules_only.messages


def test_parse_slots_validates_the_reply():
    assert parse_slots(json.dumps(SLOT_JSON)) == Slots(
        confirmed_facts=("user id mia_li_3668", "flight HAT069 on 2024-05-20"),
        preferences=("aisle seat",), pending_tasks=("add a bag",))
    fenced = "```json\n" + json.dumps({"decisions": "go with HAT069", "extra": 1}) + "\n```"
    assert parse_slots(fenced) == Slots(decisions=("go with HAT069",))
    assert parse_slots("not json") is None
    assert parse_slots("[1, 2]") is None
    assert parse_slots(json.dumps({"unrelated": []})) is None
    assert parse_slots(json.dumps({"decisions": {"a": 1}})) is None
    long = parse_slots(json.dumps({"confirmed_facts": ["x " * 300] * 40, "decisions": [{"a": 1}]}))
    assert long is not None and len(long.confirmed_facts) == 12
    assert all(len(x) <= 200 for x in long.confirmed_facts) and long.decisions == ('{"a": 1}',)


def test_transcript_shows_calls_and_results():
    msgs: list[Any] = [{"role": "user", "content": "Find ZFA04Y."},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "get", "arguments": '{"id": "ZFA04Y"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "{\"status\": \"ok\"}"}]
    assert transcript(msgs) == ('user: Find ZFA04Y.\nassistant calls get({"id": "ZFA04Y"})\n'
                                'tool result: {"status": "ok"}')


def test_the_summarizer_kind_names_the_model():
    assert LiteLLMSummarizer("openai/x").kind == "llm:openai/x"
