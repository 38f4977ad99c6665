"""When does a real agent auto-compact, direct and through the proxy?

Runs Claude Code and/or Codex CLI offline against the loopback mock upstream: a scripted
tool loop (each step a shell command printing a few thousand numbers), the mock's usage
counted from the request it received (o200k_base, as the proxy counts), and the agent's
own compaction request answered with a summary (``mock_apis.COMPACTION_PROMPTS``). The
same session runs twice: direct to the mock, then through an in-process proxy with the
default config, the agent pointed at it as ``context-engine run`` points it
(``proxy/launcher/agents.py``, its knobs included). Both runs get the same lowered
compaction threshold (the user's own settings), so they stay small:

    python3 -m context_engine.bench.agent_compaction [--agent claude|codex] [--steps 8] [--json]

Each run lists its requests: whether it was the agent's compaction request, the tokens
the client sent (direct: what the mock received; proxied: the ledger's original) and the
tokens that reached the upstream (the usage the agent was told).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from context_engine.proxy.demo.mock_apis import COMPACTION_PROMPTS
from context_engine.proxy.demo.mock_upstream import MockUpstream, ServerThread
from context_engine.proxy.dialects.anthropic.request import parse as parse_anthropic
from context_engine.proxy.dialects.responses.request import parse as parse_responses
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.edge.tags import tag_prefix
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.proxy.launcher.agents import launch
from context_engine.proxy.recording.ledger import read_rows
from context_engine.proxy.settings import load_settings
from context_engine.proxy.store.stores import MemoryStore

TASK = "Count, then list the files."
QUIET = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
         "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1", "CLAUDE_CODE_MAX_RETRIES": "0",
         "NO_COLOR": "1"}
# The user's own lowered thresholds, the same in both runs: Claude Code compacts at
# 45% of a 100k window less its output reserve (36,000 tokens); Codex at 20,000 tokens.
CLAUDE_USER = {"CLAUDE_CODE_AUTO_COMPACT_WINDOW": "100000", "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "45"}
CODEX_USER = ["-c", "model_auto_compact_token_limit=20000"]
CODEX_CONFIG = """model = "gpt-5-codex"
check_for_update_on_startup = false

[features]
plugins = false

