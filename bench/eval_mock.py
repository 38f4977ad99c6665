"""A loopback model for ``context-engine eval`` that answers from what the request shows.

It plays a perfect reader with no memory of its own: it knows the probes of the case
files it was given (a question asked of several conversations is matched to the one
whose user turns the request shows most of), and answers a probe's question with the
gold answer only when that probe's evidence (every exact substring, as ``visible_text``
in bench/metrics.py sees text) is visible in the messages before the question; with no
evidence listed, when the answer itself is visible. Otherwise it says it does not know.
A rewrite that loses evidence therefore loses score, and one that keeps it loses none.
As a judge (a prompt from ``judge_prompt`` in bench/eval_score.py) it says CORRECT
when every word of a gold answer is in the generated one.

Usage is reported as the loopback mock upstream reports it (o200k tokens, simulated
prefix caching), or left out (``omit_usage``) as some local servers do. Models
``mock-429`` and ``mock-500`` answer with that error.

``python -m context_engine.bench.eval_mock locomo agent_traces --port 8790 [--no-usage]
[--delay S]``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from context_engine.bench.cases import Case, Probe
from context_engine.bench.eval_run import ASK
from context_engine.bench.eval_score import JUDGE_HEAD, normalize
from context_engine.bench.metrics import visible_text
from context_engine.proxy.demo.mock_upstream import MockState, ServerThread, _prompt_tokens
from context_engine.proxy.engine.messages import text_of

UNKNOWN = "I don't know."


@dataclass
class Reader:
    # question → (probe, the user turns of its case: which conversation a request is)
    probes: dict[str, list[tuple[Probe, tuple[str, ...]]]] = field(
        default_factory=lambda: defaultdict(list))

    @classmethod
    def of(cls, cases: Sequence[Case]) -> Reader:
        reader = cls()
        for case in cases:
            turns = tuple(t for m in case.messages if m.get("role") == "user"
                          for t in [text_of(m)] if len(t) > 20)
            for probe in case.probes:
                reader.probes[probe.question.strip()].append((probe, turns))
        return reader

    def answer(self, messages: list[dict[str, Any]]) -> str:
        last = text_of(messages[-1]) if messages else ""
        if last.startswith(JUDGE_HEAD):
            return judge(last)
        candidates = self.probes.get(last.removesuffix(ASK).strip(), [])
        if not candidates:
            return UNKNOWN
        visible = visible_text(messages[:-1])
        # the same question asked of several conversations: the one this request shows most of
        shown = [sum(t in visible for t in turns) for _, turns in candidates]
        for (probe, _), n in zip(candidates, shown):
            if n < max(shown):
                continue
            if probe.evidence and all(e in visible for e in probe.evidence):
                return probe.answer
            if not probe.evidence and normalize(probe.answer) in normalize(visible):
                return probe.answer
        return UNKNOWN


def judge(prompt: str) -> str:
    gold = re.search(r"^Gold answer: (.*)$", prompt, re.MULTILINE)
    said = re.search(r"^Generated answer: (.*)$", prompt, re.MULTILINE)
    got = set(normalize(said.group(1)).split()) if said else set()
    for answer in gold.group(1).split(" | ") if gold else ():
        want = set(normalize(answer).split())
        if want and want <= got:
            return "CORRECT"
    return "WRONG"


@dataclass
class EvalMockState(MockState):
    reader: Reader = field(default_factory=Reader)
    omit_usage: bool = False
    delay: float = 0.0
    asked: int = 0


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": {"message": message, "type": "server_error", "param": None,
                                   "code": None}}, status_code=status)


def build_app(state: EvalMockState) -> Starlette:
    async def chat(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
            messages = list(body["messages"])
        except (ValueError, KeyError, TypeError):
            return _error(400, "body must be JSON with messages")
        state.asked += 1
        model = str(body.get("model", ""))
        if model in ("mock-429", "mock-500"):
            return _error(int(model[-3:]), "mock error")
        if state.delay:
            await asyncio.sleep(state.delay)
        text = state.reader.answer(messages)
        data: dict[str, Any] = {
            "id": f"chatcmpl-eval{state.asked}", "object": "chat.completion",
            "created": 1700000000, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}]}
        if not state.omit_usage:
            prompt, cached = _prompt_tokens(state, body)
            completion = state.counter.text(text)
            data["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion,
                             "prompt_tokens_details": {"cached_tokens": cached}}
        return JSONResponse(data)

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


class EvalMock(ServerThread):
    def __init__(self, cases: Sequence[Case], omit_usage: bool = False, delay: float = 0.0,
                 port: int = 0) -> None:
        self.state = EvalMockState(reader=Reader.of(cases), omit_usage=omit_usage, delay=delay)
        super().__init__(build_app(self.state), port)

    @property
    def base_url(self) -> str:
        return self.url + "/v1"


def main(argv: list[str] | None = None) -> None:
    import argparse

    import uvicorn

    from context_engine.bench.cases import load_cases, resolve_file

    p = argparse.ArgumentParser(description="eval's reader model on 127.0.0.1")
    p.add_argument("files", nargs="+", help="case files whose probes it answers")
    p.add_argument("--port", type=int, default=8790)
    p.add_argument("--no-usage", action="store_true", help="leave usage out of the replies")
    p.add_argument("--delay", type=float, default=0.0, help="seconds before each reply")
    args = p.parse_args(argv)
    cases = [c for f in args.files for c in load_cases(resolve_file(f))]
    state = EvalMockState(reader=Reader.of(cases), omit_usage=args.no_usage, delay=args.delay)
    uvicorn.run(build_app(state), host="127.0.0.1", port=args.port, log_level="warning",
                access_log=False)


if __name__ == "__main__":
    main()
