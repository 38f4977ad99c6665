"""The optional LLM summarizer for ``summarize``: fills the slots as JSON through litellm.

``summarize`` calls it only when a block closes (a block's summary is cached forever
after), so at most once per block. Its output is validated (a JSON object whose slot
values are lists of short strings); anything else, an exception or a timeout gives
``None`` and the caller falls back to the rule-based slots. litellm is imported lazily,
offline (bundled cost map), because importing it takes seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import Any

from context_engine.rules.summarize.slots import SLOTS, Slots, clip

TEXT_SLOTS = tuple(s for s in SLOTS if s != "tool_results")

PROMPT = (
    "You condense old turns of a conversation into an AI agent's memory. Reply with one "
    "JSON object and nothing else. Keys, each a list of short strings: "
    "confirmed_facts (names, numbers, dates, ids, amounts the user gave or confirmed; copy "
    "them exactly), preferences, decisions (commitments made, with the reason if stated), "
    "pending_tasks (asked and not yet done; list more rather than fewer), revocations "
    "(actions undone or cancelled, and the state before). Use [] for an empty slot."
)


def transcript(messages: list[dict[str, Any]], result_chars: int = 1500) -> str:
    """The block as plain lines for the model: ``role: text``, tool calls and results."""
    lines: list[str] = []
    for m in messages:
        role = str(m.get("role", ""))
        content = m.get("content")
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        if role == "tool":
            lines.append(f"tool result: {clip(text, result_chars)}")
            continue
        if content:
            lines.append(f"{role}: {text}")
        for call in m.get("tool_calls") or ():
            fn = call.get("function") or {}
            lines.append(f"{role} calls {fn.get('name')}({fn.get('arguments')})")
    return "\n".join(lines)


def parse_slots(text: str, max_items: int = 12, item_chars: int = 200) -> Slots | None:
    """Validated slots from the model's reply, or ``None`` if it is not slot JSON."""
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`")
        body = body[body.find("{"):] if "{" in body else body
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not any(k in data for k in TEXT_SLOTS):
        return None
    values: dict[str, tuple[str, ...]] = {}
    for slot in TEXT_SLOTS:
        raw = data.get(slot, [])
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list):
            return None
        items = [x if isinstance(x, str) else json.dumps(x, ensure_ascii=False) for x in raw]
        values[slot] = tuple(clip(x, item_chars) for x in items if x.strip())[:max_items]
    return Slots(**values)


@dataclass(frozen=True)
class LiteLLMSummarizer:
    """Calls ``model`` through litellm (``api_base`` optional) within ``timeout`` seconds."""

    model: str
    api_base: str = ""
    timeout: float = 20.0
    item_chars: int = 200

    @property
    def kind(self) -> str:
        return "llm:" + self.model

    async def summarize(self, transcript: str) -> Slots | None:
        try:
            reply = await asyncio.wait_for(self._complete(transcript), self.timeout)
        except Exception:
            return None
        return parse_slots(reply, item_chars=self.item_chars) if reply else None

    async def _complete(self, transcript: str) -> str:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
        import litellm  # lazily: importing litellm takes seconds

        kwargs: dict[str, Any] = {"api_base": self.api_base} if self.api_base else {}
        response = await litellm.acompletion(
            model=self.model,
            messages=[{"role": "system", "content": PROMPT},
                      {"role": "user", "content": transcript}],
            temperature=0,
            timeout=self.timeout,
            num_retries=0,
            **kwargs,
        )
        content = response.choices[0].message.content
        return content if isinstance(content, str) else ""
