"""Record every family's sessions and write the cases as gzipped JSONL.

    python3 -m context_engine.bench.long_tools.build --out bench/data/long_tools_dev.jsonl.gz

Reads the public sources from bare mirrors under ``--sources`` (default
``$CONTEXT_ENGINE_MIRRORS``; a maintainer's tool: CI reads the committed file). Sessions are seeded by family and
number, so two runs give byte-identical output (gzip with mtime 0).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from context_engine.bench.long_tools import airline, retail, sheets, web
from context_engine.bench.long_tools.cuts import cut_points, probes
from context_engine.bench.long_tools.recorder import Recorder
from context_engine.bench.long_tools.sources import Mirror, Source
from context_engine.proxy.engine.tokens import TokenCounter

DATASET = "long-tool-sessions"


@dataclass(frozen=True)
class Family:
    name: str
    repo: str
    load: Callable[[Mirror], tuple[Any, list[dict[str, Any]], list[Source]]]
    session: Callable[[Recorder, Any, bool], None]
    count: int


FAMILIES = (
    Family("retail-ops", retail.TAU, retail.load, retail.session, 10),
    Family("travel-planning", airline.TAU, airline.load, airline.session, 10),
    Family("web-research", web.FASTAPI, web.load, web.session, 10),
    Family("spreadsheet", sheets.COUNTRIES, sheets.load, sheets.session, 10),
)


def record(family: Family, env: Any, number: int) -> Recorder:
    """One session of ``family``, seeded by its name and number."""
    sid = f"{family.name}-{number:02d}"
    rng = random.Random(f"long-tools:{sid}")
    rec = Recorder(sid, env, rng)
    family.session(rec, env, rng.random() < 0.5)
    return rec


def cases(family: Family, rec: Recorder, tools: list[dict[str, Any]], sources: list[Source]) -> list[dict[str, Any]]:
    """The session's cases, one per cut point."""
    counter = TokenCounter()
    full = rec.messages
    n_calls = sum(len(m.get("tool_calls") or ()) for m in full)
    out = []
    for cut in cut_points(full):
        history = full[:cut]
        meta = {"dataset": DATASET, "family": family.name, "task": rec.session, "cut_index": cut,
                "next_step": full[cut], "tool_calls": n_calls,
                "tool_calls_before": sum(len(m.get("tool_calls") or ()) for m in history),
                "approx_tokens": counter.messages(history), "full_tokens": counter.messages(full),
                "n_messages": len(history), "n_messages_full": len(full),
                "system_prompt": history[0]["role"] == "system"}
        out.append({"id": f"long-tools/{rec.session}@{cut}", "source": "; ".join(s.cite() for s in sources),
                    "license": sources[0].license, "messages": history, "probes": probes(full, cut),
                    "tools": tools, "meta": meta})
    return out


def build(root: Path, families: tuple[Family, ...] = FAMILIES, per_family: int | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for family in families:
        env, tools, sources = family.load(Mirror(family.repo, root))
        for number in range(per_family or family.count):
            out += cases(family, record(family, env, number), tools, sources)
    return out


def write(rows: list[dict[str, Any]], path: Path) -> None:
    """Gzipped JSONL with mtime 0 and no file name in the header: byte-identical reruns."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        for row in rows:
            gz.write((json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=Path("bench/data/long_tools_dev.jsonl.gz"))
    parser.add_argument("--sources", type=Path, default=os.environ.get("CONTEXT_ENGINE_MIRRORS"),
                        required="CONTEXT_ENGINE_MIRRORS" not in os.environ,
                        help="folder of the bare mirrors (default: $CONTEXT_ENGINE_MIRRORS)")
    args = parser.parse_args(argv)
    rows = build(args.sources)
    write(rows, args.out)
    print(f"{len(rows)} cases, {len({r['meta']['task'] for r in rows})} sessions -> {args.out}")


if __name__ == "__main__":
    main()
