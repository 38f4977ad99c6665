"""The options of ``fold_duplicates`` (``context-engine rules`` lists them with their help)."""

from __future__ import annotations

from dataclasses import dataclass

from context_engine.proxy.engine.contract import option

TOOL_MATCHES = ("call", "output")


@dataclass(frozen=True)
class FoldDuplicatesConfig:
    recent_turns: int = option(3, "last units (a user message; an assistant message with its "
                                  "tool results) that no fold depending on later turns touches")
    block_turns: int = option(4, "units per block; acks and superseded changes are only folded "
                                 "in closed blocks (same K as summarize)")
    repeats_in_window: bool = option(True, "fold a repeated tool result or assistant message "
                                           "when it arrives (cache-safe); false: in closed blocks")
    tool_match: str = option("call", "call: a tool result repeats when tool name, arguments and "
                                     "output match; output: when the output matches")
    near_jaccard: float = option(0.0, "0 = off; else the word 3-shingle Jaccard from which a "
                                      "message that only leaves out words of an earlier one folds")
    near_lookback: int = option(20, "earlier messages of the same role compared for near repeats")
    min_saving: int = option(4, "fold a repeat only if the reference is this many tokens shorter")
    acks: bool = option(True, "drop filler acknowledgements (ok, thanks, 嗯, 好的…) in closed blocks")
    max_ack_chars: int = option(40, "longest message that can count as a filler acknowledgement")
    superseded: bool = option(True, "keep only the last of consecutive changes of the same "
                                    "setting (closed blocks only)")

    def __post_init__(self) -> None:
        if self.tool_match not in TOOL_MATCHES:
            raise ValueError(f"tool_match must be one of {', '.join(TOOL_MATCHES)}")
        if self.recent_turns < 0 or self.block_turns < 1 or self.near_lookback < 0:
            raise ValueError("recent_turns and near_lookback must be >= 0, block_turns >= 1")
