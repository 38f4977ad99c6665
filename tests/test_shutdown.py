"""SIGTERM drains: a request in flight gets its whole response and its ledger row."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from context_engine.proxy.recording.ledger import read_rows
from tests.conftest import REPO


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(mock, tmp_path, port):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env = {k: v for k, v in env.items() if not k.startswith("CONTEXT_ENGINE_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "context_engine.proxy.cli", "serve", "--port", str(port), "--rules", "",
         "--store", "memory://", "--ledger", str(tmp_path / "ledger.db"), "--config", os.devnull,
         "--upstream", mock.url + "/v1"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError(proc.stdout.read().decode() if proc.stdout else "server did not start")


@pytest.mark.slow
def test_sigterm_drains_in_flight_requests_and_flushes_the_ledger(mock, tmp_path):
    from openai import OpenAI

    port = _free_port()
    proc = _start(mock, tmp_path, port)
    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-test", max_retries=0, timeout=30)
    results: dict[str, object] = {}

    def plain() -> None:
        reply = client.chat.completions.create(
            model="mock-slow-1.5", messages=[{"role": "user", "content": "slow plain"}])
        results["plain"] = reply.choices[0].message.content

    def streamed() -> None:
        stream = client.chat.completions.create(
            model="mock-slow-1.5", stream=True, messages=[{"role": "user", "content": "slow stream"}])
        chunks = list(stream)
        results["stream"] = ("".join(c.choices[0].delta.content or "" for c in chunks if c.choices),
                             chunks[-1].choices[0].finish_reason)

    seen = len(mock.received)
    threads = [threading.Thread(target=plain), threading.Thread(target=streamed)]
    for t in threads:
        t.start()
    deadline = time.time() + 10
    while len(mock.received) < seen + 2 and time.time() < deadline:
        time.sleep(0.01)  # both requests are at the upstream, which is taking its time
    proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(30)
    assert proc.wait(30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once drained
    log = proc.stdout.read().decode() if proc.stdout else ""
    assert "Traceback" not in log, log
    assert results["plain"] == "Mock reply to 1 messages."
    assert results["stream"] == ("Mock reply to 1 messages. ", "stop")
    rows = read_rows(str(tmp_path / "ledger.db"))
    assert sorted((r["model"], r["status"], r["stream"]) for r in rows) == [
        ("mock-slow-1.5", 200, 0), ("mock-slow-1.5", 200, 1)]
    assert all(r["finish_reason"] == "stop" for r in rows)


@pytest.mark.slow
def test_sigterm_exits_within_the_grace_period_with_finished_rows_written(mock, tmp_path):
    """A container runtime kills the process after its grace period (Docker: 10 s); a request
    that runs longer must not hold the process past ``shutdown_grace`` (5 s) plus the
    bounded ledger flush, and the rows of finished requests are written first."""
    port = _free_port()
    proc = _start(mock, tmp_path, port)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    done = httpx.post(url, json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
    assert done.status_code == 200
    seen = len(mock.received)

    def post_slow() -> None:
        try:
            httpx.post(url, timeout=60, json={"model": "mock-slow-30",
                                              "messages": [{"role": "user", "content": "very slow"}]})
        except httpx.HTTPError:
            pass  # cut off by the shutdown, as it should be

    slow = threading.Thread(target=post_slow)
    slow.start()
    deadline = time.time() + 10
    while len(mock.received) <= seen and time.time() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    took = time.monotonic() - started
    slow.join(60)
    assert took < 9.0, f"shutdown took {took:.1f} s"
    rows = {r["model"]: (r["status"], r["error"]) for r in read_rows(str(tmp_path / "ledger.db"))}
    assert rows["gpt-4o"] == (200, "")
    assert rows["mock-slow-30"] == (503, "cut by shutdown before the upstream answered")
