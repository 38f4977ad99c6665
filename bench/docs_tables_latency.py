"""Latency tables of ``docs/benchmarks.md``, read from the benches' own ``--json`` output
under ``docs/results/`` (a missing field is a ``KeyError``). Each run records its command,
date, the load average it started at and a note: this machine is shared, and timings
depend on it.

- ``cold_memory``: ``python3 -m context_engine.bench.cold_memory --json OUT``.
- ``load``: ``python3 bench/load.py --json OUT``.
- ``overhead``: ``python3 bench/overhead.py --json OUT``: added latency per request size
  (and per API with ``--api a,b``) of a passthrough, a shadow and a rewriting proxy.
- ``replicas``: ``python3 bench/overhead.py --replicas 2 --json OUT``, one file per run.
- ``stream_deltas``: ``python3 bench/stream_deltas.py --json OUT``.
- ``embedders``: ``python3 bench/embedders.py --evidence --json OUT``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from context_engine.bench.docs_format import pct, read, run_line, source_line, table


def cold_memory(names: list[str]) -> str:
    """The table of a ``bench/cold_memory.py --json`` output: per data file, cold and warm."""
    (name,) = names
    report = read(name)
    rows = []
    for data, result in report["files"].items():
        for mode in ("cold", "warm"):
            s = result["summary"][mode]
            kinds = ", ".join(f"{k} {v}" for k, v in s["by_kind"].items())
            rows.append([data if mode == "cold" else "", mode, f"{s['evidence']} ({s['evidence_share']:.1%})",
                         f"{s['reduction']:.1%}", f"{s['added_ms_p50']:.0f} / {s['added_ms_p95']:.0f} ms",
                         s["failed_open"], kinds])
    return table({"columns": ["data", "store", "evidence", "fewer tokens", "added p50 / p95",
                              "failed open", "by type"],
                  "align": ["left", "left", "right", "right", "right", "right", "left"], "rows": rows}) \
        + "".join(_by_conversation(data, result["rows"]) for data, result in report["files"].items()) \
        + source_line(report, name, f", load {report.get('load', '?')}", "rows per case in")


def _by_conversation(data: str, rows: list[dict[str, Any]]) -> str:
    """Evidence per conversation, cold / warm, for a file whose case ids name one
    (``locomo/conv-26/qa006``): the unit a held-out check is made on."""
    kept: dict[str, list[int]] = {}
    for r in rows:
        parts = r["case"].split("/")
        if len(parts) == 3:
            k = kept.setdefault(parts[1], [0, 0, 0])
            k[0] += r["cold"]["kept"]
            k[1] += r["warm"]["kept"]
            k[2] += r["cold"]["probes"]
    if not kept:
        return ""
    each = "; ".join(f"{conv} {c} / {w} of {n}" for conv, (c, w, n) in sorted(kept.items()))
    return f"\n\n{data} by conversation, evidence cold / warm: {each}."


def load(names: list[str]) -> str:
    """The table of a ``bench/load.py --json`` output: each phase's added latency (median
    of rounds and every round), CPU per request, rule time before forwarding, failures."""
    (name,) = names
    report = read(name)
    rows = []
    for phase, r in report.items():
        if phase.startswith("_") or phase == "args":
            continue
        med = r["added_ms_median_of_rounds"]
        rounds = ", ".join(f"{x['p50']:.1f} / {x['p95']:.0f}" for x in r["added_ms_rounds"])
        before = r["server_ms_before_forward"]
        rows.append([phase, f"{med['p50']:.1f} / {med['p95']:.0f} ms", rounds,
                     f"{r['cpu_ms_per_request']:.1f} ms",
                     "" if before["p50"] is None else f"{before['p50']:.1f} / {before['p95']:.0f} ms",
                     r["proxy_failures"]])
    meta = report.get("_about", {})
    return table({"columns": ["phase", "added p50 / p95 (median of rounds)", "per round",
                              "proxy CPU per request", "rules before forwarding p50 / p95",
                              "proxy failures"],
                  "align": ["left", "right", "left", "right", "right", "right"], "rows": rows}) \
        + source_line(meta, name, "", "the bench's own output in")


def _ms(x: float) -> str:
    return f"{x:.2f} ms".replace("-", "−")


def overhead(names: list[str]) -> str:
    """Per request size (and API): direct p50, what each proxy adds over it (p50, p95), and
    shadow's cost over the passthrough."""
    (name,) = names
    report = read(name)
    apis = len({r["api"] for r in report["runs"]}) > 1
    rows = []
    for r in report["runs"]:
        p, rw = r["passthrough"], r["rewrite"]
        rows.append([f"{r['tokens']:,} tokens", *([r["api"]] if apis else []), _ms(r["direct_p50_ms"]),
                     f"**{_ms(p['added_p50_ms'])}** / {_ms(p['added_p95_ms'])}",
                     _ms(r["shadow_over_passthrough_p50_ms"]),
                     f"{_ms(rw['added_p50_ms'])} / {_ms(rw['added_p95_ms'])}"])
    return table({"columns": ["request", *(["API"] if apis else []), "direct p50",
                              "passthrough added p50 / p95", "shadow − passthrough p50",
                              f"rewrite (`{report['rules']}`) added p50 / p95"],
                  "align": ["left"] * (1 + apis) + ["right"] * 4, "rows": rows}) \
        + run_line(report, name)


