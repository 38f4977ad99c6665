"""The rule registry: names to classes, listed in the recommended run order.

The run order is the ``rules:`` mapping in config.yaml. No import-time
self-registration: a rule exists when it is listed here.
"""

from __future__ import annotations

from typing import Any

from context_engine.proxy.engine.contract import Rule
from context_engine.rules.budget import Budget
from context_engine.rules.compact import Compact
from context_engine.rules.fold_duplicates.rule import FoldDuplicates
from context_engine.rules.retrieve.rule import Retrieve
from context_engine.rules.summarize.rule import Summarize
from context_engine.rules.tool_json.rule import ToolJson
from context_engine.rules.zones.rule import Zones

REGISTRY: dict[str, type[Rule]] = {
    "compact": Compact,
    "fold_duplicates": FoldDuplicates,
    "tool_json": ToolJson,
    "summarize": Summarize,
    "retrieve": Retrieve,
    "zones": Zones,
    "budget": Budget,
}

# The rules enabled when neither config.yaml, CONTEXT_ENGINE_RULES nor --rules names any,
# in run order.
# summarize is off by default: with retrieve on, its summaries cost more tokens than they
# keep facts (LoCoMo dev: 62% evidence at 90% reduction without it, 25% at 66% with it).
# zones is off by default: its fences and system line only add tokens, and on short
# requests that nothing else shortens they raise the bill (injections dev, replay with
# cache reads at 0.1x: 1.067x the cost of no rewrite). Turn it on where tool results or
# documents may carry injected instructions.
DEFAULT_RULES: tuple[str, ...] = ("compact", "fold_duplicates", "tool_json", "retrieve", "budget")


def run_kb(args: Any, settings: Any) -> int:
    """``context-engine kb``: the knowledge base is ``retrieve``'s (rules/retrieve/kb_command.py)."""
    from context_engine.rules.retrieve.kb_command import run

    return run(args, settings)
