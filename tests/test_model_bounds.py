"""The request's ``model`` is client-controlled: bounded in the ledger, in /metrics and
in traces, and a request the upstream refuses adds nothing to the bill's metrics."""

from __future__ import annotations

import os
import time

import httpx
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from context_engine.proxy.demo.mock_upstream import ServerThread
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.recording.tracing import make_tracer
from context_engine.proxy.sanitize import MAX_MODEL_CHARS
from context_engine.proxy.settings import load_settings
from context_engine.proxy.store.stores import MemoryStore

MSGS = [{"role": "user", "content": "hi"}]


def test_a_huge_model_name_is_cut_at_parse_time_and_metrics_stay_small(start_proxy):
    proxy = start_proxy()
    for i in range(3):
        model = "gpt-4o" + str(i) * 100_000
        r = httpx.post(proxy.url + "/v1/chat/completions", json={"model": model, "messages": MSGS})
        assert r.status_code == 200
    rows = proxy.rows()
    assert [len(row["model"]) for row in rows] == [MAX_MODEL_CHARS] * 3
    metrics = httpx.get(proxy.url + "/metrics").text
    assert len(metrics) < 60_000
    assert max(len(line) for line in metrics.splitlines()) < 400


def test_the_bill_metrics_leave_out_requests_the_upstream_refused(start_proxy):
    proxy = start_proxy()
    r = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": MSGS},
                   headers={"authorization": "Bearer sk-invalid"})
    assert r.status_code == 401
    metrics = httpx.get(proxy.url + "/metrics").text
    # a model no accepted request named yet holds no label slot (proxy/recording/metrics.py)
    assert 'context_engine_requests_total{api="chat",arm="rewrite",model="(not accepted)",' \
        'status="401"} 1.0' in metrics
    assert "context_engine_cost_usd_total{" not in metrics
    ok = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": MSGS})
    assert ok.status_code == 200
    proxy.rows()
    assert "context_engine_cost_usd_total{" in httpx.get(proxy.url + "/metrics").text


def test_span_attributes_are_bounded(mock, tmp_path):
    exporter = InMemorySpanExporter()
    settings = load_settings(flags={"rules": "", "store": "memory://", "ledger": str(tmp_path / "l.db"),
                                    "upstream": mock.url + "/v1", "rules_deadline_ms": 0},
                             env={}, config_path=os.devnull)
    app = create_app(settings, engine=Engine(settings, store=MemoryStore()), tracer=make_tracer(exporter))
    with ServerThread(app) as server:
        r = httpx.post(server.url + "/v1/chat/completions", json={"model": "m" * 100_000, "messages": MSGS},
                       headers={"x-session-id": "s" * 100_000})
        assert r.status_code == 200
        deadline = time.time() + 10
        while len(exporter.get_finished_spans()) < 2 and time.time() < deadline:
            time.sleep(0.01)
    spans = list(exporter.get_finished_spans())
    assert spans
    for span in spans:
        for value in (span.attributes or {}).values():
            assert len(str(value)) <= MAX_MODEL_CHARS