def replicas(names: list[str]) -> str:
    """One file per ``--sessions``: each phase's replicas, throughput, added latency, ledger
    rows against requests and CPU seconds per kind of process."""
    rows = []
    for name in names:
        report = read(name)
        for p in report["phases"]:
            cpu = p["cpu_seconds"]
            rows.append([report["sessions"], p["replicas"], f"{p['throughput_rps']:.1f} req/s",
                         f"{p['added_p50_ms']:,.0f} ms", f"{p['added_p95_ms']:,.0f} ms",
                         f"{p['ledger_rows']:,} = {p['requests']:,}" if p["ledger_rows"] == p["requests"]
                         else f"{p['ledger_rows']:,} of {p['requests']:,}", p["errors"],
                         " / ".join(f"{cpu[k]:.1f}" for k in ("replicas", "client", "upstream", "nginx"))])
    lines = "".join(run_line(read(n), n) for n in names)
    return table({"columns": ["sessions", "replicas", "throughput", "added p50", "added p95",
                              "ledger rows = requests", "errors",
                              "CPU s (replicas / client / upstream / nginx)"],
                  "align": ["right"] * 5 + ["center", "right", "left"], "rows": rows}) + lines


def stream_deltas(names: list[str]) -> str:
    """One file per proxy setting, a row per run: the stream read directly and through the
    proxy, another caller's small request while a stream runs through the proxy, and the
    same request with none."""
    rows = []
    for name in names:
        report = read(name)
        rows += [[f"{report['stream_coalesce_ms']:g} ms" if i == 1 else "", i, f"{r['direct_s']:.2f} s",
                  f"{r['through_proxy_s']:.2f} s", f"{r['other_caller_during_stream_s']:.2f} s",
                  f"{r['other_caller_idle_s'] * 1000:.0f} ms"] for i, r in enumerate(report["runs"], 1)]
    return table({"columns": ["`stream_coalesce_ms`", "run", "direct", "through the proxy",
                              "other caller meanwhile", "other caller, no stream"],
                  "align": ["left"] + ["right"] * 5, "rows": rows}) \
        + "".join(run_line(read(n), n) for n in names)


EMBEDDERS = {"numpy": "`minilm` (numpy)", "ort": "`minilm-ort` (ONNX Runtime)",
             "ort-int8": "int8 weights (one text per run)", "ort-int8-batched": "int8 weights, batches of 32",
             "L3": "paraphrase-MiniLM-L3-v2"}


def embedders(names: list[str]) -> str:
    """Per candidate: throughput, request latency, determinism, agreement with numpy, and
    (``--evidence``) the default rules' evidence and client p95 on LoCoMo and the traces."""
    (name,) = names
    report = read(name)
    base = report["speed"]["numpy"]["texts_per_s"]
    rows = []
    for cand, r in report["speed"].items():
        row = [EMBEDDERS.get(cand, cand), f"{r['texts_per_s']:.0f}", f"{r['texts_per_s'] / base:.2f}×",
               f"{r['request_ms_p50']:.0f} / {r['request_ms_p95']:.0f} ms",
               "yes" if r["deterministic"] else "no",
               f"{r['cos_min']:.4f}" if "cos_min" in r else "other model"]
        if "evidence" in report:
            loc, tr = report["evidence"][cand]["locomo"], report["evidence"][cand]["agent_traces"]
            row += [f"{loc['retained']}/{loc['probes']}, {pct(loc['reduction'])}",
                    f"{loc['client_ms_p95'] / 1000:.1f} s",
                    f"{pct(tr['reduction'])}, {tr['retained']}/{tr['probes']}"]
        rows.append(row)
    ev = ["LoCoMo evidence", "LoCoMo client p95", "traces"] if "evidence" in report else []
    return table({"columns": ["embedder", "texts/s", "× numpy", "request p50 / p95",
                              "same bytes whatever the batch", "cosine to numpy (min)", *ev],
                  "align": ["left", "right", "right", "right", "left", "right"] + ["right"] * len(ev),
                  "rows": rows}) + run_line(report, name)


RENDERERS: dict[str, Callable[[list[str]], str]] = {
    "cold_memory": cold_memory, "load": load, "overhead": overhead, "replicas": replicas,
    "stream_deltas": stream_deltas, "embedders": embedders}
