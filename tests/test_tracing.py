"""OpenTelemetry: a span per request with its attributes and an upstream child, exported
over OTLP; off by default, and then opentelemetry is never imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from context_engine.proxy.demo.mock_upstream import ServerThread
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.recording.ledger import read_rows
from context_engine.proxy.recording.tracing import make_tracer
from context_engine.proxy.settings import load_settings
from context_engine.proxy.store.stores import MemoryStore
from tests.conftest import REPO

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
ROWS = json.dumps({"rows": [{"id": f"R{i}", "seat": None, "note": "", "ok": True} for i in range(40)]}, indent=2)


def _settings(mock, tmp_path, **flags):
    return load_settings(flags={"rules": "tool_json", "store": "memory://", "ledger": str(tmp_path / "l.db"),
                                "upstream": mock.url + "/v1", "replica": "r1", "rules_deadline_ms": 0,
                                **flags}, env={}, config_path=os.devnull)


def _conversation():
    return [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "list the rows"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "rows", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": ROWS},
            {"role": "user", "content": "which one is first?"}]


def test_each_request_emits_a_span_with_its_attributes_and_an_upstream_child(mock, tmp_path):
    exporter = InMemorySpanExporter()
    settings = _settings(mock, tmp_path)
    app = create_app(settings, engine=Engine(settings, store=MemoryStore()), tracer=make_tracer(exporter))
    with ServerThread(app) as server:
        r = httpx.post(server.url + "/v1/chat/completions", headers={"x-session-id": "trace-1"},
                       json={"model": "gpt-4o", "messages": _conversation()})
        assert r.status_code == 200
        edited = _conversation()
        edited[1] = {"role": "user", "content": "list every row"}  # the client edits its history
        r = httpx.post(server.url + "/v1/chat/completions", headers={"x-session-id": "trace-1"},
                       json={"model": "gpt-4o", "messages": edited})
        assert r.status_code == 200
        r = httpx.post(server.url + "/v1/chat/completions", headers={"traceparent": TRACEPARENT},
                       json={"model": "mock-500", "messages": [
            {"role": "user", "content": "fail please"}]})
        assert r.status_code == 500
        app.state.ledger.flush()
        deadline = time.time() + 10
        while len(exporter.get_finished_spans()) < 6 and time.time() < deadline:
            time.sleep(0.01)
    # ReadableSpan's attributes are Optional[Mapping[str, AnyValue]]: read them as the
    # values this test set (Any), each checked below
    spans: list[Any] = list(exporter.get_finished_spans())
    assert sorted(s.name for s in spans) == ["context-engine chat"] * 3 + ["upstream"] * 3
    ok, second = [s for s in spans
                  if s.name == "context-engine chat" and s.attributes["context_engine.model"] == "gpt-4o"]
    up = next(s for s in spans if s.name == "upstream" and s.parent.span_id == ok.context.span_id)
    a = ok.attributes
    before, after = a["context_engine.tokens_before"], a["context_engine.tokens_after"]
    assert a["context_engine.session"].startswith("trace-1~") and a["context_engine.api"] == "chat"
    assert a["context_engine.mode"] == "rewrite" and a["context_engine.replica"] == "r1"
    assert before > after > 0 and a["context_engine.rule.tool_json.saved_tokens"] == before - after
    assert a["context_engine.rule.tool_json.ms"] >= 0
    assert a["context_engine.prompt_tokens"] > 0 and a["context_engine.cached_tokens"] == 0
    assert a["http.response.status_code"] == 200 and "context_engine.prefix_break_rule" not in a
    assert second.attributes["context_engine.prefix_break_rule"] == "client"
    assert second.attributes["context_engine.prefix_kept_tokens"] > 0
    assert second.attributes["context_engine.prefix_break_index"] >= 0
    assert ok.start_time <= up.start_time <= up.end_time == ok.end_time
    assert up.context.trace_id == ok.context.trace_id
    failed = next(s for s in spans if s.name == "context-engine chat" and s not in (ok, second))
    assert failed.status.status_code.name == "ERROR" and failed.attributes["http.response.status_code"] == 500
    # the agent's own trace: the request's span is a child of the span it named
    assert f"{failed.context.trace_id:032x}" == TRACEPARENT.split("-")[1]
    assert f"{failed.parent.span_id:016x}" == TRACEPARENT.split("-")[2] and ok.parent is None
    assert mock.received[-1].headers["traceparent"] == TRACEPARENT  # forwarded as sent
    rows = read_rows(settings.ledger)
    assert rows[0]["tokens_original"] == before and rows[0]["tokens_sent"] == after


class _Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, str | None, ExportTraceServiceRequest]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        message = ExportTraceServiceRequest()
        message.ParseFromString(body)
        self.received.append((self.path, self.headers.get("x-team"), message))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_otel_true_exports_spans_over_otlp_as_the_otel_variables_say(mock, tmp_path, monkeypatch):
    collector = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{collector.server_port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-team=agents")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "ce-test")
    settings = _settings(mock, tmp_path, otel=True)
    app = create_app(settings, engine=Engine(settings, store=MemoryStore()))
    try:
        with ServerThread(app) as server:  # leaving runs the app's shutdown: spans flushed
            r = httpx.post(server.url + "/v1/chat/completions",
                           json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200
    finally:
        collector.shutdown()
    (path, team, message), = _Collector.received
    assert path == "/v1/traces" and team == "agents"
    resource = message.resource_spans[0]
    service = {a.key: a.value.string_value for a in resource.resource.attributes}["service.name"]
    names = sorted(s.name for scope in resource.scope_spans for s in scope.spans)
    assert service == "ce-test" and names == ["context-engine chat", "upstream"]


@pytest.mark.slow
def test_tracing_is_off_by_default_and_the_server_then_never_imports_opentelemetry(tmp_path):
    assert load_settings(flags={}, env={}, config_path=os.devnull).otel is False
    code = ("import sys; from context_engine.proxy.cli import main; from context_engine.proxy.edge.app import create_app; "
            "from context_engine.proxy.settings import load_settings; "
            f"create_app(load_settings(flags={{'ledger': {str(tmp_path / 'l.db')!r}, 'store': 'memory://', "
            "'rules': ''}, env={}, config_path='/dev/null')); "
            "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry', 'psycopg'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
