"""``context-engine``: serve, run, stop, status, doctor, report, demo, bench, eval, rules, kb."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from context_engine.proxy.sanitize import redact_url
from context_engine.proxy.settings import ConfigError, Settings, load_settings


def _serve_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port to listen on (default 8787)")
    p.add_argument("--upstream", help="upstream base URL (default https://api.openai.com/v1)")
    p.add_argument("--config", help="path to config.yaml (default ./config.yaml if present)")
    p.add_argument("--rules", help='enabled rules in order, comma separated; "" = passthrough')
    p.add_argument("--ledger", help="ledger: a SQLite file path or postgresql://…")
    p.add_argument("--store", help="store: a directory, memory:// or redis://…")
    p.add_argument("--mode", help="rewrite | shadow | ab")


def _settings(args: argparse.Namespace) -> Settings:
    flags = {k: getattr(args, k, None) for k in
             ("host", "port", "upstream", "rules", "ledger", "store", "mode")}
    return load_settings(flags=flags, config_path=getattr(args, "config", None))


def cmd_serve(args: argparse.Namespace) -> int:
    from context_engine.proxy.edge.app import create_app
    from context_engine.proxy.edge.heap import settle_heap
    from context_engine.proxy.edge.launch_identity import launcher_routes, take_secret
    from context_engine.proxy.edge.shutdown import serve
    from context_engine.proxy.store.files import private_umask

    private_umask()  # the ledger, the store and anything else this process writes: owner only
    launch_secret = take_secret()  # from `context-engine run`: out of the environment at once
    settings = _settings(args)
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings)
    app.router.routes[:0] = launcher_routes(launch_secret)  # proxy/edge/launch_identity.py
    logging.getLogger("context_engine").info(
        "context-engine on http://%s:%d → %s, mode %s, rules: %s", settings.host, settings.port,
        redact_url(settings.upstream), settings.mode,
        ", ".join(settings.rules) or "(none: passthrough)")
    # SIGTERM/SIGINT: flush the ledger, let requests in flight run for shutdown_grace, then
    # the app's shutdown finishes their rows and closes, all within a container's grace
    # period (proxy/edge/shutdown.py). A second Ctrl-C (SIGINT) exits at once.
    settle_heap()  # what start-up built is never walked by the collector again
    fd = {"fd": args.fd} if getattr(args, "fd", None) is not None else {}  # `run` bound it: no race
    serve(app, {**server_options(settings), **fd})
    return 0


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's options for ``serve``: at most ``max_connections`` connections at once
    (503 beyond); requests in flight get ``shutdown_grace`` on SIGTERM."""
    return {"host": settings.host, "port": settings.port, "log_level": settings.log_level,
            "access_log": False, "timeout_graceful_shutdown": max(1, round(settings.shutdown_grace)),
            "limit_concurrency": settings.max_connections}


def cmd_report(args: argparse.Namespace) -> int:
    from rich.console import Console

    from context_engine.proxy.recording.ledger import read_rows
    from context_engine.proxy.reporting.report import build, parse_since, render, to_csv, to_json

    settings = _settings(args)
    try:
        since = parse_since(args.since)
    except ValueError as exc:
        print(f"context-engine: {exc}", file=sys.stderr)
        return 2
    try:
        rows = read_rows(settings.ledger, since)
    except ValueError as exc:  # an unreachable database
        raise ConfigError(f"ledger: {exc}") from None
    if args.quality:  # what the rewrite costs the agent (proxy/reporting/quality.py)
        from context_engine.proxy.reporting import quality, quality_render

        by = "rule" if args.by == "model" else args.by
        if by not in quality.BY:
            print(f"context-engine: --quality --by takes {', '.join(quality.BY)}", file=sys.stderr)
            return 2
        data, show = quality.build(rows, by), quality_render.render
    else:
        data, show = build(rows, args.by), render
    if args.format == "json":
        print(to_json(data))
    elif args.format == "csv":
        print(to_csv(data), end="")
    elif not rows:
        print(f"No requests in the ledger at {redact_url(settings.ledger)}" + (f" since {args.since}" if args.since else ""))
    else:
        console = Console(width=150)
        for part in show(data):
            console.print(part)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from context_engine.proxy.demo.demo import run_demo

    return run_demo(_settings(args), turns=args.turns)


BENCH_COMMANDS = {"bench": "context_engine.bench.cli", "eval": "context_engine.bench.eval_cli"}


def cmd_bench(name: str, argv: list[str]) -> int:
    """``bench`` and ``eval``: their own parsers, in the bench package (which a slim build
    may leave out)."""
    import importlib

    try:
        module = importlib.import_module(BENCH_COMMANDS[name])
    except ImportError:
        print(f"context-engine: the {name} is not installed in this build", file=sys.stderr)
        return 2
    return int(module.main(argv))