[analytics]
enabled = false
"""
PATHS = {"claude": "/v1/messages", "codex": "/v1/responses"}


def script(steps: int) -> list[dict[str, Any]]:
    """``steps`` shell calls, each printing 3,001 different numbers (~12k tokens), then text."""
    return [{"shell": f"seq {i}00000 {i}03000"} for i in range(1, steps + 1)] + [{"text": "All done."}]


def agent_args(agent: str, lowered: bool, window: int = 0) -> list[str]:
    """The session's arguments. Codex is told the mock's ``window`` (as its model catalog
    tells it a real model's); Claude Code learns it from the provider's "too long" error."""
    if agent == "claude":
        return ["-p", TASK, "--allowedTools", "Bash"]
    told = ["-c", f"model_context_window={window}"] if window else []
    return ["exec", "--skip-git-repo-check", "--ephemeral", "--dangerously-bypass-approvals-and-sandbox",
            *(CODEX_USER if lowered else []), *told, TASK]


def direct_command(agent: str, base: str, lowered: bool, window: int) -> tuple[list[str], dict[str, str]]:
    """The agent pointed straight at ``base`` (the mock): no proxy, none of its knobs."""
    if agent == "claude":  # tool search on, as it is against Anthropic's own URL (run sets it too)
        return ["claude", *agent_args(agent, lowered, window)], {"ANTHROPIC_BASE_URL": base,
                                                         "ENABLE_TOOL_SEARCH": "true"}
    plain = launch("codex", agent_args(agent, lowered, window), base, {})  # its -c flags name a provider
    return plain.argv, plain.env


def _home(root: Path, agent: str, lowered: bool) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TERM", "TMPDIR")}
    home = root / "home"
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "config.toml").write_text(CODEX_CONFIG)
    env = {**keep, **QUIET, "HOME": str(home), "CODEX_HOME": str(home / ".codex")}
    if agent == "claude":
        env |= {**(CLAUDE_USER if lowered else {}), "ANTHROPIC_API_KEY": "sk-ant-bench"}
    return env | {"OPENAI_API_KEY": "sk-bench"}


def _tokens(agent: str, raw: bytes) -> int:
    body = json.loads(raw)
    parse = parse_anthropic if agent == "claude" else parse_responses
    return TokenCounter().request(parse(raw).chat["messages"], body.get("tools"))


def _is_compaction(raw: bytes) -> bool:
    return any(p.encode() in raw for p in COMPACTION_PROMPTS)


def run_once(agent: str, steps: int, proxied: bool, root: Path, lowered: bool = True,
             window: int = 0, config: str | None = None, usage_scale: float = 1.0) -> dict[str, Any]:
    """One session, direct or through the proxy: its requests, and whether it finished.
    ``lowered``: the user's lowered thresholds; ``window``: the mock's "too long" limit;
    ``config``: the proxy's config file (default: none, the defaults); ``usage_scale``:
    the share of the counted usage the mock reports (what drives the agent's decision?)."""
    root.mkdir(parents=True)
    (root / "work").mkdir()
    env = _home(root, agent, lowered)
    mock = MockUpstream(script=script(steps), max_input_tokens=window)
    mock.state.usage_scale = usage_scale
    with mock:
        if proxied:
            ledger = str(root / "ledger.db")
            flags: dict[str, Any] = {"store": "memory://", "ledger": ledger, "upstream": mock.url + "/v1"}
            if window:  # the proxy knows the window, as it knows a real model's from litellm's map
                options = (yaml.safe_load(Path(config).read_text()) or {}).get("rule_options") or {} \
                    if config else {}  # flags replace the file's rule_options: keep its others
                budget = {**options.get("budget", {}), "max_input_tokens": window}
                flags["rule_options"] = {**options, "budget": budget}
            settings = load_settings(flags=flags, env={}, config_path=config or os.devnull)
            app = create_app(settings, engine=Engine(settings, store=MemoryStore()))
            with ServerThread(app) as proxy:
                base = proxy.url + tag_prefix(agent, str(root / "work"))  # as run tags it
                how = launch(agent, agent_args(agent, lowered, window), base, env)
                done, seconds = _drive(how.argv, env | how.env, root)
                deadline = time.time() + 20
                while app.state.finisher.unfinished and time.time() < deadline:
                    time.sleep(0.01)
                app.state.ledger.flush()
            rows = [r for r in read_rows(ledger) if r["path"] == PATHS[agent]]
            client = [int(r["tokens_original"]) for r in rows]
            knobs = {k: v for k, v in how.env.items() if k not in ("ANTHROPIC_BASE_URL",)}
        else:
            argv, extra = direct_command(agent, mock.url, lowered, window)
            done, seconds = _drive(argv, env | extra, root)
            client, knobs = [], {}
        sent = [r for r in mock.received if r.path == PATHS[agent]]
    requests = []
    for i, r in enumerate(sent):
        upstream = _tokens(agent, r.body)
        requests.append({"index": i, "compaction": _is_compaction(r.body), "sent_bytes": len(r.body),
                         "rejected": 0 < window < upstream,
                         "breakpoints": r.body.count(b'"cache_control"'),
                         "cleared": b"[context-engine:cleared]" in r.body,
                         "usage_input_tokens": upstream,
                         "client_tokens": client[i] if i < len(client) else upstream})
    return {"agent": agent, "proxied": proxied, "exit": done.returncode, "seconds": round(seconds, 1),
            "finished": "All done." in done.stdout, "launcher_knobs": knobs,
            "compaction_at": [q["index"] for q in requests if q["compaction"]],
            "max_client_tokens": max((q["client_tokens"] for q in requests), default=0),
            "max_usage_input_tokens": max((q["usage_input_tokens"] for q in requests), default=0),
            "requests": requests, "tail": (done.stdout + done.stderr)[-400:]}


def _drive(argv: list[str], env: dict[str, str], root: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=root / "work", capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    return done, time.perf_counter() - start


def compare(agent: str, steps: int, lowered: bool = True, window: int = 0,
            config: str | None = None, usage_scale: float = 1.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ce-compaction-") as tmp:
        direct = run_once(agent, steps, False, Path(tmp) / "direct", lowered, window, None, usage_scale)
        proxied = run_once(agent, steps, True, Path(tmp) / "proxied", lowered, window, config, usage_scale)
    return {"agent": agent, "steps": steps, "lowered_threshold": lowered, "window": window,
            "usage_scale": usage_scale,
            "config": config or "defaults", "direct": direct, "proxied": proxied,
            "totals": _totals(direct, proxied)}


def _totals(direct: dict[str, Any], proxied: dict[str, Any]) -> dict[str, int]:
    """Tokens over the whole session: what direct sent, what the proxy's ledger counts as
    the originals ("vs direct" prices these), what the proxy sent."""
    return {"direct_sent": sum(q["client_tokens"] for q in direct["requests"]),
            "proxied_originals": sum(q["client_tokens"] for q in proxied["requests"]),
            "proxied_sent": sum(q["usage_input_tokens"] for q in proxied["requests"])}


def _print(result: dict[str, Any]) -> None:
    t = result["totals"]
    print(f"{result['agent']}: {result['steps']} tool steps; proxy config: {result['config']}; session "
          f"totals: direct sent {t['direct_sent']:,}, proxied originals {t['proxied_originals']:,}, "
          f"proxied sent {t['proxied_sent']:,} tokens")
    for arm in ("direct", "proxied"):
        run = result[arm]
        print(f"  {arm:8} exit {run['exit']}, {run['seconds']} s, compaction requests at "
              f"{run['compaction_at'] or 'none'}; largest request: client {run['max_client_tokens']:,} "
              f"tokens, upstream usage {run['max_usage_input_tokens']:,}")
        for q in run["requests"]:
            mark = "  <- compaction" if q["compaction"] else "  <- rejected: too long" if q["rejected"] else ""
            print(f"    #{q['index']:<2} client {q['client_tokens']:>7,}  upstream {q['usage_input_tokens']:>7,}"
                  f"  ({q['sent_bytes']:,} bytes){mark}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agent", choices=["claude", "codex"], action="append",
                   help="the agent to run (repeat for both; default: each one installed)")
    p.add_argument("--steps", type=int, default=8, help="shell steps the mock scripts")
    p.add_argument("--default-threshold", action="store_true",
                   help="leave the agents' own thresholds at their defaults (no lowered knobs)")
    p.add_argument("--window", type=int, default=0,
                   help="the mock answers a prompt over this many tokens with the provider's 'too long' 400")
    p.add_argument("--config", help="the proxy's config file (default: none, the defaults)")
    p.add_argument("--usage-scale", type=float, default=1.0,
                   help="the mock reports this share of the usage it counted (0.1: as if a proxy cut 90%%)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    agents = args.agent or [a for a in ("claude", "codex") if shutil.which(a)]
    if not agents:
        print("neither claude nor codex is installed", file=sys.stderr)
        return 2
    results = [compare(a, args.steps, not args.default_threshold, args.window, args.config, args.usage_scale)
               for a in agents]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for result in results:
            _print(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
