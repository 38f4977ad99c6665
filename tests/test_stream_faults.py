"""Upstream faults reach the client as faults; client hang-ups close the upstream stream.

The upstream is a raw socket server on loopback that resets or stalls on cue; the client
is the real openai SDK (it must raise, never see a clean end after half an answer).
"""

from __future__ import annotations

import time

import httpx
import openai
import pytest

MSGS = [{"role": "user", "content": "hi"}]
FAULTS = (httpx.HTTPError, openai.APIError)


def _read_stream(proxy, model: str) -> str:
    text = ""
    stream = proxy.client().chat.completions.create(model=model, messages=MSGS, stream=True)
    for chunk in stream:
        text += chunk.choices[0].delta.content or ""
    return text


def test_a_client_that_leaves_after_done_had_the_whole_answer(start_proxy, raw):
    """An SDK stops reading at [DONE]; the upstream may close its stream later. The row
    records no disconnect: the client got every event of the answer."""
    proxy = start_proxy(upstream=raw.url + "/v1")
    with httpx.stream("POST", proxy.url + "/v1/chat/completions",
                      json={"model": "late-close", "messages": MSGS, "stream": True}) as r:
        for line in r.iter_lines():
            if line == "data: [DONE]":
                break
    deadline = time.time() + 10
    while time.time() < deadline and not proxy.rows():
        time.sleep(0.05)
    assert proxy.rows()[-1]["error"] == ""


def test_stream_cut_midway_raises_in_the_sdk_and_is_recorded(start_proxy, raw):
    proxy = start_proxy(upstream=raw.url + "/v1")
    seen = []
    with pytest.raises(FAULTS):
        stream = proxy.client().chat.completions.create(model="cut-stream", messages=MSGS,
                                                        stream=True)
        for chunk in stream:
            seen.append(chunk.choices[0].delta.content)
    assert "".join(seen) == "Hello wor"
    row = proxy.rows()[-1]
    assert row["stream"] == 1 and "mid-stream" in row["error"]


def test_stream_cut_midway_never_ends_cleanly_on_the_wire(start_proxy, raw):
    proxy = start_proxy(upstream=raw.url + "/v1")
    got = b""
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream("POST", proxy.url + "/v1/chat/completions",
                          json={"model": "cut-stream", "messages": MSGS, "stream": True}) as r:
            for chunk in r.iter_raw():
                got += chunk
    assert got.count(b"data: ") == 2


def test_stream_read_timeout_midway_raises_in_the_sdk(start_proxy, raw):
    proxy = start_proxy(upstream=raw.url + "/v1", upstream_timeout=0.4)
    with pytest.raises(FAULTS):
        _read_stream(proxy, "stall-stream")
    assert "ReadTimeout" in proxy.rows()[-1]["error"]


def test_body_cut_midway_answers_502_not_an_empty_200(start_proxy, raw):
    proxy = start_proxy(upstream=raw.url + "/v1")
    with pytest.raises(openai.APIStatusError) as info:
        proxy.client().chat.completions.create(model="cut-body", messages=MSGS)
    assert info.value.status_code == 502
    assert isinstance(info.value.body, dict) and info.value.body["code"] == "upstream_broken"
    row = proxy.rows()[-1]
    assert row["status"] == 502 and "mid-body" in row["error"]


def test_passthrough_body_cut_midway_is_a_fault(start_proxy, raw):
    proxy = start_proxy(upstream=raw.url + "/v1")
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(proxy.url + "/v1/embeddings", json={"model": "cut-body", "input": "x"})


def test_client_hangup_closes_the_upstream_stream_and_is_recorded(start_proxy, raw):
    proxy = start_proxy(upstream=raw.url + "/v1")
    with httpx.stream("POST", proxy.url + "/v1/chat/completions",
                      json={"model": "slow-stream", "messages": MSGS, "stream": True}) as r:
        first = next(r.iter_raw())
        assert first.startswith(b"data: ")
    assert raw.hung_up.wait(3), "the proxy kept reading the upstream after the client left"
    deadline = time.time() + 5
    while time.time() < deadline and not proxy.rows():
        time.sleep(0.02)
    assert proxy.rows()[-1]["error"] == "client_disconnected"


def test_complete_stream_has_no_error(start_proxy, mock):
    proxy = start_proxy()
    assert _read_stream(proxy, "gpt-4o").strip() == "Mock reply to 1 messages."
    assert proxy.rows()[-1]["error"] == ""
