"""One eval run: each probe of each case asked twice, as the client sent it and as the
rules rewrite it, and both answers scored.

A *question* is one probe of one case (probes of a case that ask the same question are
one question with several gold answers: ToolBench's "which value … appears"). LoCoMo cases end with the probe's question, so the
case's messages are the request. Agent traces end on a tool result or user turn; the
probe's question is appended as a last user turn (with ``ASK`` asking for the bare value),
so it is the same in both arms and the rules see it as the current turn. Tool schemas go
along with ``tool_choice: "none"`` (the model answers in text), unless ``--no-tools``
leaves them out for servers that reject ``tools`` (llama.cpp without ``--jinja``).

The rewrite runs in process through ``EngineSystem`` (bench/systems.py), the path ``bench``
uses (the server's ``Engine``, a fresh session per question, one shared memory store).
Rewrites run one after another in file order; the questions go to the server as their
rewrite is ready, at most ``--concurrency`` at once.

Tokens are counted (o200k_base, tool schemas included) for every request. Their cached
share comes from replaying both arms' requests, in file order, through OpenAI's prefix
caching as ``OpenAISim`` (bench/billing.py) simulates it: questions about one conversation
share its whole prefix when sent unchanged, which a rewrite that differs per question
gives up.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from context_engine.bench.billing import OpenAISim, render
from context_engine.bench.cases import Case
from context_engine.bench.eval_client import Answer, ChatClient
from context_engine.bench.eval_score import best_f1, judge_prompt, judge_verdict, strip_reasoning
from context_engine.bench.systems import EngineSystem, Outcome
from context_engine.proxy.engine.messages import text_of
from context_engine.proxy.engine.tokens import TokenCounter

Messages = list[dict[str, Any]]
ARMS = ("original", "rewritten")
ASK = " Answer with the value only."


@dataclass(frozen=True)
class Question:
    id: str
    category: str
    question: str
    golds: tuple[str, ...]  # any of them answers the question
    messages: Messages
    tools: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class Options:
    model: str
    max_tokens: int = 200  # 0: not sent
    temperature: float | None = 0.0  # None: not sent
    judge_model: str | None = None
    send_tools: bool = True  # False: tool schemas left out (servers that reject ``tools``)


@dataclass
class Result:
    question: Question
    answers: dict[str, Answer] = field(default_factory=dict)
    f1: dict[str, float] = field(default_factory=dict)
    judge: dict[str, float | None] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)  # counted request tokens
    completion: dict[str, int] = field(default_factory=dict)
    sim_cached: dict[str, int] = field(default_factory=dict)  # input tokens read from the cache
    failed_open: bool = False
    messages_sent: int = 0  # messages of the rewritten request

    @property
    def error(self) -> str | None:
        return next((a.error for a in self.answers.values() if a.error), None)


def questions_of(cases: Sequence[Case]) -> list[Question]:
    out: list[Question] = []
    for case in cases:
        category = str(case.meta.get("category_name") or case.dataset or "all")
        golds: dict[str, list[str]] = {}  # question → its probes' answers, in case order
        for p in case.probes:
            if p.question.strip() and p.answer.strip():
                golds.setdefault(p.question.strip(), []).append(p.answer)
        for n, (question, answers) in enumerate(golds.items()):
            last = case.messages[-1] if case.messages else {}
            if last.get("role") == "user" and text_of(last).strip() == question:
                messages = case.messages
            else:
                messages = case.messages + [{"role": "user", "content": question + ASK}]
            qid = case.id if len(golds) == 1 else f"{case.id}#{n}"
            out.append(Question(qid, category, question, tuple(answers), messages, case.tools))
    return out


def chat_body(opts: Options, model: str, messages: Messages,
              tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": messages}
    if opts.temperature is not None:
        body["temperature"] = opts.temperature
    if opts.max_tokens:
        body["max_tokens"] = opts.max_tokens
    if tools and opts.send_tools:
        body["tools"] = tools
        body["tool_choice"] = "none"
    return body


async def _ask_both(q: Question, out: Outcome, client: ChatClient, opts: Options,
                    counter: TokenCounter) -> Result:
    result = Result(q, failed_open=out.failed_open or bool(out.reverted_because),
                    messages_sent=len(out.messages))
    sent = {"original": q.messages, "rewritten": out.messages}
    answers = await asyncio.gather(*(client.ask(chat_body(opts, opts.model, sent[arm], q.tools))
                                     for arm in ARMS))
    for arm, answer in zip(ARMS, answers):
        text = strip_reasoning(answer.text)
        result.answers[arm] = answer
        result.f1[arm] = best_f1(text, q.golds)
        result.tokens[arm] = counter.request(sent[arm], q.tools)
        reported = (answer.usage or {}).get("completion_tokens")
        result.completion[arm] = int(reported) if isinstance(reported, int) else counter.text(answer.text)
    if opts.judge_model and result.error is None:
        verdicts = await asyncio.gather(*(client.ask(chat_body(
            opts, opts.judge_model,
            [{"role": "user", "content": judge_prompt(q.question, q.golds,
                                                      strip_reasoning(result.answers[arm].text))}],
            None)) for arm in ARMS))
        for arm, verdict in zip(ARMS, verdicts):
            result.judge[arm] = None if verdict.error else judge_verdict(verdict.text)
    return result


async def evaluate(questions: Sequence[Question], system: EngineSystem, client: ChatClient,
                   opts: Options, quiet: bool = False) -> list[Result]:
    """Every question through both arms; results in question order."""
    counter = TokenCounter()
    tasks: list[asyncio.Task[Result]] = []
    rewritten: list[Messages] = []
    for n, q in enumerate(questions, start=1):
        out = await system.open("eval:" + q.id).rewrite(q.messages, q.tools)
        rewritten.append(out.messages)
        tasks.append(asyncio.create_task(_ask_both(q, out, client, opts, counter)))
        await asyncio.sleep(0)  # let the answers already asked for come in
        if not quiet and n % 20 == 0:
            print(f"eval: {n}/{len(questions)} rewritten", file=sys.stderr)
    results = list(await asyncio.gather(*tasks))
    sims = {arm: OpenAISim() for arm in ARMS}
    for q, out_messages, result in zip(questions, rewritten, results):
        for arm, messages in (("original", q.messages), ("rewritten", out_messages)):
            _, cached, _ = sims[arm].bill(render(messages, q.tools))
            result.sim_cached[arm] = min(cached, result.tokens[arm])
    return results
