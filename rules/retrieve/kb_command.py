"""``context-engine kb``: build the knowledge base as the server would (``retrieve``'s
``knowledge_dir``), print each document's status, and optionally run a trial search."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING

from context_engine.proxy.config_values import rule_config
from context_engine.proxy.engine.contract import RuleDeps
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.proxy.store.stores import open_store
from context_engine.rules.retrieve.config import RetrieveConfig
from context_engine.rules.retrieve.embedders import make_embedder
from context_engine.rules.retrieve.knowledge_base import clauses, statuses
from context_engine.rules.retrieve.rule import Retrieve
from context_engine.rules.retrieve.search import render

if TYPE_CHECKING:  # the settings import the rules
    from context_engine.proxy.settings import Settings


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Build the knowledge base as the server would: each document's status, every clause
    embedded into the configured store, and optionally a trial search."""
    options = dict(settings.rule_options.get("retrieve", {}))
    options.update({k: v for k, v in (("knowledge_dir", args.dir), ("knowledge_date", args.date)) if v})
    config = rule_config("retrieve", RetrieveConfig, options)
    folder = config.knowledge_dir
    if not folder or not os.path.isdir(folder):
        print(f"context-engine kb: no knowledge folder {folder!r}: set "
              "rule_options.retrieve.knowledge_dir or pass --dir", file=sys.stderr)
        return 2
    embedder = make_embedder(config.embedder)
    store = open_store(settings.store, settings.store_ttl_days * 86400)
    start = time.perf_counter()
    rule = Retrieve(config, RuleDeps(store=store, embedder=embedder))
    seconds = time.perf_counter() - start
    kb, cache = rule.kb, rule.cache
    assert kb is not None
    status = statuses(kb.documents, kb.today)
    print(f"knowledge base {folder} on {kb.today.isoformat()}, embedder {embedder.name}")
    for doc in sorted(kb.documents, key=lambda d: d.path):
        n = f", {len(clauses(doc.content))} clauses" if status[doc.path] == "valid" else ""
        print(f"  {os.path.relpath(doc.path, folder)}: {status[doc.path]}{n}")
    for path, error in sorted(kb.errors.items()):
        print(f"  {os.path.relpath(path, folder)}: unreadable ({error})")
    valid = sum(v == "valid" for v in status.values())
    print(f"{len(kb.index.chunks)} clauses from {valid} of {len(status) + len(kb.errors)} documents "
          f"in {seconds:.2f} s ({cache.embedded} embedded now, the rest found in the store)")
    if args.query:
        hits = kb.search(args.query, cache.get, rule.params, TokenCounter(), config.max_snippet_tokens)
        print(render(hits) if hits else f"no clause scores {config.threshold} or more for {args.query!r}")
    close = getattr(store, "close", None)
    if close is not None:
        close()
    return 1 if kb.errors and args.strict else 0
