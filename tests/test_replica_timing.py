"""The bytes sent upstream do not depend on background timing: two replicas on one Redis,
a session alternating between them, each replica's background work (``retrieve``'s
prefetch) held back by a random delay, send exactly what one replica alone sends with no
background work at all, request by request, on a LoCoMo conversation (long memory) and a
tool-using agent's session (compaction), with the default rules and options.

The contrast shows the harness can tell: with ``retrieve.ranking: stored`` (vectors the
background stored rank the memory), a replica whose background finished before each
request sends other bytes than one whose background never ran.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from context_engine.bench.cases import load_cases, request_points, resolve_file
from context_engine.proxy.demo.mock_upstream import MockUpstream, ServerThread
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.settings import load_settings
from tests.conftest import DATA, needs_data

REDIS = os.environ.get("CONTEXT_ENGINE_TEST_REDIS", "")
pytestmark = [
    pytest.mark.slow,  # two long replays through three in-process proxies
    pytest.mark.skipif(not REDIS, reason="set CONTEXT_ENGINE_TEST_REDIS (CI starts redis-server)"),
    needs_data("locomo_dev.jsonl"),
]
AGENT_SESSION = "long-tools/web-research-00@60"  # 30 requests, compacted from the 11th on


def _sessions() -> dict[str, tuple[list[dict[str, Any]], list[int], Any]]:
    """session → (messages, request points, tools): 35 requests of a LoCoMo conversation
    past its first memory epochs, and a tool-using agent's session past compaction's
    trigger (the bench's committed dev sessions)."""
    locomo = load_cases(DATA / "locomo_dev.jsonl", limit=1)[0]
    agent = next(c for c in load_cases(resolve_file("long_tools")) if c.id == AGENT_SESSION)
    return {"locomo": (locomo.messages, request_points(locomo.messages)[100:135], None),
            "agent": (agent.messages, request_points(agent.messages), agent.tools)}


class Replica:
    """An in-process proxy (``Engine`` behind the real app on loopback) on ``store``."""

    def __init__(self, config: Path, upstream: str, store: str, ledger: Path,
                 options: dict[str, Any] | None = None) -> None:
        settings = load_settings(flags={"store": store, "ledger": str(ledger), "upstream": upstream},
                                 env={}, config_path=str(config))
        if options:
            rule_options = {k: dict(v) for k, v in settings.rule_options.items()}
            rule_options["retrieve"] = {**rule_options.get("retrieve", {}), **options}
            settings = dataclasses.replace(settings, rule_options=rule_options)
        self.engine = Engine(settings)
        self.server = ServerThread(create_app(settings, engine=self.engine))

    def __enter__(self) -> Replica:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.__exit__(*exc)

    @property
    def url(self) -> str:
        return self.server.url

    def background(self, run: Callable[[Callable[..., int]], int]) -> None:
        """Route the background lane's prefetch through ``run`` (delay it, skip it)."""
        prefetch = self.engine.prefetch
        self.engine.prefetch = lambda pause=None: run(lambda: prefetch(pause))  # type: ignore[method-assign]

    def settle(self) -> None:
        """Wait until the background lane is idle, then do whatever it left."""
        for _ in range(600):
            if self.engine.background.pending == 0:
                break
            time.sleep(0.02)
        self.engine.prefetch()


def _replay(mock: MockUpstream, sid: str, session: tuple[Any, list[int], Any],
            url_for: Callable[[int], str], before: Callable[[int], None] = lambda k: None) -> list[bytes]:
    messages, points, tools = session
    start = len(mock.received)
    with httpx.Client(timeout=120) as client:
        for k, i in enumerate(points):
            before(k)
            body: dict[str, Any] = {"model": "gpt-4o", "messages": messages[: i + 1]}
            if tools:
                body["tools"] = tools
            r = client.post(url_for(k) + "/v1/chat/completions", json=body,
                            headers={"authorization": "Bearer sk-timing", "x-session-id": sid})
            assert r.status_code == 200, r.text
    got = [r.body for r in mock.received[start:]]
    assert len(got) == len(points)
    return got


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text("session_key: timing-test-secret\nrules_deadline_ms: 0\n")
    return path


def test_two_replicas_send_the_same_bytes_whatever_the_background_has_done(config, tmp_path):
    import redis

    redis.Redis.from_url(REDIS).flushdb()
    rng = random.Random(7)

    def never(run: Callable[..., int]) -> int:
        return 0

    def late(run: Callable[..., int]) -> int:
        time.sleep(rng.uniform(0.0, 0.4))
        return run()

    sessions = _sessions()
    mock = MockUpstream(simulate_cache=False)
    with mock:
        upstream = mock.url + "/v1"
        with Replica(config, upstream, "memory://", tmp_path / "alone.db") as alone:
            alone.background(never)
            expected = {name: _replay(mock, name, s, lambda k: alone.url) for name, s in sessions.items()}
        with Replica(config, upstream, REDIS, tmp_path / "a.db") as a, \
                Replica(config, upstream, REDIS, tmp_path / "b.db") as b:
            a.background(late)
            b.background(late)
            fleet = {name: _replay(mock, name, s, lambda k: (a, b)[k % 2].url)
                     for name, s in sessions.items()}
    for name in sessions:
        differ = [k for k, (x, y) in enumerate(zip(expected[name], fleet[name])) if x != y]
        assert not differ, f"{name}: requests {differ} differ"
    # the memory and the compaction did act on these sessions (the bodies were rewritten)
    assert any(b"[context-engine:memory]" in body for body in fleet["locomo"])
    assert any(b"orig:" in body for body in fleet["agent"])


def test_with_stored_vectors_the_bytes_depend_on_the_background(config, tmp_path):
    stored = {"ranking": "stored", "embedder": "hashing"}
    locomo = {"locomo": _sessions()["locomo"]}
    mock = MockUpstream(simulate_cache=False)
    with mock:
        upstream = mock.url + "/v1"
        with Replica(config, upstream, "memory://", tmp_path / "never.db", stored) as never:
            never.background(lambda run: 0)
            without = _replay(mock, "s", locomo["locomo"], lambda k: never.url)
        with Replica(config, upstream, "memory://", tmp_path / "settled.db", stored) as settled:
            with_vectors = _replay(mock, "s", locomo["locomo"], lambda k: settled.url,
                                   before=lambda k: settled.settle())
    assert without != with_vectors
