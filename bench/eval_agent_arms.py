"""The two arms of ``eval agent``: two real proxies started in this process on loopback,
in front of the same upstream, each with its own ledger.

- ``direct``: the pass-through arm, ``rules: ""`` (nothing rewritten, no recall offered).
  It is there only to *measure* the direct arm the way the other arm is measured: the
  same ledger rows, the same bill;
- ``proxy``: the configured rules (``--config``, else ./config.yaml, else the defaults).

Both run with ``mode: rewrite`` (a configured ``shadow`` or ``ab`` would blur the arms),
``rules_deadline_ms: 0`` (the deadline is a timing safety net: with it a loaded machine
would send some originals and the result would depend on the machine), a ``memory://``
store, on 127.0.0.1. In front of each proxy sits a *tap*, an ASGI wrapper that reads
the client's request bodies (never changing them) and keeps, per conversation, the
agent's actions (tool calls with their arguments, a text-action agent's fenced
commands): an action equal to an earlier one of the same conversation is a *re-read*.
The tap keeps action keys only, in memory, for the run.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from context_engine.proxy.billing.row_bill import row_bill
from context_engine.proxy.demo.server_thread import ServerThread
from context_engine.proxy.dialects.registry import BY_NAME
from context_engine.proxy.errors import ProxyError
from context_engine.proxy.recording.ledger import read_rows
from context_engine.proxy.settings import load_settings
from context_engine.rules.compact.inputs import fenced

ARMS = ("direct", "proxy")
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def _dialect(path: str) -> str | None:
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/messages"):
        return "anthropic"
    return "gemini" if ":generateContent" in path or ":streamGenerateContent" in path else None


def actions(messages: list[Any]) -> tuple[str, list[str]]:
    """(conversation key, the agent's actions in order) of a neutral conversation."""
    first = next((m for m in messages if isinstance(m, dict) and m.get("role") == "user"), {})
    key = hashlib.sha256(json.dumps(first.get("content"), sort_keys=True, default=str).encode()).hexdigest()[:16]
    out: list[str] = []
    for m in messages:
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            if fn.get("name") != "context_recall":
                out.append(f"call:{fn.get('name')}:{fn.get('arguments')}")
        content = m.get("content")
        if isinstance(content, str):
            out += ["cmd:" + block.strip() for block in fenced(content)]
    return key, out


def repeats(acts: list[str]) -> int:
    return len(acts) - len(set(acts))


@dataclass
class Tap:
    """ASGI wrapper: ``rereads`` maps a conversation key to the most re-reads one of its
    requests showed (its requests grow, so the last one has them all)."""

    app: Any
    rereads: dict[str, int] = field(default_factory=dict)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or not _dialect(scope["path"]):
            await self.app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = bool(message.get("more_body")) and message["type"] == "http.request"
        body, replayed = b"".join(chunks), False
        self.observe(scope["path"], body)

        async def replay() -> MutableMapping[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def observe(self, path: str, body: bytes) -> None:
        name = _dialect(path)
        try:
            messages = BY_NAME[name or "chat"].parse(body, path).chat.get("messages") or []
        except (ProxyError, ValueError, KeyError, TypeError):
            return  # a body the proxy refuses is not an agent's turn
        key, acts = actions(messages)
        self.rereads[key] = max(self.rereads.get(key, 0), repeats(acts))

    def take(self) -> int:
        """Re-reads since the last ``take`` (a task's, when tasks run one at a time)."""
        total = sum(self.rereads.values())
        self.rereads.clear()
        return total


@dataclass(frozen=True)
class Usage:
    """One task's requests in one arm, from its ledger rows."""

    turns: int
    cost: float | None  # dollars (None: the model has no list price)
    cost_original: float | None  # the rows' own estimate of the originals sent directly
    prompt_tokens: int
    recall_rounds: int
    rule_savings: dict[str, int]
    errors: int


def usage_of(rows: list[dict[str, Any]]) -> Usage:
    cost: float | None = 0.0
    original: float | None = 0.0
    savings: dict[str, int] = {}
    for row in rows:
        bill = row_bill(row)  # its usage sums every round, recall follow-ups included
        cost = None if bill is None or cost is None else cost + bill.actual
        original = None if bill is None or original is None else original + bill.original
        raw = row.get("rule_savings") or "{}"
        for rule, saved in (json.loads(raw) if isinstance(raw, str) else raw).items():
            savings[rule] = savings.get(rule, 0) + int(saved)
    return Usage(len(rows), cost, original, sum(int(r.get("prompt_tokens") or 0) for r in rows),
                 sum(int(r.get("recall_rounds") or 0) for r in rows), savings,
                 sum(1 for r in rows if int(r.get("status") or 0) >= 400))


class ArmProxy:
    """One arm's proxy: start with ``with``; ``url`` is the client's base (no ``/v1``)."""

    def __init__(self, name: str, upstream: str, folder: Path, config: str | None) -> None:
        from context_engine.proxy.edge.app import create_app

        self.name, self.ledger = name, str(folder / f"ledger-{name}.db")
        flags: dict[str, Any] = {"upstream": upstream, "ledger": self.ledger, "store": "memory://",
                                 "rules_deadline_ms": 0, "config": config, "mode": "rewrite",
                                 "host": "127.0.0.1"}
        if name == "direct":
            flags["rules"] = ""
        self.settings = load_settings(flags=flags, env={}, config_path=config)
        self.app = create_app(self.settings)
        self.tap = Tap(self.app)
        self.server = ServerThread(self.tap)
        self._seen = 0

    def __enter__(self) -> ArmProxy:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.__exit__(*exc)

    @property
    def url(self) -> str:
        return str(self.server.url)

    def rows(self) -> list[dict[str, Any]]:
        """Ledger rows written since the last call, once every request so far is recorded."""
        deadline = time.time() + 30
        while self.app.state.finisher.unfinished and time.time() < deadline:
            time.sleep(0.005)
        self.app.state.ledger.flush()
        rows = [r for r in read_rows(self.ledger) if int(r["id"]) > self._seen]
        self._seen = max([self._seen] + [int(r["id"]) for r in rows])
        return rows


def default_config() -> str | None:
    """./config.yaml when there is one (what ``context-engine serve`` would read)."""
    return "config.yaml" if os.path.isfile("config.yaml") else None
