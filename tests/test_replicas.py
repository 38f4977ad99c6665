"""Two ``serve`` replicas behind nginx, sharing one Redis store and one PostgreSQL ledger,
replaying real conversations from ``../shared/data``, agree with one replica alone:
byte-identical forwarded bodies (sessions pinned by nginx, a session alternating between
replicas, a replica restarted mid-session), one ledger row per request, report totals
equal to the sum over replicas, each text embedded once fleet-wide."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from typing import Any

import httpx
import pytest

from context_engine.bench.cases import load_cases, request_points
from context_engine.bench.fleet import Nginx, Replica, nginx_bin
from context_engine.proxy.recording.ledger import read_rows
from tests.conftest import DATA, REPO, _service, needs_data

REDIS = os.environ.get("CONTEXT_ENGINE_TEST_REDIS", "")
pytestmark = [
    pytest.mark.slow,  # real replica processes behind nginx
    pytest.mark.skipif(not REDIS, reason="set CONTEXT_ENGINE_TEST_REDIS (CI starts redis-server)"),
    needs_data("locomo_dev.jsonl", "agent_traces_dev.jsonl"),
]

CONFIG = """
session_key: replica-test-secret
rules_deadline_ms: 0
cache: {prompt_cache_key: session}
rules: {fold_duplicates: true, tool_json: true, summarize: true, retrieve: true, zones: true, budget: true}
rule_options:
  retrieve: {embedder: hashing, max_embed: 0, ranking: stored}
"""


def _need_nginx() -> None:
    if nginx_bin() is None:
        raise FileNotFoundError("nginx is not installed (apt-get install nginx)")


def _sessions() -> dict[str, tuple[list[dict[str, Any]], list[int], Any]]:
    """session → (messages, request points, tools): two agent traces, a LoCoMo stretch."""
    traces = load_cases(DATA / "agent_traces_dev.jsonl", limit=4)
    locomo = load_cases(DATA / "locomo_dev.jsonl", limit=1)[0]
    return {"trace-a": (traces[0].messages, request_points(traces[0].messages), traces[0].tools),
            "trace-b": (traces[3].messages, request_points(traces[3].messages), traces[3].tools),
            "locomo": (locomo.messages, request_points(locomo.messages)[100:110], None)}


def _send(url: str, sid: str, messages: list[Any], tools: Any) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=url + "/v1", api_key="sk-replica-test", max_retries=0, timeout=120)
    extra = {"tools": tools} if tools else {}
    # the session id goes to the proxy in X-Session-Id, which it never forwards; the
    # body's ``user`` field (forwarded as sent) tells the mock whose request it got
    reply = client.chat.completions.create(model="gpt-4o", messages=messages, user=sid,
                                           extra_headers={"X-Session-Id": sid}, **extra)
    assert reply.choices


def _replay(sid: str, session: tuple[Any, list[int], Any], url_for: Any) -> None:
    messages, points, tools = session
    for k, i in enumerate(points):
        _send(url_for(k), sid, messages[: i + 1], tools)


def _bodies(mock: Any, start: int) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = defaultdict(list)
    for r in mock.received[start:]:
        out[str(json.loads(r.body).get("user", ""))].append(r.body)
    return out


def _settled(replica: Replica) -> dict[str, Any]:
    """/healthz once the replica's background work (prefetch embeddings) is done."""
    last = None
    for _ in range(200):
        health = httpx.get(replica.url + "/healthz").json()
        key = (health["texts_embedded"], health["rules_lanes"]["background_pending"])
        if key == last and key[1] == 0:
            return health
        last = key
        time.sleep(0.1)
    raise AssertionError(f"{replica.name} did not settle")


def _pinned(nginx: Nginx, names: dict[str, Replica]) -> dict[str, str]:
    """A session id that nginx sends to each replica (probed through it)."""
    chosen: dict[str, str] = {}
    for n in range(200):
        sid = f"conv-{n}"
        served = httpx.get(nginx.url + "/healthz", headers={"X-Session-Id": sid}).json()["replica"]
        assert httpx.get(nginx.url + "/healthz", headers={"X-Session-Id": sid}).json()["replica"] == served
        chosen.setdefault(served, sid)
        if len(chosen) == len(names):
            return chosen
    raise AssertionError("nginx sent every session to one replica")


