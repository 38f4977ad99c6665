"""Cross-validated tuning of ``retrieve`` on LoCoMo, split by conversation.

``python3 bench/crossval.py [--ablate] [--json OUT] [--note TEXT]`` (the JSON records the command,
date, load average at the start, minutes taken and the note)

Each conversation is held out in turn (leave-one-conversation-out: 7 folds on the dev
file). On the other conversations, a coordinate search starting from the configured
options picks ``retrieve``'s options: for each option in ``SPACE``, every listed value is
tried with the others fixed, and the best is kept (most cases whose evidence stays
visible, with a pooled reduction of at least ``--min-reduction``; ties go to the value
that turns a ranking part off, then to the higher reduction). The chosen options are
then measured on the held-out conversation, which took no part in choosing them. The
held-out figure pools the folds: every case is counted once, by options chosen without
its conversation.

``--ablate`` repeats the whole procedure with each ranking part fixed off (``PARTS``):
the held-out cases it loses are what the part is worth on conversations it was not tuned
on. Rows are memoised per option set (``bench/memory_eval.py``), so a rerun only
computes what changed. Run it alone on an idle machine (timings and CPU share matter).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from context_engine.bench.memory_eval import (
    DEFAULT_STORE,
    Evaluator,
    Row,
    category,
    load_locomo,
    score,
)
from context_engine.bench.run_record import about
from context_engine.rules.retrieve.config import RetrieveConfig

# Option → values the search tries. The first value of each ranking part is "off".
SPACE: dict[str, list[Any]] = {
    "max_snippet_tokens": [1600, 1800, 2000, 2200],
    "broad_budget": [0, 3500, 4000, 5000],
    "neighbours": [0, 1, 2],
    "name_blind": [False, True],
    "expansion": [0.0, 0.7],
    "date_boost": [0.0, 0.2],
    "context_chars": [0, 200],
    "speaker_weight": [1.0, 0.8],
    "bm25_weight": [0.4, 0.5],
}
# Ranking parts and the value that turns each off.
PARTS: dict[str, Any] = {
    "neighbours": 0, "name_blind": False, "expansion": 0.0, "date_boost": 0.0,
    "context_chars": 0, "speaker_weight": 1.0, "broad_budget": 0,
}
# LongMemEval (a user and an assistant; one history per question): the parts that act
# there, the user-and-assistant features among them. Names, speakers and the broad
# budget (a 115k-token history's zone is at its cap whatever the question) do not.
SPACE_LME: dict[str, list[Any]] = {
    "self_share": [0.0, 0.25],
    "self_gate": ["advice", "always"],
    "mark_updates": [False, True],
    "neighbours": [0, 1, 2],
    "context_chars": [0, 200],
    "date_boost": [0.0, 0.2],
    "bm25_weight": [0.4, 0.5],
}
PARTS_LME: dict[str, Any] = {
    "self_share": 0.0, "mark_updates": False, "neighbours": 0, "context_chars": 0, "date_boost": 0.0,
}


class Search:
    """Coordinate search over ``space`` on a subset of conversations."""

    def __init__(self, ev: Evaluator, start: dict[str, Any], min_reduction: float,
                 fixed: dict[str, Any], passes: int, space: dict[str, list[Any]],
                 parts: dict[str, Any]) -> None:
        self.ev, self.start, self.min_reduction = ev, start, min_reduction
        self.fixed, self.passes, self.space, self.parts = fixed, passes, space, parts
        self.folds: dict[str, str] = {}  # case → fold, when questions are dealt into folds

    async def rows(self, options: dict[str, Any]) -> list[Row]:
        return await self.ev.rows(_changed(options, self.start))

    def _rank(self, options: dict[str, Any], rows: list[Row]) -> tuple[Any, ...]:
        s = score(rows)
        ok = s.reduction >= self.min_reduction
        off = sum(options.get(k) == v for k, v in self.parts.items())
        return (ok, s.kept if ok else 0, off, round(s.reduction, 4))

    def group(self, row: Row) -> str:
        """The fold a row is held out with: its conversation, or with ``folds`` its
        question's fold (``fold_of``)."""
        return self.folds.get(row.case, row.conversation)

    async def choose(self, train: set[str]) -> dict[str, Any]:
        best = {**self.start, **self.fixed}
        for _ in range(self.passes):
            moved = False
            for option, values in self.space.items():
                if option in self.fixed:
                    continue
                ranked = []
                for value in values:
                    trial = {**best, option: value}
                    rows = [r for r in await self.rows(trial) if self.group(r) in train]
                    ranked.append((self._rank(trial, rows), value == best[option], value))
                top = max(ranked, key=lambda t: (t[0], t[1]))
                moved |= top[2] != best[option]
                best[option] = top[2]
            if not moved:
                break
        return best


