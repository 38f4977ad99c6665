"""Fuzz: generated bodies through the real server never get a 500 or crash it.

Bodies are valid JSON of arbitrary shape, nesting, types and Unicode (lone surrogates
included, escaped or raw), mostly chat-shaped so they reach the rules. They go through
``context-engine serve`` (uvicorn on loopback, default rules, its own process) to a raw
upstream that always answers 200, over keep-alive connections. Each body is forwarded
unchanged (or, where a rule rewrote it, changed only inside ``messages``) or gets a 4xx
in OpenAI's error shape. Afterwards the server is alive and its ledger holds one row per
forwarded request.

``FUZZ_BODIES`` sets the number of seeded bodies (default 10,000); a hypothesis test
with the same shapes runs as many examples as the profile says (shrinking on failure).
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_engine.proxy.dialects.chat.body import parse_body
from context_engine.proxy.dialects.chat.recall import TOOL_JSON
from context_engine.proxy.recording.ledger import read_rows
from tests.fakes import raw_upstream
from tests.json_fuzz import BodyGen

REPO = Path(__file__).resolve().parents[1]
BODIES = int(os.environ.get("FUZZ_BODIES", "10000"))
THREADS = 4

chars = st.characters(exclude_categories=())  # every code point, lone surrogates too
text = st.text(chars, max_size=12) | st.sampled_from(
    ["", "hi", "ok", "{}", '{"a": null, "b": []}', "[1,2]", "\ud83d", "User: x", "<<"])
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(text, inner, max_size=4), max_leaves=12)
roles = st.sampled_from(["system", "developer", "user", "assistant", "tool"]) | text
part = st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"]) | text},
                             optional={"text": text | values, "image_url": values})
tool_call = st.fixed_dictionaries({"id": text | values, "type": st.just("function"),
                                   "function": st.fixed_dictionaries(
                                       {"name": text, "arguments": text | values.map(json.dumps)})})
message = st.fixed_dictionaries({"role": roles}, optional={
    "content": text | st.none() | st.lists(part | values, max_size=3) | values,
    "tool_calls": st.lists(tool_call, max_size=2) | values,
    "tool_call_id": text | values, "name": text | values})
chat_body = st.fixed_dictionaries(
    {"model": text | values, "messages": st.lists(message, min_size=1, max_size=6) | values},
    optional={"stream": st.booleans() | values, "tools": values, "extra": values,
              "temperature": values})
bodies = st.tuples(chat_body | chat_body | chat_body | values, st.booleans(),
                   st.sampled_from([None, (",", ":")]))




def _encode(body, ascii_only: bool, separators) -> bytes:
    text_ = json.dumps(body, ensure_ascii=ascii_only, separators=separators)
    return text_.encode("utf-8", "surrogatepass")  # raw surrogates: invalid UTF-8 (a 400)


class Served:
    """``context-engine serve`` in its own process, in front of a raw upstream."""

    def __init__(self, tmp: Path) -> None:
        self.upstream = raw_upstream.start()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.ledger = str(tmp / "ledger.db")
        self.log = tmp / "server.log"
        config = tmp / "config.yaml"  # default rules; retrieve embeds with the fast hashing
        config.write_text("rule_options:\n  retrieve:\n    embedder: hashing\n")  # embedder
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONTEXT_ENGINE_")}
        env.update(PYTHONPATH=str(REPO), CONTEXT_ENGINE_LOG_LEVEL="warning")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "context_engine.proxy.cli", "serve", "--config", str(config),
                 "--port", str(port), "--upstream", self.upstream.url + "/v1",
                 "--ledger", self.ledger, "--store", "memory://"],
                env=env, cwd=tmp, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while True:
            try:
                httpx.get(self.url + "/healthz", timeout=1)
                break
            except httpx.HTTPError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(self.log.read_text()) from None
                time.sleep(0.1)

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rows(self) -> list[dict]:
        assert httpx.get(self.url + "/stats", timeout=30).status_code == 200  # drains, flushes
        return read_rows(self.ledger)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)
        self.upstream.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    server = Served(tmp_path_factory.mktemp("fuzz"))
    yield server
    server.close()


def _outside_messages(raw: bytes) -> tuple[str, str]:
    body = parse_body(raw)
    start, end = body.messages_span
    return body.text[:start], body.text[end:]


class Client:
    """A keep-alive client light enough that the server, not the client, sets the pace."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)

    def post(self, raw: bytes, key: str) -> tuple[int, bytes]:
        for attempt in (1, 2):
            try:
                self.conn.request("POST", "/v1/chat/completions", body=raw,
                                  headers={"content-type": "application/json", "x-fuzz-id": key})
                r = self.conn.getresponse()
                return r.status, r.read()
            except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                # the server closed an idle keep-alive connection (its 5 s timeout) before
                # reading this request: open a new one and send it again, once
                self.conn.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.conn.close()