def test_two_replicas_behind_nginx_agree_with_one_replica(mock, postgres, pg_ledger, tmp_path):
    import redis

    _service("nginx", _need_nginx)  # skip here (fail in CI) without nginx
    redis.Redis.from_url(REDIS).flushdb()
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    upstream = mock.url + "/v1"
    sessions = _sessions()

    a = Replica("A", str(config), upstream=upstream, store=REDIS, ledger=pg_ledger).launch()
    b = Replica("B", str(config), upstream=upstream, store=REDIS, ledger=pg_ledger).launch()
    single = Replica("single", str(config), upstream=upstream, store=str(tmp_path / "store"),
                     ledger=str(tmp_path / "single.db")).launch()  # its own disk store and SQLite ledger
    embedded_before_restart = 0
    try:
        a.wait(), b.wait(), single.wait()
        with Nginx([a.port, b.port]) as nginx:
            pinned = _pinned(nginx, {"A": a, "B": b})
            sids = dict(zip(sessions, (pinned["A"], pinned["B"], "alternating")))

            # one replica alone, the same sessions
            start = len(mock.received)
            for name, session in sessions.items():
                _replay(sids[name], session, lambda k: single.url)
            alone = _settled(single)["texts_embedded"]
            single.stop()  # its ledger flushed
            expected = _bodies(mock, start)
            assert len(read_rows(str(tmp_path / "single.db"))) == sum(len(s[1]) for s in sessions.values())

            # the fleet: sessions pinned by nginx, in parallel; B restarts mid-session
            start = len(mock.received)

            def restart_b_midway(k: int) -> str:
                nonlocal embedded_before_restart
                if k == 10:  # between two requests of B's session
                    embedded_before_restart = _settled(b)["texts_embedded"]
                    b.stop()
                    b.start()
                return nginx.url

            runs = [threading.Thread(target=_replay, args=(sids["trace-a"], sessions["trace-a"], lambda k: nginx.url)),
                    threading.Thread(target=_replay, args=(sids["trace-b"], sessions["trace-b"], restart_b_midway))]
            for t in runs:
                t.start()
            for t in runs:
                t.join()
            _replay("alternating", sessions["locomo"], lambda k: (a, b)[k % 2].url)  # A, B, A, …
            fleet = _bodies(mock, start)
            stats = httpx.get(nginx.url + "/stats", timeout=30).json()
        embedded = _settled(a)["texts_embedded"] + _settled(b)["texts_embedded"] + embedded_before_restart
    finally:
        for replica in (a, b, single):
            replica.stop()

    # byte-identical forwarded bodies, session by session
    for name, session in sessions.items():
        assert len(fleet[sids[name]]) == len(expected[sids[name]]) == len(session[1])
        assert fleet[sids[name]] == expected[sids[name]], name
    # one ledger row per request, each on the replica that served it
    rows = read_rows(pg_ledger)
    by_session: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        by_session[row["session"].split("~")[0]].append(row["replica"])
    assert len(rows) == sum(len(s[1]) for s in sessions.values())
    assert set(by_session[pinned["A"]]) == {"A"} and set(by_session[pinned["B"]]) == {"B"}
    assert by_session["alternating"] == ["A", "B"] * 5
    # report and /stats: the fleet's totals, equal to the sum over replicas
    report = subprocess.run([sys.executable, "-m", "context_engine.proxy.cli", "report", "--config", os.devnull, "--ledger",
                             pg_ledger, "--by", "replica", "--format", "json"], capture_output=True,
                            text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    data = json.loads(report.stdout)
    assert data["overall"]["requests"] == len(rows) == stats["overall"]["requests"]
    assert [r["key"] for r in data["rows"]] == ["A", "B"]
    for field in ("requests", "tokens_original", "tokens_sent", "prompt_tokens", "cached_tokens"):
        assert data["overall"][field] == sum(r[field] for r in data["rows"]) == stats["overall"][field]
    for field in ("cost_original", "cost_actual"):
        assert data["overall"][field] == pytest.approx(sum(r[field] for r in data["rows"]))
    # each text embedded once fleet-wide: as often as one replica alone, once per stored vector
    stored = sum(1 for _ in redis.Redis.from_url(REDIS).scan_iter("ce:emb:*"))
    assert embedded == alone == stored > 0
