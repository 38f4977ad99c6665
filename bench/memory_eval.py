"""Long memory over LoCoMo, case by case: what ``bench/crossval.py`` and
``bench/budget_curve.py`` measure for one set of ``retrieve`` options.

Each case (one question at the end of a whole conversation) goes through the project's
pipeline (``EngineSystem`` of bench/systems.py: the configured rules, ``retrieve`` with the
given options) and gives one row: its conversation, category,
whether every evidence substring stayed visible, and request tokens before and after.

The store is a directory (diskcache) shared by every run. With the default ``ranking:
request`` every request ranks as a cold one does (the static table over the session's
chunks), so each case is what a cold request through the server gives; with ``ranking:
stored`` each turn is embedded once, ever, and every search is the full hybrid one
(``max_embed: 0``: the state a server reaches once its background has embedded a
session's dropped turns). The cases
of one conversation go through one session, in file order: they share the history, so
its index is built once (a request's output depends only on it and the store). Rows are
cached in ``<store>/rows.json`` under the options and a hash of ``rules/``'s sources, so
a run only computes what changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from context_engine.bench import cases as cases_mod
from context_engine.bench.cases import Case
from context_engine.bench.metrics import probe_retained, visible_text
from context_engine.bench.systems import EngineSystem, engine_settings
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.proxy.settings import Settings, build_rule_config
from context_engine.proxy.store.stores import DiskStore

DEFAULT_STORE = ".context-engine/memory-eval"
CATEGORIES = ("multi-hop", "open-domain", "single-hop", "temporal")


@dataclass(frozen=True)
class Row:
    """One case under one set of options."""

    case: str
    conversation: str
    category: str
    kept: bool
    before: int  # request tokens sent by the client
    after: int  # request tokens after the rules


def load_locomo(path: str | None = None, conversations: int | None = None) -> list[Case]:
    """The cases with evidence of a memory file (LoCoMo by default; LongMemEval too),
    optionally of the first ``conversations`` only."""
    cases = [c for c in cases_mod.load_cases(cases_mod.resolve_file(path or "locomo"))
             if any(p.evidence for p in c.probes)]
    if conversations is not None:
        keep = sorted({conversation(c) for c in cases})[:conversations]
        cases = [c for c in cases if conversation(c) in keep]
    return cases


def conversation(case: Case) -> str:
    """The history a case asks about: a LoCoMo conversation (several questions each), a
    LongMemEval question (its own history)."""
    if case.meta.get("question_id"):
        return str(case.meta["question_id"])
    return str(case.meta.get("sample_id") or case.id.rsplit("/", 1)[0])


def category(case: Case) -> str:
    return str(case.meta.get("category_name") or case.meta.get("question_type") or "")


def _sources_hash() -> str:
    root = Path(__file__).resolve().parent.parent / "rules"
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


class Evaluator:
    """Runs option sets over cases, remembering rows by (options, sources)."""

    def __init__(self, cases: list[Case], store_dir: str = DEFAULT_STORE,
                 config: str | None = None) -> None:
        self.cases = cases
        self.base = engine_settings(None, config)
        Path(store_dir).mkdir(parents=True, exist_ok=True)
        self.store = DiskStore(str(Path(store_dir) / "store"))
        self.embedder: Any = None  # one embedder for every option set
        self.counter = TokenCounter("o200k_base")
        self.rows_path = Path(store_dir) / "rows.json"
        self.memo: dict[str, dict[str, list[Any]]] = (
            json.loads(self.rows_path.read_text()) if self.rows_path.exists() else {})
        self.sources = _sources_hash()
        self._before: dict[str, int] = {}

    def settings(self, options: dict[str, Any]) -> Settings:
        """The configured settings with ``options`` changed in ``retrieve`` (checked)."""
        rule_options = {k: dict(v) for k, v in self.base.rule_options.items()}
        retrieve = {**rule_options.get("retrieve", {}), "max_embed": 0, **options}
        build_rule_config("retrieve", retrieve)
        rule_options["retrieve"] = retrieve
        return dataclasses.replace(self.base, rule_options=rule_options)

    def _key(self, options: dict[str, Any]) -> str:
        return self.sources + ":" + json.dumps(options, sort_keys=True)

    def session_id(self, options: dict[str, Any], conv: str) -> str:
        """One session per option set and conversation: every option set shares the store
        (its vectors), and under one session id a later set would read the zones the first
        one committed instead of building its own."""
        digest = hashlib.sha256(self._key(options).encode()).hexdigest()[:12]
        return f"eval:{digest}:{conv}"

    async def rows(self, options: dict[str, Any]) -> list[Row]:
        """One row per case for ``options`` (from the memo where already measured)."""
        key = self._key(options)
        done = self.memo.setdefault(key, {})
        todo = [c for c in self.cases if c.id not in done]
        if todo:
            system = EngineSystem("engine", self.settings(options), store=self.store,
                                  embedder=self.embedder)
            self.embedder = system.shared_embedder()
            sessions: dict[str, Any] = {}
            for case in todo:  # a conversation's cases share its history: one session each
                conv = conversation(case)
                session = sessions.get(conv) or sessions.setdefault(
                    conv, system.open(self.session_id(options, conv)))
                out = await session.rewrite(case.messages, case.tools)
                text = visible_text(out.messages)
                kept = all(probe_retained(p.evidence, text) for p in case.probes if p.evidence)
                done[case.id] = [kept, self._tokens(case),
                                 self.counter.request(out.messages, case.tools)]
            self.rows_path.write_text(json.dumps(self.memo, sort_keys=True))
        return [Row(c.id, conversation(c), category(c),
                    bool(done[c.id][0]), int(done[c.id][1]), int(done[c.id][2]))
                for c in self.cases]

    def _tokens(self, case: Case) -> int:
        if case.id not in self._before:
            self._before[case.id] = self.counter.request(case.messages, case.tools)
        return self._before[case.id]


@dataclass(frozen=True)
class Score:
    """Evidence and reduction over a set of rows."""

    kept: int
    cases: int
    reduction: float  # 1 - tokens after / tokens before, over all rows
    by_category: dict[str, tuple[int, int]]

    @property
    def evidence(self) -> float:
        return self.kept / self.cases if self.cases else 0.0


def score(rows: list[Row]) -> Score:
    before = sum(r.before for r in rows)
    after = sum(r.after for r in rows)
    cats: dict[str, tuple[int, int]] = {}
    for r in rows:
        k, n = cats.get(r.category, (0, 0))
        cats[r.category] = (k + r.kept, n + 1)
    return Score(sum(r.kept for r in rows), len(rows),
                 1 - after / before if before else 0.0, dict(sorted(cats.items())))
