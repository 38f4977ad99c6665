"""``context-engine demo``: a mock upstream, the proxy, and a replayed agent session.

No key and no network: the upstream is a local mock, the client the real ``openai``
SDK, the ledger the same file ``serve`` and ``report`` use.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, cast

from context_engine.proxy.demo.conversation import TOOLS, conversation, request_points
from context_engine.proxy.demo.mock_upstream import MockUpstream, ServerThread
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.recording.ledger import read_rows
from context_engine.proxy.settings import Settings


def run_demo(settings: Settings, turns: int = 0) -> int:
    from openai import OpenAI
    from rich.console import Console

    from context_engine.proxy.reporting.report import build, render

    console = Console(width=140)
    messages = conversation()
    points = request_points(messages)[: turns or None]
    started = time.time()
    with MockUpstream() as mock:
        settings = dataclasses.replace(settings, upstream=mock.url + "/v1", port=0)
        app = create_app(settings)
        with ServerThread(app) as proxy:
            client = OpenAI(base_url=proxy.url + "/v1", api_key="demo-key-not-secret",
                            max_retries=0)
            console.print(f"mock upstream {mock.url}  ·  proxy {proxy.url}  ·  rules: "
                          f"{', '.join(settings.rules) or '(none: passthrough)'}")
            for i, point in enumerate(points, 1):
                raw = client.chat.completions.with_raw_response.create(
                    model="gpt-4o", messages=cast(Any, messages[: point + 1]), tools=cast(Any, TOOLS),
                    extra_headers={"X-Session-Id": "demo-session"})
                before = raw.headers.get("x-context-engine-tokens-before")
                after = raw.headers.get("x-context-engine-tokens-after")
                console.print(f"  request {i:2d}: {point + 1:2d} messages, "
                              f"input tokens {before} → {after}")
        app.state.ledger.flush()
    rows = [r for r in read_rows(settings.ledger, started) if r["session"].startswith("demo-session")]
    for part in render(build(rows, "model")):
        console.print(part)
    console.print(f"ledger: {settings.ledger}  ·  see it again with: context-engine report")
    return 0
