"""Keys never in logs: no log record, at any level, from any library, holds a URL's query
string or a credential header, whatever the request (Gemini's ``?key=`` plain, streamed,
with a recall round, passed through, or to an upstream that is down)."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest

from context_engine.proxy import log_redaction
from tests.test_gemini_recall import DECLS, GeminiRecallUpstream
from tests.test_recall import LINES, recall_proxies

KEY = "AIzaSyD-n0tInTheL0gs-1234567890abcdEFG"
HEADER_KEY = "sk-ant-api03-never-in-the-logs-0123456789"
GEMINI = "/v1beta/models/gemini-2.5-flash"


def _body(text: str = "Hello there.") -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}]}


def _seen(records: list[logging.LogRecord]) -> str:
    """Everything a handler could write of the records: message, arguments, traceback."""
    form = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return "\n".join(f"{form.format(r)} {r.args!r} {r.exc_text or ''}" for r in records)


@pytest.fixture
def caplog(caplog: pytest.LogCaptureFixture) -> Any:
    """Every record at DEBUG, the libraries' included (whatever an earlier test did to
    their loggers' levels or ``disabled`` flags)."""
    caplog.set_level(logging.DEBUG)
    names = ("httpx", "httpcore", "uvicorn", "uvicorn.error", "context_engine")
    loggers = [logging.getLogger(n) for n in names]
    was = [(lg.disabled, lg.propagate) for lg in loggers]
    for lg in loggers:
        caplog.set_level(logging.DEBUG, logger=lg.name)
        lg.disabled, lg.propagate = False, True
    yield caplog
    for lg, (disabled, propagate) in zip(loggers, was):
        lg.disabled, lg.propagate = disabled, propagate


def _no_secret(caplog: pytest.LogCaptureFixture) -> None:
    seen = _seen(caplog.records)
    assert KEY not in seen and HEADER_KEY not in seen
    assert "key=" not in seen, [line for line in seen.splitlines() if "key=" in line][:3]


def test_gemini_key_in_the_query_reaches_no_log_record(start_proxy, mock, caplog):
    caplog.set_level(logging.DEBUG)
    proxy = start_proxy(upstream=mock.url, enabled="tool_json", log_level="debug")
    sent = [(f"{GEMINI}:generateContent?key={KEY}", _body()),
            (f"{GEMINI}:streamGenerateContent?alt=sse&key={KEY}", _body()),
            (f"{GEMINI}:countTokens?key={KEY}", _body()),
            (f"/v1beta/models?key={KEY}&pageSize=5", None)]
    for path, body in sent:
        r = httpx.request("POST" if body else "GET", proxy.url + path, json=body)
        assert r.status_code < 500, (path, r.status_code)
    assert mock.received[-1].query == f"alt=sse&key={KEY}"  # the upstream still gets it
    assert any(r.name.startswith("httpx") for r in caplog.records)  # the library did log
    _no_secret(caplog)


def test_a_down_upstream_logs_no_key(start_proxy, caplog):
    caplog.set_level(logging.DEBUG)
    proxy = start_proxy(upstream="http://127.0.0.1:9", log_level="debug")
    r = httpx.post(proxy.url + f"{GEMINI}:generateContent?key={KEY}", json=_body(),
                   headers={"x-api-key": HEADER_KEY})
    assert r.status_code == 502
    _no_secret(caplog)


def test_a_recall_round_logs_no_key(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    body = {"contents": [
        {"role": "user", "parts": [{"text": "Check the sensors."}]},
        {"role": "model", "parts": [{"functionCall": {"id": "call_1", "name": "lookup", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"id": "call_1", "name": "lookup",
                                                         "response": {"output": LINES}}}]},
        {"role": "user", "parts": [{"text": "What did sensor-100 read?"}]}],
        "tools": [{"functionDeclarations": DECLS}]}
    up = GeminiRecallUpstream()
    with up, recall_proxies(up.url, tmp_path) as start:
        p = start(log_level="debug")
        for how in (":generateContent?", ":streamGenerateContent?alt=sse&"):
            before = len(up.requests)
            r = httpx.post(p.url + "/v1beta/models/recall-id" + how + f"key={KEY}",
                           content=json.dumps(body))
            assert r.status_code == 200 and len(up.requests) - before == 2  # a recall round
    _no_secret(caplog)


@pytest.mark.parametrize("line, args", [
    ("HTTP Request: %s %s", ("POST", httpx.URL(f"https://generativelanguage.googleapis.com{GEMINI}"
                                               f":generateContent?key={KEY}"))),
    ("headers %r", ({"Authorization": f"Bearer {HEADER_KEY}", "x-goog-api-key": KEY},)),
    ("headers %r", ([(b"x-api-key", HEADER_KEY.encode())],)),
    ("sent %(url)s", ({"url": f"/v1beta/x?key={KEY}"},)),
    (f"Authorization: Basic {HEADER_KEY}", ()),
    (f"a key shaped like {KEY} in prose", ()),
])
def test_any_library_record_is_redacted(caplog, line, args):
    """The class, not the case: a logger the proxy does not own, any argument shape."""
    log_redaction.install()
    caplog.set_level(logging.DEBUG)
    logging.getLogger("some.library").debug(line, *args)
    try:
        raise RuntimeError(f"failed: GET https://x.test/v1?key={KEY}")
    except RuntimeError:
        logging.getLogger("other.library").exception("boom %s", 1)
    _no_secret(caplog)
    assert "%d" not in caplog.records[-1].getMessage()


def test_redaction_is_linear_and_keeps_the_rest():
    text = "POST https://h.test/v1beta/m:generateContent?key=abc&alt=sse 200 in 12 ms"
    assert log_redaction.redact(text) == "POST https://h.test/v1beta/m:generateContent?[redacted] 200 in 12 ms"
    assert log_redaction.redact("who? what? /path without query") == "who? what? /path without query"
    big = "/" * 200_000 + "?" + "a" * 200_000 + " x-api-key" * 20_000
    assert len(log_redaction.redact(big)) < len(big)  # finishes (linear patterns)
