"""What every dialect owes the rest of the proxy (``proxy/dialects/dialect.py``), checked
once for each registered dialect: its routes are served, its key is found where it
travels, its errors are JSON in its own shape, and nothing outside ``proxy/dialects``
asks which API it serves."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from context_engine.proxy.dialects.registry import BY_NAME, DEFAULT, DIALECTS, for_client
from context_engine.proxy.errors import BadRequest, UpstreamTimeout, UpstreamUnreachable

NAMES = [d.name for d in DIALECTS]
REPO = Path(__file__).resolve().parents[1]


def test_names_and_routes_are_unique():
    assert len(set(NAMES)) == len(NAMES) == len(BY_NAME)
    routes = [r for d in DIALECTS for r in d.routes]
    assert len(set(routes)) == len(routes)


@pytest.mark.parametrize("name", NAMES)
def test_the_key_is_found_where_the_dialect_says_it_travels(name):
    d = BY_NAME[name]
    header = d.key_headers[0]
    assert d.credential({header: "k-1"}, "") == "k-1"
    assert d.has_credential([(header.encode(), b"k-1")], "")
    assert not d.has_credential([(header.encode(), b"  ")], "")
    assert not d.has_credential([(b"content-type", b"application/json")], "")
    assert d.credential({}, "") == ""
    if d.key_query:
        assert d.credential({}, f"alt=sse&{d.key_query}=k-2") == "k-2"
        assert d.has_credential([], f"{d.key_query}=k-2")


@pytest.mark.parametrize("name", NAMES)
def test_errors_are_json_with_the_status_and_message(name):
    d = BY_NAME[name]
    for exc in (BadRequest("bad body"), UpstreamTimeout("too slow")):
        body = json.loads(d.error_body(exc))
        assert "bad body" in json.dumps(body) or "too slow" in json.dumps(body)


def test_shared_routes_answer_in_the_clients_shape():
    assert for_client("/v1/models", {}) is DEFAULT
    assert for_client("/v1/messages/count_tokens", {}).name == "anthropic"
    assert for_client("/v1/models", {"anthropic-version": "2023-06-01"}).name == "anthropic"
    assert for_client("/v1beta/models", {}).name == "gemini"
    assert for_client("/v1/models/gemini-2.5-pro:countTokens", {"x-goog-api-key": ""}).name == "gemini"


def test_no_module_outside_the_dialects_branches_on_an_api_name():
    names = "|".join(re.escape(n) for n in NAMES)
    # a comparison of an API's, adapter's, wire's or dialect's name with a literal name
    branch = re.compile(rf"""(\bapi\b|\.name\b|adapter|wire|dialect)\S*\s*(==|!=|\bin\b)\s*\(?["']({names})["']""")
    found = []
    for path in sorted((REPO / "proxy").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith(("proxy/dialects/", "proxy/demo/")):  # the demo mock plays each API
            continue
        found += [f"{rel}: {line.strip()}" for line in path.read_text().splitlines() if branch.search(line)]
    assert not found, found


def _shape(obj: Any) -> Any:
    """The keys of a JSON error, nested, with the values' types."""
    return {k: _shape(v) for k, v in obj.items()} if isinstance(obj, dict) else type(obj).__name__


@pytest.mark.parametrize("name", NAMES)
def test_a_real_server_answers_each_dialects_clients_in_its_shape(start_proxy, name):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    proxy = start_proxy(upstream=f"http://127.0.0.1:{closed}/v1")
    d = BY_NAME[name]
    url = proxy.url + d.routes[0].replace("{model}", "m-1")
    bad = httpx.post(url, content=b"{not json", headers={"authorization": "Bearer k"})
    assert bad.status_code == 400
    assert _shape(bad.json()) == _shape(json.loads(d.error_body(BadRequest("x"))))
    body = {"model": "m-1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
            "input": "hi", "contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    down = httpx.post(url, json=body, headers={"authorization": "Bearer k"})
    assert down.status_code == 502
    assert _shape(down.json()) == _shape(json.loads(d.error_body(UpstreamUnreachable("x"))))
    assert proxy.rows()[-1]["api"] == name