def _check(served: Served, client: Client, key: str, raw: bytes) -> str:
    """Send one body; return "4xx", "same" or "rewritten" (only inside messages)."""
    status, payload = client.post(raw, key)
    assert status < 500, (status, payload, raw[:2000])
    if status >= 400:
        assert set(json.loads(payload)["error"]) == {"message", "type", "param", "code"}, payload
        assert key not in served.upstream.by_id, "a refused body reached the upstream"
        return "4xx"
    assert status == 200, payload
    sent = served.upstream.by_id.pop(key)
    if sent == raw:
        return "same"
    # the one addition outside messages: context_recall after the client's tools, once a
    # rewrite was lossy (docs/recall.md)
    sent = sent.replace(b"," + TOOL_JSON.encode(), b"", 1)
    assert _outside_messages(sent) == _outside_messages(raw), raw[:2000]
    return "rewritten"


def _alive_and_recording(served: Served, forwarded_before: int, forwarded: int) -> None:
    ok = httpx.post(served.url + "/v1/chat/completions", timeout=30,
                    json={"model": "gpt-4o", "messages": [{"role": "user", "content": "after"}]})
    assert ok.status_code == 200 and served.proc.poll() is None
    rows = served.rows()
    assert len(rows) == forwarded_before + forwarded + 1, "the ledger lost rows"
    assert rows[-1]["model"] == "gpt-4o" and rows[-1]["status"] == 200
    assert "Exception in ASGI application" not in served.log.read_text()


@pytest.mark.slow
def test_ten_thousand_generated_bodies_are_forwarded_or_answered_4xx(served):
    before = len(served.rows())
    counts: dict[str, int] = {"4xx": 0, "same": 0, "rewritten": 0}
    failures: list[BaseException] = []
    lock = threading.Lock()

    def worker(first: int) -> None:
        client = Client(served.url)
        try:
            for i in range(first, BODIES, THREADS):
                try:
                    outcome = _check(served, client, f"g{i}", BodyGen(i).body())
                except BaseException as exc:  # reported below, with the body's seed
                    failures.append(AssertionError(f"seed {i}: {exc}"))
                    return
                with lock:
                    counts[outcome] += 1
        finally:
            client.close()

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[0]
    print(f"fuzz bodies: {counts}; server CPU so far {served.cpu_seconds():.1f} s")
    assert sum(counts.values()) == BODIES
    assert counts["same"] > BODIES // 4 and counts["4xx"] > BODIES // 20
    _alive_and_recording(served, before, counts["same"] + counts["rewritten"])


@pytest.mark.slow
def test_hypothesis_bodies_are_forwarded_or_answered_4xx(served):
    before = len(served.rows())
    counts = {"4xx": 0, "same": 0, "rewritten": 0}
    client, keys = Client(served.url), itertools.count()

    @settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(bodies)
    def run(case):
        counts[_check(served, client, f"h{next(keys)}", _encode(*case))] += 1

    run()
    client.close()
    _alive_and_recording(served, before, counts["same"] + counts["rewritten"])
