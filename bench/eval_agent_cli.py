"""``context-engine eval agent [OPTIONS] [-- CMD …]``: does the rewrite cost the agent its
task? A paired A/B of task success, turns, re-reads and cost, direct against proxied.

Without ``--tasks`` it runs the built-in task set (``eval_agent_tasks``) with the
built-in agent (``eval_agent_builtin``): offline against the built-in model
(``eval_agent_policy``), or against a real model with ``--upstream URL --model NAME``.
With ``--tasks FILE.jsonl --upstream URL -- CMD …`` it runs CMD once per task per arm
(``eval_agent_command``). Both arms go through a proxy started here (``eval_agent_arms``:
``direct`` with no rules, ``proxy`` with the configured ones) so both are measured from
the same ledger. docs/eval-agent.md has the protocol. Exit status 2 on bad options, 1
with ``--fail-unless-equivalent`` when equivalence is not shown, else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from context_engine.bench.cli import without_outputs
from context_engine.bench.eval_agent_arms import ARMS, ArmProxy, default_config
from context_engine.bench.eval_agent_builtin import Limits, run_agent
from context_engine.bench.eval_agent_command import CommandRunner, load_tasks
from context_engine.bench.eval_agent_policy import build_policy_app
from context_engine.bench.eval_agent_report import render, summarize, write_json
from context_engine.bench.eval_agent_runner import Outcome, run_tasks
from context_engine.bench.eval_agent_tasks import BuiltinTask, builtin_tasks
from context_engine.proxy.demo.server_thread import ServerThread
from context_engine.proxy.settings import ConfigError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="context-engine eval agent", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default=None, metavar="FILE.jsonl",
                   help="one task per line (instance_id/id/task_id and fields); needs --upstream and -- CMD")
    p.add_argument("--upstream", default=None, help="the real API both arms forward to (default: the built-in model)")
    p.add_argument("--model", default="gpt-4o", help="model the built-in agent asks for; {model} in CMD")
    p.add_argument("--api-key", default=None,
                   help="the built-in agent's key for a real --upstream (default: $OPENAI_API_KEY); "
                        "CMD brings its own")
    p.add_argument("--config", default=None,
                   help="config.yaml of the proxy arm (default: ./config.yaml, else the defaults)")
    p.add_argument("--builtin", type=int, default=6, metavar="N", help="built-in tasks to run (default 6)")
    p.add_argument("--limit", type=int, default=None, help="run only the first N tasks")
    p.add_argument("--margin", type=float, default=0.05,
                   help="equivalence margin of the solve-rate difference (TOST), e.g. 0.05")
    p.add_argument("--alpha", type=float, default=0.05, help="TOST level (default 0.05: a 90%% interval)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the arm order, the requests' seed and the bootstrap")
    p.add_argument("--max-turns", type=int, default=30, help="built-in agent: requests per task")
    p.add_argument("--max-cost", type=float, default=0.0, help="built-in agent: dollars per task (0: none)")
    p.add_argument("--request-timeout", type=float, default=120.0, help="built-in agent: seconds per request")
    p.add_argument("--timeout", type=float, default=3600.0,
                   help="CMD: seconds per task and arm, then its process group is killed (0: none)")
    p.add_argument("--check", default=None, metavar="CMD",
                   help="CMD: success check run in the task folder (exit 0 = solved); default: CMD's exit code")
    p.add_argument("--out", default=None, help="folder for ledgers and task folders (default: a new temp folder)")
    p.add_argument("--json", dest="json_out", default=None, metavar="OUT", help="write the full report as JSON")
    p.add_argument("--fail-unless-equivalent", action="store_true",
                   help="exit 1 when TOST does not show the arms equivalent")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """(options, CMD): CMD is everything after the first ``--``."""
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1:]
    return argv, []


def check_options(args: argparse.Namespace, command: list[str]) -> str | None:
    """What is wrong with the options, or None."""
    if args.tasks and not (args.upstream and command):
        return "--tasks needs --upstream URL and a command after --"
    if command and not args.tasks:
        return "a command after -- needs --tasks FILE.jsonl"
    if not 0 < args.margin < 1:
        return "--margin is a solve-rate difference between 0 and 1, e.g. 0.05"
    if not 0 < args.alpha < 0.5:
        return "--alpha must be between 0 and 0.5"
    if any(n is not None and n < 1 for n in (args.limit, args.builtin, args.max_turns)):
        return "--limit, --builtin and --max-turns must be at least 1"
    return None


def _builtin_runner(args: argparse.Namespace, out: Path) -> Any:
    limits = Limits(args.max_turns, args.max_cost, args.request_timeout)
    key = args.api_key or (os.environ.get("OPENAI_API_KEY") if args.upstream else None) or "sk-eval-agent-builtin"

    def run_one(task: BuiltinTask, arm: str, proxy: ArmProxy) -> Outcome:
        r = run_agent(task, out / "tasks" / arm / task.id, proxy.url + "/v1", args.model, limits,
                      args.seed, key)
        return Outcome(r.solved, r.stop, r.error)
    return run_one


def run(args: argparse.Namespace, command: list[str], options: list[str]) -> int:
    """``options``: the command line before ``--`` (the report names it, without the key
    and local paths)."""
    problem = check_options(args, command)
    if problem:
        print(f"eval agent: {problem}", file=sys.stderr)
        return 2
    try:
        tasks: list[Any] = load_tasks(args.tasks) if args.tasks else builtin_tasks(args.builtin)
    except (OSError, ValueError) as exc:
        print(f"eval agent: {exc}", file=sys.stderr)
        return 2
    tasks = tasks[:args.limit] if args.limit else tasks
    if not tasks:
        print("eval agent: no task to run", file=sys.stderr)
        return 2
    out = Path(args.out or tempfile.mkdtemp(prefix="context-engine-eval-agent-"))
    if out.exists() and any(out.iterdir()):  # an earlier run's files would count as this one's
        print(f"eval agent: {out} is not empty: give a new --out folder", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    config = args.config or default_config()
    start = time.perf_counter()
    try:
        with contextlib.ExitStack() as stack:
            upstreams = {arm: args.upstream or stack.enter_context(  # one model per arm: own cache
                ServerThread(build_policy_app(tasks))).url + "/v1" for arm in ARMS}
            proxies = {arm: stack.enter_context(ArmProxy(arm, upstreams[arm], out, config)) for arm in ARMS}
            run_one = (CommandRunner(tuple(command), tuple(shlex.split(args.check or "")), out, args.model,
                                     args.timeout) if args.tasks else _builtin_runner(args, out))
            results = run_tasks(tasks, lambda t: str(t.id), run_one, proxies, args.seed, args.quiet)
    except ConfigError as exc:
        print(f"eval agent: bad configuration: {exc}", file=sys.stderr)
        return 2
    shown = without_outputs(options, ("--json", "--out", "--api-key")) + (["--", *command] if command else [])
    report = {"command": "context-engine eval agent " + shlex.join(shown), "date": time.strftime("%Y-%m-%d"),
              "config": config or "defaults", "upstream": args.upstream or "built-in model",
              "seconds": round(time.perf_counter() - start, 1),
              **summarize(results, args.margin, args.alpha, args.seed)}
    print(render(report))
    if args.json_out:
        write_json(report, args.json_out)
    if not args.quiet:
        print(f"eval agent: ledgers and task folders in {out}", file=sys.stderr)
    return 1 if args.fail_unless_equivalent and not report["paired"]["tost"]["equivalent"] else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    options, command = split_command(argv)
    args = build_parser().parse_args(options)
    return run(args, command, options)
