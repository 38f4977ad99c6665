"""``context-engine bench [FILES…] [--rules …] [--limit N] [--replay] [--api API] [--json OUT]``.

Without FILES, the three dev files of the shared data folder are read. Every system runs
over the same cases: ``none``, ``last_n``, ``mask_observations``, the project's pipeline
with its configured rules (or ``--rules``), and each of those rules alone.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import time
from typing import Any

from rich.console import Console

from context_engine.bench import cases as cases_mod
from context_engine.bench import report as report_mod
from context_engine.bench.cases import Case
from context_engine.bench.runner import run_replay, run_single, summarize
from context_engine.bench.systems import (
    SYSTEM_KINDS,
    EngineSystem,
    build_systems,
    engine_settings,
    parse_variant,
)
from context_engine.bench.wire import APIS, WireSystem, convert_case
from context_engine.proxy.dialects.registry import NEUTRAL
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.proxy.settings import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", metavar="FILES",
                        help="JSONL data files, or names in the data folder (e.g. locomo); "
                             "default: the three *_dev.jsonl files")
    parser.add_argument("--rules", default=None,
                        help="comma-separated rules of the project system (default: configured)")
    parser.add_argument("--config", default=None, help="config.yaml to read rules and options from")
    parser.add_argument("--limit", type=int, default=None, help="at most N cases per file")
    parser.add_argument("--replay", action="store_true",
                        help="replay every request point of each case (conversations deduplicated)")
    parser.add_argument("--cache-ratio", type=float, default=0.1,
                        help="price of a cached input token relative to an uncached one")
    parser.add_argument("--anthropic", action="store_true",
                        help="replay: also bill each case as an Anthropic client would be billed "
                             "(its own breakpoints on the system prompt and newest message; a second "
                             "replay per case)")
    parser.add_argument("--cache-scope", choices=("session", "caller"), default="session",
                        help="replay bills: each session starts with a cold provider cache "
                             "(session), or all of a system's sessions share one, as one "
                             "organisation's traffic does (caller)")
    parser.add_argument("--last-n", type=int, default=12, help="N of the last_n baseline")
    parser.add_argument("--mask-keep", type=int, default=3,
                        help="tool outputs mask_observations leaves unmasked")
    parser.add_argument("--systems", default=",".join(SYSTEM_KINDS),
                        help=f"systems to run besides none: {', '.join(SYSTEM_KINDS)}")
    parser.add_argument("--model", default="gpt-4o", help="model name sent to the engine")
    parser.add_argument("--encodings", default="o200k_base,cl100k_base",
                        help="token encodings to count (the first is primary; replay uses it only)")
    parser.add_argument("--json", dest="json_out", default=None, metavar="OUT",
                        help="write the full results as JSON")
    parser.add_argument("--markdown", default=None, metavar="OUT",
                        help="write a short Markdown table (for the README)")
    parser.add_argument("--by-dataset", action="store_true",
                        help="report each meta.dataset of a file separately (e.g. tau-bench)")
    parser.add_argument("--by-category", action="store_true",
                        help="one table per meta.category_name (LoCoMo: single-hop, multi-hop, …) or "
                             "meta.question_type (LongMemEval)")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:RULE.OPT=VAL[,…]",
                        help="also run the engine with these options changed, as system NAME "
                             "(repeatable; e.g. 'no-expansion:retrieve.expansion=0')")
    parser.add_argument("--api", choices=APIS, default=NEUTRAL.name,
                        help="wire format the cases are sent in (the engine runs through its dialect)")
    parser.add_argument("--opaque", action="store_true",
                        help="--api responses|anthropic|gemini: add a reasoning/thinking/thought item "
                             "to every assistant turn and count requests that kept them byte for byte")
    parser.add_argument("--recall", action="store_true",
                        help="the engine offers context_recall and a scripted careful model recalls "
                             "missing evidence a marker names (bench/recall_model.py); replay: at "
                             "each cut point of a session")
    parser.add_argument("--no-reread", dest="reread", action="store_false",
                        help="replay: do not price the agent's way back to next-action evidence a "
                             "rewrite hid (bench/reread.py: a recall round or a re-run command, "
                             "whichever is cheaper, beside the bill; on by default, neutral "
                             "--api only)")
    parser.add_argument("--cold", action="store_true",
                        help="the engine meets every session on a fresh, empty store (a resumed "
                             "chat, a stateless client): nothing embedded or indexed before")
    parser.add_argument("--text-actions", action="store_true",
                        help="send each case as a text-action harness does (mini-swe-agent, "
                             "SWE-agent's text mode): commands as fenced text in the replies, "
                             "results as user turns, no tools")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


async def run(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    err = Console(stderr=True)
    try:
        settings = engine_settings(args.rules, args.config)
        variants = [parse_variant(v, settings) for v in args.variant]
        files = ([cases_mod.resolve_file(f) for f in args.files] if args.files
                 else cases_mod.default_files())
    except (ConfigError, FileNotFoundError) as exc:
        err.print(f"bench: {exc}", markup=False)
        return 2
    kinds = tuple(k.strip() for k in args.systems.split(",") if k.strip())
    unknown = [k for k in kinds if k not in SYSTEM_KINDS]
    if unknown or args.limit is not None and args.limit < 1:
        err.print(f"bench: bad --systems {unknown} (valid: {', '.join(SYSTEM_KINDS)}) or --limit",
                  markup=False)
        return 2
    systems = build_systems(settings, args.last_n, args.mask_keep, args.model, kinds, variants)
    for s in systems:
        if isinstance(s, EngineSystem):
            s.recall = args.recall
            s.cold = args.cold
    if args.api != NEUTRAL.name:
        systems = [WireSystem(s, args.api, args.opaque) if isinstance(s, EngineSystem) else s
                   for s in systems]
    counters = [TokenCounter(e.strip()) for e in args.encodings.split(",") if e.strip()]
    reread = bool(args.replay and args.reread and args.api == NEUTRAL.name)
    report: dict[str, Any] = {
        "command": "context-engine bench " + shlex.join(without_outputs(
            argv if argv is not None else sys.argv[1:])),
        "date": time.strftime("%Y-%m-%d"),
        "mode": "replay" if args.replay else "single",
        "rules": list(settings.rules),
        "rule_options": {k: dict(v) for k, v in sorted(settings.rule_options.items())},
        "variants": {name: {k: dict(v) for k, v in sorted(s.rule_options.items())}
                     for name, s in variants},
        "cache_ratio": args.cache_ratio,
        "cache_scope": args.cache_scope,
        "api": args.api,
        "cold": args.cold,
        "text_actions": args.text_actions,
        "reread": reread,
        "files": {},
    }
    for path in files:
        cases = cases_mod.load_cases(path, args.limit, dedupe=args.replay)
        name = path.name
        if args.text_actions:
            cases = [cases_mod.as_text_actions(c) for c in cases]
            name += " (text actions)"
        if args.api != NEUTRAL.name:
            cases = [convert_case(c, args.api, args.model, args.opaque) for c in cases]
        for label, group in _groups(name, cases, args.by_dataset, args.by_category):
            start = time.perf_counter()
            if args.replay:
                tallies = await run_replay(group, systems, counters[0], args.cache_ratio,
                                           args.anthropic, args.cache_scope, reread)
            else:
                tallies = await run_single(group, systems, counters)
            report["files"][label] = {"cases": len(group), "systems": summarize(tallies)}
            if not args.quiet:
                err.print(f"{label}: {len(group)} cases, {len(systems)} systems, "
                          f"{time.perf_counter() - start:.1f} s", markup=False)
    wired = [s for s in systems if isinstance(s, WireSystem) and s.tally.requests]
    if wired:
        report["opaque_intact"] = {s.name: [s.tally.intact, s.tally.requests] for s in wired}
        err.print("opaque items byte-identical: " + ", ".join(
            f"{s.name} {s.tally.intact}/{s.tally.requests}" for s in wired), markup=False)
    sent = [s for s in systems if isinstance(s, WireSystem) and s.tally.sent]
    if sent:
        report["outside_conversation_intact"] = {s.name: [s.tally.transparent, s.tally.sent] for s in sent}
        err.print("fields outside the conversation byte-identical: " + ", ".join(
            f"{s.name} {s.tally.transparent}/{s.tally.sent}" for s in sent), markup=False)
    report_mod.print_report(report)
    if args.json_out:
        report_mod.write_json(report, args.json_out)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as fh:  # noqa: ASYNC230 (the run is over)
            fh.write(report_mod.markdown(report))
    return 0


def without_outputs(argv: list[str], flags: tuple[str, ...] = ("--json", "--markdown")) -> list[str]:
    """The command line as a report names it: without where it was written (``--json OUT``,
    ``--markdown OUT``), so a committed report carries no path of the machine that ran it."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in flags:
            skip = True
        elif not arg.startswith(tuple(f + "=" for f in flags)):
            out.append(arg)
    return out


def _groups(name: str, cases: list[Case], by_dataset: bool,
            by_category: bool = False) -> list[tuple[str, list[Case]]]:
    if not by_dataset and not by_category:
        return [(name, cases)]

    def key(c: Case) -> str:
        category = str(c.meta.get("category_name") or c.meta.get("question_type") or "") \
            if by_category else ""  # LoCoMo's category, LongMemEval's question type
        return " ".join(p for p in (c.dataset, category) if p)

    keys = sorted({key(c) for c in cases})
    return [(f"{name} [{k}]", [c for c in cases if key(c) == k]) for k in keys]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="context-engine bench", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    return asyncio.run(run(args, argv))