def rules_yaml() -> str:
    """The ``rules:`` and ``rule_options:`` blocks of config.yaml, with every option's help."""
    import json

    from context_engine.proxy.engine.contract import config_help
    from context_engine.rules import DEFAULT_RULES, REGISTRY

    order = list(REGISTRY)  # the recommended run order; turning a rule on keeps its place
    lines = ["rules:"] + [f"  {n}: {'true' if n in DEFAULT_RULES else 'false'}" for n in order]
    lines += ["", "rule_options:"]
    for name in order:
        lines.append(f"  {name}:")
        for opt, _kind, default, text in config_help(REGISTRY[name].Config):
            value = json.dumps(list(default) if isinstance(default, tuple) else default, ensure_ascii=False)
            lines.append(f"    {opt}: {value}  # {text}")
    return "\n".join(lines) + "\n"


def cmd_rules(args: argparse.Namespace) -> int:
    from context_engine.proxy.engine.contract import config_help
    from context_engine.rules import DEFAULT_RULES, REGISTRY

    if args.yaml:
        print(rules_yaml(), end="")
        return 0
    for name in sorted(REGISTRY):
        on = "on by default" if name in DEFAULT_RULES else "off by default"
        print(f"{name} ({on})")
        for opt, kind, default, text in config_help(REGISTRY[name].Config):
            print(f"  {opt}: {kind} = {default!r}  — {text}")
    return 0


def cmd_kb(args: argparse.Namespace) -> int:
    from context_engine.rules import run_kb

    return run_kb(args, _settings(args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="context-engine", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="run the proxy")
    _serve_flags(p)
    p.add_argument("--fd", type=int, help="listen on this inherited, bound socket (for `run`)")
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("report", help="the bill before and after, from the ledger")
    _serve_flags(p)
    p.add_argument("--since", help="30m, 24h, 7d or an ISO date")
    p.add_argument("--by", choices=("model", "rule", "session", "day", "api", "replica",
                                                "agent", "project"), default="model")
    p.add_argument("--format", choices=("table", "json", "csv"), default="table")
    p.add_argument("--quality", action="store_true",
                   help="what the rewrite costs the agent: re-reads, recall calls, turns, errors "
                        "(--by rule|agent|project|day)")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("demo", help="replay a bundled agent conversation through the proxy")
    _serve_flags(p)
    p.add_argument("--turns", type=int, default=0, help="stop after N requests (0 = all)")
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("rules", help="list the rules and their options")
    p.add_argument("--yaml", action="store_true", help="print the config.yaml rules blocks")
    p.set_defaults(func=cmd_rules)
    p = sub.add_parser("kb", help="build the knowledge base: document status, clauses, a trial search")
    p.add_argument("--config", help="path to config.yaml (default ./config.yaml if present)")
    p.add_argument("--store", help="store to embed into: a directory, memory:// or redis://…")
    p.add_argument("--dir", help="knowledge folder (default: rule_options.retrieve.knowledge_dir)")
    p.add_argument("--date", help="ISO date for validity (default: knowledge_date, else today)")
    p.add_argument("--query", help="also run this search and print the zone it would inject")
    p.add_argument("--strict", action="store_true", help="exit 1 when a document cannot be read")
    p.set_defaults(func=cmd_kb)
    sub.add_parser("run", help="run an agent through the background proxy (see run --help)",
                   add_help=False)
    p = sub.add_parser("stop", help="end the background proxy that run started")
    p.set_defaults(func=lambda args: _launcher().stop_main())
    p = sub.add_parser("status", help="a live view of the proxy's sessions, tokens and savings")
    p.add_argument("--url", help="the proxy (default: the one run started, else http://127.0.0.1:8787)")
    p.add_argument("--token", help="admin token, if the proxy needs one")
    p.add_argument("--once", action="store_true", help="print one frame and exit")
    p.add_argument("--every", type=float, default=2.0, help="seconds between refreshes")
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("doctor", help="check what the proxy needs, and say how to fix each problem")
    _serve_flags(p)
    p.add_argument("--offline", action="store_true", help="skip the upstream reachability check")
    p.set_defaults(func=cmd_doctor)
    from context_engine.proxy.reporting.purge import add_parser as add_purge

    add_purge(sub, _serve_flags, _settings)
    sub.add_parser("bench", help="benchmark the rules on JSONL cases (see bench --help)", add_help=False)
    sub.add_parser("eval", help="ask a model the cases' questions with and without the rules "
                   "(see eval --help)", add_help=False)
    return parser


def _launcher() -> Any:
    from context_engine.proxy.launcher import run

    return run


def cmd_status(args: argparse.Namespace) -> int:
    from context_engine.proxy.launcher.status import watch

    return watch(args.url, args.token, once=args.once, every=args.every)


def cmd_doctor(args: argparse.Namespace) -> int:
    from context_engine.proxy.doctor import run_doctor

    return run_doctor(args, _settings(args))


def main(argv: list[str] | None = None) -> int:
    from context_engine.proxy.launcher.background import LaunchError

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in BENCH_COMMANDS:
        return cmd_bench(argv[0], argv[1:])
    try:
        if argv[:1] == ["run"]:
            return int(_launcher().main(argv[1:]))
        args = build_parser().parse_args(argv)
        result: Any = args.func(args)
    except ConfigError as exc:
        print(f"context-engine: bad configuration: {exc}", file=sys.stderr)
        return 2
    except LaunchError as exc:
        print(f"context-engine: {exc}", file=sys.stderr)
        return 2
    return int(result)


if __name__ == "__main__":
    sys.exit(main())
