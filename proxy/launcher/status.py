"""``context-engine status``: a live terminal view of the proxy's ``/stats``.

Sessions, requests, input tokens before and after, provider cache hits and the money
saved, overall and per agent, refreshed every few seconds with rich's ``Live``;
``--once`` prints one frame (for scripts and tests). Without ``--url`` it watches the
proxy ``context-engine run`` started (with the admin token from its state file, once the
proxy has proved it is the one ``run`` started), else ``http://127.0.0.1:8787``.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

DEFAULT_URL = "http://127.0.0.1:8787"


def proxy_url(url: str | None, token: str | None) -> tuple[str, str | None]:
    """The proxy to watch and its admin token: ``url`` as given, else the proxy ``run``
    started (only one that proves it is ours: it gets its admin token), else the default."""
    if url:
        return url.rstrip("/"), token
    from context_engine.proxy.launcher.background import running, state_dir

    found = running(state_dir())
    return (found[0].url, token or found[0].admin_token) if found else (DEFAULT_URL, token)


def fetch(url: str, token: str | None) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    r = httpx.get(f"{url}/stats", headers=headers, timeout=10)
    if r.status_code == 401:
        raise ValueError("the proxy needs its admin token: pass --token")
    r.raise_for_status()
    data: dict[str, Any] = r.json()
    return data


def _money(t: dict[str, Any]) -> str:
    if not t["priced"]:
        return "no price"
    return f"${t['cost_original']:.4f} → ${t['cost_actual']:.4f} ({t['saving_pct']:.1f}%)"


def _cache(t: dict[str, Any]) -> str:
    share = t["cached_tokens"] / t["prompt_tokens"] if t["prompt_tokens"] else 0.0
    return f"{t['cached_tokens']:,} ({100 * share:.0f}%)"


def frame(data: dict[str, Any], url: str) -> Group:
    """One screen: the overall line and a table per agent."""
    o = data["overall"]
    head = Text(f"Context Engine at {url} — {data.get('sessions', 0)} sessions, {o['requests']} "
                f"requests, input tokens {o['tokens_original']:,} → {o['tokens_sent']:,} "
                f"(-{o['token_saving_pct']:.1f}%), cache hits {_cache(o)}, cost {_money(o)}; "
                f"failed open {100 * data['failed_open_share']:.2f}%")
    table = Table(title="by agent")
    for col in ("agent", "requests", "input tokens original → sent", "cache hits", "cost original → actual"):
        table.add_column(col, justify="left" if col == "agent" else "right")
    for t in data.get("by_agent", []):
        table.add_row(Text(str(t["key"])), str(t["requests"]),
                      f"{t['tokens_original']:,} → {t['tokens_sent']:,}", _cache(t), _money(t))
    return Group(head, table, Text(time.strftime("updated %H:%M:%S · Ctrl-C to leave"), style="dim"))


def watch(url: str | None, token: str | None, once: bool = False, every: float = 2.0) -> int:
    target, token = proxy_url(url, token)
    console = Console()
    try:
        data = fetch(target, token)
    except (httpx.HTTPError, ValueError) as exc:
        console.print(Text(f"context-engine: cannot read {target}/stats ({exc}); start a proxy with "
                           "`context-engine run AGENT` or `context-engine serve`, or pass --url"))
        return 1
    if once:
        console.print(frame(data, target))
        return 0
    try:
        with Live(frame(data, target), console=console, refresh_per_second=4) as live:
            while True:
                time.sleep(max(0.2, every))
                try:
                    live.update(frame(fetch(target, token), target))
                except (httpx.HTTPError, ValueError) as exc:
                    live.update(Text(f"cannot read {target}/stats ({exc}); retrying"))
    except KeyboardInterrupt:
        return 0
