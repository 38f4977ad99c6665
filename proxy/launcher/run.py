"""``context-engine run [--upstream URL] AGENT [args]`` and ``run -- COMMAND [args]``.

Attach to the user's background proxy (or start it), run the agent pointed at it with its
requests tagged by agent and project folder, pass Ctrl-C on to the agent, and print what
the run cost against direct (the ledger's honest estimate) when it ends. Nothing in the
user's config files changes: see ``agents.py`` for each agent's overrides.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from context_engine.proxy.edge.tags import tag_prefix
from context_engine.proxy.launcher import background
from context_engine.proxy.launcher.agents import (
    AGENTS,
    OPENAI,
    Launch,
    generic_env,
    launch,
    own_upstream,
)
from context_engine.proxy.sanitize import redact_url

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def say(text: str) -> None:
    print(f"context-engine: {text}", file=sys.stderr, flush=True)


def pick(command: list[str]) -> tuple[str, str, list[str], bool]:
    """(agent tag, default upstream, the command, generic?) for ``run``'s arguments."""
    if command and command[0] == "--":
        command = command[1:]
        if not command:
            raise background.LaunchError("nothing to run after --")
        return Path(command[0]).name or "command", OPENAI, command, True
    if not command:
        raise background.LaunchError("name an agent (" + ", ".join(AGENTS) + ") or -- COMMAND")
    name = command[0]
    if name not in AGENTS:
        raise background.LaunchError(
            f"unknown agent {name!r}: known are {', '.join(AGENTS)}; run anything else with "
            f"context-engine run -- {' '.join(command)}")
    return name, own_upstream(name, command[1:], dict(os.environ)), command, False


def run(command: list[str], upstream: str | None = None, config: str | None = None,
        project: str | None = None) -> int:
    project = os.path.abspath(project or os.getcwd())
    tag, default_upstream, command, generic = pick(command)
    if shutil.which(command[0]) is None:
        hint = f" (install: {AGENTS[tag].install})" if tag in AGENTS and not generic else ""
        raise background.LaunchError(f"{command[0]} is not installed or not on PATH{hint}")
    proxy, started = background.ensure(upstream or default_upstream, background.state_dir(), config)
    say(f"{'started' if started else 'using'} the proxy at {proxy.url} (pid {proxy.pid}) → "
        f"{redact_url(proxy.upstream)}; {tag} in {project}")
    if config and not started:
        say("--config applies when the proxy starts: `context-engine stop` first to use it")
    base = proxy.url + tag_prefix(tag, project)
    todo = Launch(command, generic_env(base)) if generic else launch(tag, command[1:], base)
    since = time.time()
    with tempfile.TemporaryDirectory(prefix="context-engine-run-") as scratch:  # private: 0700
        code = _run_child(todo.argv, {**os.environ, **todo.env, **write_files(todo.files, scratch)})
    print_summary(proxy, tag, project, since)
    return code


def write_files(files: dict[str, str], folder: str) -> dict[str, str]:
    """Write each of an agent's one-run config files into ``folder`` (readable by the user
    only: they may hold keys); the variables that name them."""
    env = {}
    for i, (variable, text) in enumerate(sorted(files.items())):
        path = os.path.join(folder, f"{i}-{variable.lower()}.json")
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as f:
            f.write(text)
        env[variable] = path
    return env


def _run_child(argv: list[str], env: dict[str, str]) -> int:
    """Run the agent in the foreground; SIGINT, SIGTERM and SIGHUP go on to it (a terminal's
    Ctrl-C reaches it directly too), and this process waits for it to end."""
    child = subprocess.Popen(argv, env=env)

    def forward(signum: int, frame: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        while True:
            try:
                code = child.wait()
                break
            except InterruptedError:  # pragma: no cover (PEP 475 retries wait itself)
                continue
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 128 - code if code < 0 else code  # killed by a signal: the shell's 128 + n


def run_stats(proxy: background.Proxy, tag: str, project: str, since: float) -> dict[str, Any]:
    start = datetime.fromtimestamp(since, UTC).isoformat()
    r = httpx.get(f"{proxy.url}/stats", params={"since": start, "agent": tag, "project": project},
                  headers={"authorization": f"Bearer {proxy.admin_token}"}, timeout=15)
    r.raise_for_status()
    data: dict[str, Any] = r.json()
    return data


def summary_lines(o: dict[str, Any]) -> list[str]:
    """The run's bill in two lines: tokens, then money against direct."""
    if not o["requests"]:
        return ["no requests went through the proxy in this run"]
    lines = [f"this run: {o['requests']} requests, input tokens {o['tokens_original']:,} direct → "
             f"{o['tokens_sent']:,} sent ({o['token_saving_pct']:.1f}% fewer), "
             f"{o['cached_tokens']:,} read from the provider's cache"]
    if o["priced"]:
        lines.append(f"cost: ${o['cost_original']:.4f} direct ({o['cost_original_basis']}: what the "
                     f"original requests would have cost, cache hits included) → "
                     f"${o['cost_actual']:.4f} billed, " + (f"{o['saving_pct']:.1f}% saved"
                     if o["saving_pct"] >= 0 else f"{-o['saving_pct']:.1f}% more than direct"))
    else:
        lines.append("cost: no price known for this model (tokens above)")
    return lines


def print_summary(proxy: background.Proxy, tag: str, project: str, since: float) -> None:
    try:
        data = run_stats(proxy, tag, project, since)
    except (httpx.HTTPError, ValueError) as exc:
        say(f"could not read this run's bill from the proxy ({exc}); see `context-engine report`")
        return
    for line in summary_lines(data["overall"]):
        say(line)
    say(f"more: context-engine status · context-engine report --by project --ledger {proxy.ledger}"
        f" · {proxy.url}/dashboard (password: admin_token in "
        f"{background.state_file(background.state_dir(), proxy.upstream)}) · context-engine stop"
        " ends the proxy")


USAGE = """usage: context-engine run [--upstream URL] [--config PATH] AGENT [agent args]
       context-engine run [--upstream URL] [--config PATH] -- COMMAND [args]

Run an agent through the user's background proxy (started on first use; `context-engine
stop` ends it). AGENT is one of: {agents}. --upstream defaults to the agent's own provider
(OpenAI for a COMMAND). --config: the config.yaml a newly started proxy reads."""


def main(argv: list[str]) -> int:
    """``run``'s own parsing: its options come before the agent; the rest is the agent's."""
    options: dict[str, str] = {}
    rest = list(argv)
    while rest and (rest[0] in ("-h", "--help") or rest[0].split("=")[0] in ("--upstream", "--config")):
        flag = rest.pop(0)
        if flag in ("-h", "--help"):
            print(USAGE.format(agents=", ".join(AGENTS)))
            return 0
        name, _, value = flag.partition("=")
        if not value:
            if not rest:
                raise background.LaunchError(f"{name} needs a value")
            value = rest.pop(0)
        options[name[2:]] = value
    if options.get("upstream") and not options["upstream"].startswith(("http://", "https://")):
        raise background.LaunchError(f"--upstream {options['upstream']!r}: an http:// or https:// URL")
    return run(rest, options.get("upstream"), options.get("config"))


def stop_main() -> int:
    stopped = background.stop(background.state_dir())
    if not stopped:
        say("no proxy is running")
    for proxy in stopped:
        say(f"stopped the proxy at {proxy.url} (pid {proxy.pid}) → {redact_url(proxy.upstream)}")
    return 0
