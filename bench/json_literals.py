"""Does ``tool_json`` keep every literal a next call can use? (issue 48, part 3)

For every JSON tool result of the given cases, every key and string value (as the agent
writes it in a call: the decoded string, raw or JSON-escaped) and every number (as its
source text wrote it) must still be findable in the request the rule sends. The rule
runs on each case's whole history with the configured options (repeats and line folds
refer to earlier results; the whole request is searched). What is not findable is
counted by cause: the result was clipped (``max_chars``), or the notation changed it.

``python -m context_engine.bench.json_literals long_tools agent_traces`` prints the
counts; the test suite runs the same check on the committed dev sessions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

from context_engine.bench import cases as cases_mod
from context_engine.proxy.engine.context import RequestContext
from context_engine.proxy.engine.contract import RuleDeps
from context_engine.proxy.engine.sessions import session_kind
from context_engine.proxy.engine.types import Messages
from context_engine.proxy.store.stores import MemoryStore
from context_engine.rules.identifiers import text_identifiers
from context_engine.rules.tool_json.compact import parse_container
from context_engine.rules.tool_json.rule import ToolJson, ToolJsonConfig

CLIP_MARK = "[tool_json: middle of "


def literals(text: str) -> list[str]:
    """Keys, string values and number texts of the JSON ``text`` (empty when not JSON)."""
    if parse_container(text) is None:
        return []
    found: list[str] = []

    def number(s: str) -> float:
        found.append(s)
        return 0.0

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        found.extend(k for k, _ in items)
        for _, v in items:
            if isinstance(v, str):
                found.append(v)
            else:
                strings(v)
        return {}

    def strings(value: Any) -> None:  # strings inside arrays (object values come via pairs)
        if isinstance(value, list):
            for v in value:
                if isinstance(v, str):
                    found.append(v)
                else:
                    strings(v)

    value = json.loads(text, parse_float=number, parse_int=number, object_pairs_hook=pairs)
    strings(value)
    return [s for s in found if s.strip()]


def findable(literal: str, text: str) -> bool:
    """``literal`` is in ``text`` as written raw or JSON-escaped (either way an agent reads
    and writes a value)."""
    if literal in text:
        return True
    return any(json.dumps(literal, ensure_ascii=a)[1:-1] in text for a in (True, False))


@dataclass
class Survival:
    literals: int = 0
    missing: Counter[str] = field(default_factory=Counter)
    examples: list[tuple[str, str, str]] = field(default_factory=list)  # (case, cause, literal)

    def add(self, case_id: str, cause: str, literal: str) -> None:
        self.missing[cause] += 1
        if len(self.examples) < 40:
            self.examples.append((case_id, cause, literal))


def check_case(messages: list[dict[str, Any]], config: ToolJsonConfig, case_id: str,
               survival: Survival) -> None:
    rule = ToolJson(config, RuleDeps(store=MemoryStore()))
    ctx = RequestContext(messages=cast("Messages", messages), model="gpt-4o", session_id=case_id,
                         kind=session_kind(messages))
    out = asyncio.run(rule.apply(ctx)).messages
    sent = "\n".join(_text(m) for m in out)
    for before, after in zip(messages, out, strict=True):
        if before.get("role") != "tool" or not isinstance(before.get("content"), str):
            continue
        clipped = CLIP_MARK in _text(after) and CLIP_MARK not in before["content"]
        found = literals(before["content"]) or text_identifiers(before["content"])
        for literal in found:
            survival.literals += 1
            if not findable(literal, sent):
                survival.add(case_id, "clipped" if clipped else "notation", literal)


def _text(m: Any) -> str:
    content = m.get("content")
    parts = [content] if isinstance(content, str) else []
    parts += [str((c.get("function") or {}).get("arguments", "")) for c in m.get("tool_calls") or ()]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m context_engine.bench.json_literals")
    parser.add_argument("files", nargs="+")
    parser.add_argument("--max-chars", type=int, default=None, help="tool_json.max_chars")
    args = parser.parse_args(argv)
    config = ToolJsonConfig() if args.max_chars is None else ToolJsonConfig(max_chars=args.max_chars)
    for name in args.files:
        survival = Survival()
        for case in cases_mod.load_cases(cases_mod.resolve_file(name), dedupe=True):
            check_case(case.messages, config, case.id, survival)
        lost = sum(survival.missing.values())
        print(f"{name}: {survival.literals} literals in JSON results, {lost} not findable "
              f"({lost / max(1, survival.literals):.2%}): {dict(survival.missing)}")
        for case_id, cause, literal in survival.examples[:12]:
            print(f"  {cause:9} {case_id}: {literal[:100]!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