def _changed(options: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """Only the options that differ from the configured ones (the memo's key)."""
    return {k: v for k, v in sorted(options.items()) if base.get(k) != v}


def fold_of(cases: list[Any], k: int) -> dict[str, str]:
    """Each case's fold of ``k``, dealt in turn within each category (sorted by category,
    then id): every fold holds each kind of question."""
    ordered = sorted(cases, key=lambda c: (category(c), c.id))
    return {c.id: f"fold{n % k}" for n, c in enumerate(ordered)}


async def crossval(ev: Evaluator, min_reduction: float, fixed: dict[str, Any],
                   passes: int, space: dict[str, list[Any]] | None = None,
                   parts: dict[str, Any] | None = None, folds: int = 0) -> dict[str, Any]:
    space, parts = space or SPACE, parts if parts is not None else PARTS
    base = {**dataclasses.asdict(RetrieveConfig()), **ev.settings({}).rule_options["retrieve"]}
    start = {k: base[k] for k in space}
    search = Search(ev, start, min_reduction, fixed, passes, space, parts)
    search.folds = fold_of(ev.cases, folds) if folds else {}
    conversations = sorted({search.group(r) for r in await search.rows(start)})
    held: list[Row] = []
    folds_out = []
    for conv in conversations:
        chosen = await search.choose(set(conversations) - {conv})
        rows = [r for r in await search.rows(chosen) if search.group(r) == conv]
        held += rows
        s = score(rows)
        folds_out.append({"held_out": conv, "options": _changed(chosen, start), "kept": s.kept,
                      "cases": s.cases, "reduction": round(s.reduction, 4)})
    s = score(held)
    return {"folds": folds_out, "kept": s.kept, "cases": s.cases, "evidence": round(s.evidence, 4),
            "reduction": round(s.reduction, 4), "by_category": s.by_category,
            "all_folds": _changed(await search.choose(set(conversations)), start)}


def _line(label: str, r: dict[str, Any]) -> str:
    cats = "  ".join(f"{c} {k}/{n}" for c, (k, n) in r["by_category"].items())
    return (f"{label:<28} {r['kept']:>3}/{r['cases']} {100 * r['evidence']:5.1f}%  "
            f"reduction {100 * r['reduction']:5.2f}%  {cats}")


def _write(path: str, out: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


async def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="locomo", help="LoCoMo JSONL file or its name in the data folder")
    ap.add_argument("--store", default=DEFAULT_STORE, help="embedding store and row memo directory")
    ap.add_argument("--config", default=None, help="config.yaml whose options the search starts from")
    ap.add_argument("--min-reduction", type=float, default=None,
                    help="pooled reduction the chosen options must reach on the training folds "
                         "(default: 0.885 for LoCoMo, 0.90 for LongMemEval: the issue's targets)")
    ap.add_argument("--passes", type=int, default=2, help="coordinate-search passes at most")
    ap.add_argument("--conversations", type=int, default=None, help="first N conversations only")
    ap.add_argument("--folds", type=int, default=None,
                    help="questions dealt into N folds by category (default: 5 for LongMemEval, whose "
                         "questions each have their own history; 0: one fold per conversation)")
    ap.add_argument("--ablate", action="store_true", help="also cross-validate with each part off")
    ap.add_argument("--ablate-passes", type=int, default=1, help="coordinate-search passes per ablation")
    ap.add_argument("--json", dest="json_out", default=None, help="write the results as JSON")
    ap.add_argument("--note", default="", help="a line on the conditions, kept in the JSON")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    run = about("python3 bench/crossval.py", sys.argv[1:] if argv is None else argv, args.note)
    ev = Evaluator(load_locomo(args.data, args.conversations), args.store, args.config)
    lme = any(c.meta.get("question_id") for c in ev.cases)
    space, parts = (SPACE_LME, PARTS_LME) if lme else (SPACE, PARTS)
    folds = args.folds if args.folds is not None else 5 if lme else 0
    if args.min_reduction is None:
        args.min_reduction = 0.90 if lme else 0.885
    configured = score(await ev.rows({}))
    out: dict[str, Any] = {"configured_in_sample": {
        "kept": configured.kept, "cases": configured.cases,
        "evidence": round(configured.evidence, 4), "reduction": round(configured.reduction, 4),
        "by_category": configured.by_category}}
    print(_line("configured (in sample)", out["configured_in_sample"]))
    out["crossval"] = await crossval(ev, args.min_reduction, {}, args.passes, space, parts, folds)
    for fold in out["crossval"]["folds"]:
        print(f"  held out {fold['held_out']:<8} {fold['kept']:>2}/{fold['cases']}  "
              f"reduction {100 * fold['reduction']:5.2f}%  chosen {json.dumps(fold['options'])}")
    print(_line("cross-validated (held out)", out["crossval"]))
    print(f"  chosen on all conversations: {json.dumps(out['crossval']['all_folds'])}")
    if args.ablate:
        out["ablations"] = {}
        for part, off in parts.items():
            r = await crossval(ev, args.min_reduction, {part: off}, args.ablate_passes, space, parts, folds)
            out["ablations"][part] = {k: r[k] for k in ("kept", "cases", "evidence", "reduction",
                                                         "by_category")}
            delta = r["kept"] - out["crossval"]["kept"]
            print(_line(f"without {part} ({delta:+d})", r), flush=True)
    minutes = (time.perf_counter() - started) / 60
    if args.json_out:
        _write(args.json_out, {**run, "minutes": round(minutes, 1), "min_reduction": args.min_reduction,
                               **out})
    print(f"{minutes:.1f} min", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
