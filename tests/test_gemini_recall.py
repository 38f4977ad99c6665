"""context_recall on Gemini generateContent, answered inside the proxy: the real
google-genai SDK, a real proxy, and a loopback upstream that answers as Gemini does,
with the recall script of tests/fakes/recall_upstream.py (``decide``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from context_engine.proxy.demo.server_thread import ServerThread
from context_engine.proxy.dialects.gemini.recall import GEMINI, TOOL
from context_engine.proxy.dialects.gemini.request import parse
from tests.fakes.recall_upstream import decide
from tests.test_recall import LINES, recall_proxies

genai = pytest.importorskip("google.genai")
from google.genai import types  # noqa: E402

LEAD = "Let me check. "
DECLS: list[dict[str, Any]] = [{"name": "lookup", "description": "Look up a fact.",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]


class GeminiRecallUpstream(ServerThread):
    """Answers ``decide``'s reply in Gemini's shape; calls carry ``decide``'s ids."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.prompts: list[int] = []
        super().__init__(Starlette(routes=[Route("/{path:path}", self.generate, methods=["POST"])]))

    async def generate(self, request: Request) -> Response:
        raw = await request.body()
        body = json.loads(raw)
        self.requests.append(body)
        parsed = parse(raw, request.url.path)
        names = [f["name"] for t in body.get("tools") or () for f in t.get("functionDeclarations") or ()]
        text, calls = decide({"model": parsed.chat["model"], "messages": parsed.chat["messages"],
                              "tools": [{"function": {"name": n}} for n in names]})
        prompt = 100 + 10 * len(parsed.chat["messages"])
        self.prompts.append(prompt)
        usage = {"promptTokenCount": prompt, "candidatesTokenCount": 5, "totalTokenCount": prompt + 5}
        parts: list[dict[str, Any]] = [{"functionCall": {
            "id": c["id"], "name": c["function"]["name"], "args": json.loads(c["function"]["arguments"])}}
            for c in calls] or [{"text": str(text)}]

        def reply(parts: list[Any], meta: dict[str, Any] | None) -> dict[str, Any]:
            cand: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
            return {"candidates": [{**cand, "finishReason": "STOP"} if meta else cand],
                    **({"usageMetadata": meta} if meta else {}), "modelVersion": "m"}

        if not parsed.stream:
            return JSONResponse(reply(parts, usage))

        async def events() -> Any:
            for chunk in (reply([{"text": LEAD}], None), reply(parts, usage)):
                yield b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n"
        return StreamingResponse(events(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def up():
    with GeminiRecallUpstream() as server:
        yield server


@pytest.fixture
def proxy(up, tmp_path):
    with recall_proxies(up.url, tmp_path) as start:
        yield start


def contents(question: str = "What did sensor-100 read?") -> list[Any]:
    return [
        types.Content(role="user", parts=[types.Part(text="Check the sensors.")]),
        types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(
            id="call_1", name="lookup", args={}))]),
        types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
            id="call_1", name="lookup", response={"output": LINES}))]),
        types.Content(role="user", parts=[types.Part(text=question)]),
    ]


def ask(p: Any, model: str, stream: bool = False) -> tuple[str, Any]:
    client = genai.Client(api_key="gm-key", http_options=types.HttpOptions(base_url=p.url,
                                                                          api_version="v1beta"))
    decls = [types.FunctionDeclaration.model_validate(d) for d in DECLS]
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=decls)],
                                         system_instruction="You are terse.")
    if stream:
        chunks = list(client.models.generate_content_stream(model=model, contents=contents(), config=config))
        return "".join(c.text or "" for c in chunks), chunks[-1].usage_metadata
    r = client.models.generate_content(model=model, contents=contents(), config=config)
    return r.text or "", r.usage_metadata


@pytest.mark.parametrize("stream", [False, True])
def test_recall_is_answered_inside_the_proxy(proxy, up, stream):
    p = proxy()
    before = len(up.requests)
    text, usage = ask(p, "recall-id", stream)
    first, second = up.requests[before:]
    assert first["tools"][-1] == TOOL and len(first["tools"]) == 2
    cut = first["contents"][2]["parts"][0]["functionResponse"]["response"]["output"]
    assert "row 100:" not in cut and "(context_recall)]" in cut
    assert second["contents"][:4] == first["contents"]
    call = second["contents"][4]["parts"][-1]["functionCall"]
    assert call["name"] == "context_recall" and call["id"] == "call_r1"
    assert second["contents"][5] == {"role": "user", "parts": [{"functionResponse": {
        "name": "context_recall", "response": {"output": LINES}, "id": "call_r1"}}]}
    assert text == (LEAD + LEAD if stream else "") + "I read: " + LINES
    assert usage.prompt_token_count == sum(up.prompts[before:])
    row = p.rows()[-1]
    assert (row["api"], row["recall_rounds"], row["recall_prompt_tokens"]) == ("gemini", 1, up.prompts[-1])
    assert row["prompt_tokens"] == sum(up.prompts[before:])


def test_the_tool_is_not_offered_where_gemini_would_not_let_it_be_called():
    base = {"contents": [], "tools": [{"functionDeclarations": DECLS}]}
    assert GEMINI.can_offer(base)
    assert not GEMINI.can_offer({**base, "tools": [{"googleSearch": {}}]})
    assert not GEMINI.can_offer({**base, "cachedContent": "cachedContents/x"})
    for calling in ({"mode": "NONE"}, {"mode": "ANY", "allowedFunctionNames": ["lookup"]}):
        assert not GEMINI.can_offer({**base, "toolConfig": {"functionCallingConfig": calling}})
    assert not GEMINI.can_offer({**base, "tools": [{"functionDeclarations": DECLS}, TOOL]})


def test_a_relayed_reply_hides_its_recall_calls():
    reader = GEMINI.reader()
    chunk = {"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "lookup", "args": {}}},
        {"functionCall": {"name": "context_recall", "args": {"id": "#1"}}}]}}]}
    assert not reader.take(chunk) or reader.hold.client_first
    shown = reader.hide(chunk)
    assert shown is not None
    assert shown["candidates"][0]["content"]["parts"] == [{"functionCall": {"name": "lookup", "args": {}}}]
    turn = reader.turn()
    assert [c.arguments for c in turn.calls] == [{"id": "#1"}] and turn.others == 1
