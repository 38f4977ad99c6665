"""Long memory through the real server, cold and warm, one question per request.

``python3 -m context_engine.bench.cold_memory [FILES…] [--limit N] [--json OUT]``
(default: ``longmemeval`` and ``locomo`` from the shared data folder).

Each case (a whole conversation ending with its question) goes to a real proxy
(uvicorn on loopback, the default rules, a loopback mock upstream that records what it
received) three ways, in one run:

- **direct**: straight to the mock, the floor of the round trip;
- **cold**: through a proxy whose store is empty (a resumed chat, a stateless client,
  the first request after a deploy): nothing embedded, indexed or committed before;
- **warm**: the same request through a proxy whose store holds what the cold request's
  background work left there, but no committed memory zone (a zone, once committed, is
  sent again as it was: that is the prompt cache's contract). With ``retrieve.ranking:
  stored`` that is every dropped turn's vector; with the default ``request`` nothing (a
  request ranks on itself), and warm must send what cold sends.

Evidence is read from the body the upstream received. A request the proxy sent
unchanged past its deadline counts as failed open (its evidence is trivially kept; it
is counted, not hidden). Added latency is the round trip through the proxy minus the
direct one, per request.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any

import httpx

from context_engine.bench.cases import Case, load_cases, resolve_file
from context_engine.bench.metrics import percentile, probe_retained, visible_text
from context_engine.proxy.demo.mock_upstream import MockUpstream, ServerThread
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.edge.heap import settle_heap
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.proxy.settings import Settings, load_settings
from context_engine.proxy.store.stores import MemoryStore
from context_engine.rules.retrieve.embedders import make_embedder

ZONES = "retrieve:zone:"  # committed memory zones (rules/retrieve/committed.py)
VECTORS = "emb:"  # stored embeddings (rules/retrieve/embedding_cache.py)
KNOWN: dict[str, bytes] = {}  # every vector a settled store held, by key


def _settings(upstream: str, ledger: str, rules: str | None, deadline_ms: float | None,
              config: str | None = None) -> Settings:
    flags: dict[str, Any] = {"store": "memory://", "ledger": ledger, "upstream": upstream + "/v1",
                             "rules": rules}
    if deadline_ms is not None:
        flags["rules_deadline_ms"] = deadline_ms
    return load_settings(flags=flags, env={}, config_path=config or os.devnull)


def _post(client: httpx.Client, url: str, body: bytes) -> float:
    start = time.perf_counter()
    r = client.post(url + "/v1/chat/completions", content=body,
                    headers={"content-type": "application/json", "authorization": "Bearer sk-bench"})
    r.raise_for_status()
    return (time.perf_counter() - start) * 1000


def _through(settings: Settings, store: MemoryStore, embedder: Any, mock: MockUpstream,
             client: httpx.Client, body: bytes, settle: bool) -> tuple[float, list[Any], int]:
    """One request through a fresh proxy on ``store``: (ms, messages the upstream got,
    deadlines fired). ``settle``: before the proxy stops, let its background lane finish
    what the request queued (the dropped turns' vectors), as a proxy that keeps running
    does between a client's requests."""
    engine = Engine(settings, store=store, embedder=embedder)
    app = create_app(settings, engine=engine)
    settle_heap()  # as `context-engine serve` does before it serves
    with ServerThread(app) as proxy:
        ms = _post(client, proxy.url, body)
        if settle:
            # vectors are content-addressed: what earlier cases embedded (the same turns of
            # one conversation) is the same bytes, so the lane only embeds what is new
            store._data.update({k: v for k, v in KNOWN.items() if k not in store._data})
            for _ in range(600):
                if engine.background.pending == 0:
                    break
                time.sleep(0.05)
            engine.prefetch()  # whatever the lane left (it gives way, and may not have run)
            KNOWN.update({k: v for k, v in store._data.items() if k.startswith(VECTORS)})
    sent = mock.received[-1].json()["messages"]
    return ms, sent, engine.lane_stats()["deadline"]


def run_case(case: Case, settings: Settings, embedder: Any, mock: MockUpstream,
             client: httpx.Client, counter: TokenCounter) -> dict[str, Any]:
    payload = {"model": "gpt-4o", "messages": case.messages}
    if case.tools:
        payload["tools"] = case.tools
    body = json.dumps(payload, ensure_ascii=False).encode()
    direct = _post(client, mock.url, body)
    row: dict[str, Any] = {"case": case.id, "kind": str(case.meta.get("category_name")
                                                        or case.meta.get("question_type") or ""),
                           "tokens": counter.messages(case.messages), "direct_ms": direct}
    cold_store = MemoryStore()
    for mode in ("cold", "warm"):
        store = cold_store if mode == "cold" else MemoryStore()
        if mode == "warm":
            store._data = {k: v for k, v in cold_store._data.items() if not k.startswith(ZONES)}
        ms, sent, deadlines = _through(settings, store, embedder, mock, client, body, mode == "cold")
        text = visible_text(sent)
        probes = [p for p in case.probes if p.evidence]
        row[mode] = {"added_ms": round(ms - direct, 1), "failed_open": bool(deadlines) or sent == case.messages,
                     "kept": sum(probe_retained(p.evidence, text) for p in probes), "probes": len(probes),
                     "tokens": counter.messages(sent),
                     "vectors": sum(k.startswith(VECTORS) for k in store._data)}
    return row


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in ("cold", "warm"):
        kept = sum(r[mode]["kept"] for r in rows)
        probes = sum(r[mode]["probes"] for r in rows)
        before, after = sum(r["tokens"] for r in rows), sum(r[mode]["tokens"] for r in rows)
        added = [r[mode]["added_ms"] for r in rows]
        by_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for r in rows:
            by_kind[r["kind"]][0] += r[mode]["kept"]
            by_kind[r["kind"]][1] += r[mode]["probes"]
        out[mode] = {"evidence": f"{kept}/{probes}", "evidence_share": round(kept / max(1, probes), 4),
                     "reduction": round(1 - after / max(1, before), 4),
                     "added_ms_p50": percentile(added, 50), "added_ms_p95": percentile(added, 95),
                     "failed_open": sum(r[mode]["failed_open"] for r in rows),
                     "by_kind": {k: f"{v[0]}/{v[1]}" for k, v in sorted(by_kind.items())}}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench cold_memory", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="*", default=["longmemeval", "locomo"])
    p.add_argument("--limit", type=int, default=None, help="at most N cases per file")
    p.add_argument("--rules", default=None, help="comma-separated rules (default: the defaults)")
    p.add_argument("--deadline-ms", type=float, default=None,
                   help="rules_deadline_ms (default: the configured one; 0: none)")
    p.add_argument("--config", metavar="YAML", default=None,
                   help="rule options from this config.yaml (default: the embedded defaults); "
                        "its store, ledger and upstream are replaced by the bench's")
    p.add_argument("--json", metavar="OUT", help="write the rows and the summary as JSON")
    args = p.parse_args(argv)
    counter = TokenCounter("o200k_base")
    report: dict[str, Any] = {"command": "python3 -m context_engine.bench.cold_memory "
                              + " ".join(argv if argv is not None else sys.argv[1:]),
                              "date": time.strftime("%Y-%m-%d"), "load": os.getloadavg()[0], "files": {}}
    mock = MockUpstream(simulate_cache=False)
    with mock, httpx.Client(timeout=120) as client, tempfile.TemporaryDirectory() as tmp:
        settings = _settings(mock.url, os.path.join(tmp, "ledger.db"), args.rules, args.deadline_ms,
                             args.config)
        embedder = make_embedder(str(settings.rule_options.get("retrieve", {}).get("embedder", "auto")))
        for name in args.files:
            cases = [c for c in load_cases(resolve_file(name), args.limit) if any(p.evidence for p in c.probes)]
            rows = []
            for i, case in enumerate(cases):
                rows.append(run_case(case, settings, embedder, mock, client, counter))
                mock.received.clear()
                print(f"{name} {i + 1}/{len(cases)} {case.id}: cold {rows[-1]['cold']['kept']} "
                      f"+{rows[-1]['cold']['added_ms']:.0f} ms, warm {rows[-1]['warm']['kept']} "
                      f"+{rows[-1]['warm']['added_ms']:.0f} ms", file=sys.stderr)
            report["files"][name] = {"summary": summarize(rows), "rows": rows}
            print(json.dumps({name: report["files"][name]["summary"]}, indent=1))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
