"""``context-engine eval [FILES…] --base-url URL --model NAME [--judge-model NAME] …``

Asks a real model every probe question of the cases twice, as sent and as the rules
rewrite it, through any OpenAI-compatible ``/chat/completions`` (OpenAI, vLLM, Ollama,
llama.cpp, LM Studio), and prints both scores, their paired difference with a 95%
bootstrap interval, tokens and cost, overall and per category. Answers are cached by
request hash under ``--cache``: a second run, or one resumed after an interruption,
asks only what is not answered yet. Exit status 1 when a request failed.

``context-engine eval agent …`` is the task-success A/B instead (``eval_agent_cli``).
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import time
from typing import Any

from context_engine.bench import cases as cases_mod
from context_engine.bench.cases import Case
from context_engine.bench.cli import without_outputs
from context_engine.bench.eval_client import AnswerCache, ChatClient, api_key_from
from context_engine.bench.eval_report import render, summarize, write_json
from context_engine.bench.eval_run import Options, evaluate, questions_of
from context_engine.bench.systems import EngineSystem, engine_settings
from context_engine.proxy.billing.pricing import price_for
from context_engine.proxy.engine.contract import Registry
from context_engine.proxy.settings import ConfigError
from context_engine.rules import REGISTRY

DEFAULT_FILES = ("locomo", "agent_traces")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", metavar="FILES",
                        help="JSONL case files, or names in the data folder (default: locomo "
                             "agent_traces)")
    parser.add_argument("--base-url", required=True,
                        help="OpenAI-compatible base URL, e.g. http://127.0.0.1:11434/v1 (Ollama), "
                             "http://127.0.0.1:8000/v1 (vLLM), https://api.openai.com/v1")
    parser.add_argument("--model", required=True, help="model name the server knows")
    parser.add_argument("--api-key", default=None,
                        help="Bearer key (default: $CONTEXT_ENGINE_EVAL_API_KEY, else $OPENAI_API_KEY, "
                             "else none)")
    parser.add_argument("--judge-model", default=None,
                        help="also ask this model (same server) to judge each answer CORRECT/WRONG")
    parser.add_argument("--rules", default=None, help="comma-separated rules (default: configured)")
    parser.add_argument("--config", default=None, help="config.yaml with the rules and options")
    parser.add_argument("--limit", type=int, default=None, help="the first N cases of each file")
    parser.add_argument("--sample", type=int, default=None,
                        help="N cases of each file, evenly spaced through it (every conversation "
                             "and category of LoCoMo, where --limit takes the first ones)")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight at most")
    parser.add_argument("--cache", default=".context-engine/eval",
                        help="folder of the answer cache (answers.jsonl); '' = no cache")
    parser.add_argument("--max-tokens", type=int, default=200,
                        help="max_tokens of each request (0 = not sent)")
    parser.add_argument("--temperature", default="0", help="temperature sent ('none' = not sent)")
    parser.add_argument("--no-tools", action="store_true",
                        help="leave the cases' tool schemas out of the requests (for servers that "
                             "reject tools, e.g. llama.cpp without --jinja)")
    parser.add_argument("--price-model", default=None,
                        help="model whose list price the cost uses (default: --model if litellm's "
                             "map knows it, else gpt-4o)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    parser.add_argument("--retries", type=int, default=4, help="retries on 429, 5xx, network errors")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    parser.add_argument("--json", dest="json_out", default=None, metavar="OUT",
                        help="write the full results (per question too) as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _spread(cases: list[Case], n: int | None) -> list[Case]:
    if n is None or n >= len(cases):
        return cases
    return [cases[i * len(cases) // n] for i in range(n)]


def _temperature(raw: str) -> float | None:
    return None if raw.strip().lower() == "none" else float(raw)


async def run(args: argparse.Namespace, argv: list[str] | None = None,
              registry: Registry = REGISTRY) -> int:
    """``registry``: where rule names are looked up (tests pass their own rules)."""
    try:
        settings = engine_settings(args.rules, args.config, registry)
        files = [cases_mod.resolve_file(f) for f in (args.files or DEFAULT_FILES)]
        temperature = _temperature(args.temperature)
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        print(f"eval: {exc}", file=sys.stderr)
        return 2
    if any(n is not None and n < 1 for n in (args.limit, args.sample, args.concurrency)):
        print("eval: --limit, --sample and --concurrency must be at least 1", file=sys.stderr)
        return 2
    questions = [q for path in files
                 for q in questions_of(_spread(cases_mod.load_cases(path, args.limit), args.sample))]
    if not questions:
        print("eval: the cases hold no probe with a question and an answer", file=sys.stderr)
        return 2
    opts = Options(args.model, args.max_tokens, temperature, args.judge_model, not args.no_tools)
    price_model = args.price_model or (args.model if price_for(args.model) else "gpt-4o")
    client = ChatClient(args.base_url, api_key_from(args.api_key), AnswerCache(args.cache or None),
                        args.concurrency, args.retries, args.timeout)
    start = time.perf_counter()
    try:
        system = EngineSystem("engine", settings, args.model, registry=registry)
        results = await evaluate(questions, system, client, opts, args.quiet)
    finally:
        await client.aclose()
    report: dict[str, Any] = {
        "command": "context-engine eval " + shlex.join(without_outputs(
            argv if argv is not None else sys.argv[1:], ("--json",))),
        "date": time.strftime("%Y-%m-%d"),
        "model": args.model, "base_url": args.base_url, "judge_model": args.judge_model,
        "files": [p.name for p in files], "rules": list(settings.rules),
        "asked": client.asked, "seconds": round(time.perf_counter() - start, 1),
        **summarize(results, price_model, bool(args.judge_model), args.seed)}
    print(render(report))
    if not args.quiet:
        print(f"eval: {client.asked} requests asked, the rest from the cache; "
              f"{report['seconds']} s", file=sys.stderr)
    if args.json_out:
        write_json(report, args.json_out)
    return 1 if report["errors"] else 0


def main(argv: list[str] | None = None, registry: Registry = REGISTRY) -> int:
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == ["agent"]:  # ``eval agent``: the task-success A/B (docs/eval-agent.md)
        from context_engine.bench.eval_agent_cli import main as agent_main

        return agent_main(given[1:])
    parser = argparse.ArgumentParser(prog="context-engine eval", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args(argv)
    return asyncio.run(run(args, argv, registry))
