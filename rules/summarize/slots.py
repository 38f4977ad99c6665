"""Rule-based slot extraction for ``summarize``: English and Chinese, no model call.

A block of old messages becomes six slots:

- ``confirmed_facts``: sentences that carry names, numbers, dates, ids, amounts;
- ``preferences``: likes, dislikes, "I prefer …", 喜欢/偏好 …;
- ``decisions``: commitments ("I'll …", "we decided …", 决定/已为您 …), reason included;
- ``pending_tasks``: requests from the user ("please …", "can you …", 请/帮我 …);
- ``revocations``: cancelled or undone actions ("cancel …", 取消/撤销 …);
- ``tool_results``: one line per tool call: tool, key arguments, outcome, original id.

Sentences are split on ``.!?`` / ``。！？；`` and newlines; small talk with no entity and
no cue word is dropped. The kept items fit a character budget, highest priority first
(tool results, revocations, pending tasks, decisions, preferences, facts by entity
count), and are rendered in their original order inside each slot.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields
from typing import Any

from context_engine.proxy.engine.messages import SPEAKER
from context_engine.proxy.engine.originals import cited_id

SLOTS = ("confirmed_facts", "preferences", "decisions", "pending_tasks", "revocations",
         "tool_results")

_SPLIT = re.compile(r"(?<=[^\d\s][.!?])\s+|(?<=[。！？；])|\n+")
# Strong entities (numbers, dates, ids, amounts, acronyms) count 2; capitalised words
# inside a sentence (names, places) count 1.
_STRONG = re.compile(
    r"\d+(?:[.,:/-]\d+)*|[$€£¥￥]|(?<![\w.+-])[\w.+-]+@[\w-]+\.\w|https?://|\b(?=\w+_\w)\w++"
    r"|\b[A-Z]{2,}\b"
    r"|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?\b"
    r"|\b(?:[Yy]esterday|[Tt]oday|[Tt]omorrow|[Tt]onight"
    r"|(?:[Ll]ast|[Nn]ext) (?:week|month|year|weekend))\b"
    r"|\b(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day\b"
    r"|(?<![零一二两三四五六七八九十百千万])[零一二两三四五六七八九十百千万]+[年月日号点岁元块次天周个位]"
    r"|昨天|今天|明天|上周|下周|星期|周[一二三四五六日]|[《“「][^《“「》”」\n]+[》”」]"
)
# Patterns that scan a run start only where the run starts (lookbehind), so each run is
# read once: "a.a.a…" or "一一一…" without an end cost linear time, not quadratic.
_NAME = re.compile(r"(?<=[a-z;:] )[A-Z][a-z]+(?: [A-Z][a-z]+)*")
_REVOKE = re.compile(
    r"\b(?:cancel(?:l?ed|s|ling)?|undo|undid|revert(?:ed)?|roll(?:ed)? back|never ?mind"
    r"|scratch that|call(?:ed)? off|withdr[ae]w|changed? (?:my|our) mind|no longer)\b"
    r"|取消|撤销|撤回|不要了|算了|改回|回滚|作废|退订|退掉", re.IGNORECASE)
_PENDING = re.compile(
    r"^(?:please|pls|can you|could you|would you|will you|i need|i'd like|i would like"
    r"|i want (?:you )?to|i'm looking to|i am looking to|i'm trying to|help me|make sure"
    r"|remember to|don't forget|let's)\b"
    r"|\b(?:please|todo|to-do|need you to|have to|must)\b"
    r"|请|帮忙|麻烦|需要你|记得|别忘|能不能|可以帮|能否|务必|待办|尽快",
    re.IGNORECASE)
# "帮我…" asks for something unless the sentence reports it done ("帮我订好了。"); tested
# on the sentence's end once, not by a lookahead that rereads the sentence per "帮我".
_DONE = re.compile(r"了[。！!]?$")
_DECISION = re.compile(
    r"\b(?:i will|i'll|we will|we'll|i'm going to|i am going to|we're going to|decided"
    r"|decide to|plan(?:ning)? to|agreed|going with|let's go with|i confirm|confirmed|go ahead"
    r"|booked|scheduled"
    r"|has been (?:booked|updated|changed|created|confirmed|cancelled)"
    r"|i've (?:booked|updated|changed|created|sent|scheduled|made))\b"
    r"|我会|我将|我们将|决定|打算|计划|已为您|已经为你|已确认|确认了|选择了|就用|定了",
    re.IGNORECASE)
_PREFER = re.compile(
    r"\bi (?:really )?(?:like|love|prefer|hate|dislike|enjoy|adore)\b|\bmy fav(?:ou)?rite"
    r"|\bi(?:'d| would) rather\b|\bi (?:don't|do not) like\b|\bfan of\b|\bprefer"
    r"|喜欢|偏好|更愿意|宁愿|讨厌|习惯|最爱|爱吃|口味", re.IGNORECASE)
MAX_ANALYSED_CHARS = 20_000  # per message: the work of slot extraction stops growing here
# Cue words, checked in this order; the first that matches names the slot.
_CUES = (("revocations", _REVOKE), ("pending_tasks", _PENDING), ("decisions", _DECISION),
         ("preferences", _PREFER))
# Tool results, revocations and pending tasks are always kept ("list more rather than
# fewer"); the other items compete for the budget by entity score, cue items first.
_ALWAYS = ("tool_results", "revocations", "pending_tasks")
_CUE_BONUS = 3


@dataclass(frozen=True)
class Slots:
    """The six summary slots; each a tuple of one-line items."""

    confirmed_facts: tuple[str, ...] = ()
    preferences: tuple[str, ...] = ()
    decisions: tuple[str, ...] = ()
    pending_tasks: tuple[str, ...] = ()
    revocations: tuple[str, ...] = ()
    tool_results: tuple[str, ...] = ()

    def render(self) -> str:
        """``slot:`` lines followed by ``- item`` lines; empty slots are left out."""
        lines: list[str] = []
        for f in fields(self):
            items = getattr(self, f.name)
            if items:
                lines.append(f.name + ":")
                lines.extend("- " + item for item in items)
        return "\n".join(lines)


@dataclass(frozen=True)
class _Item:
    priority: int
    order: int
    slot: str
    text: str


def clip(text: str, limit: int) -> str:
    """``text`` on one line, cut at a word boundary to at most ``limit`` characters."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut) + "…"


def extract_slots(messages: list[dict[str, Any]], max_chars: int, item_chars: int) -> Slots:
    """Slots for one block of messages, at most about ``max_chars`` characters of items."""
    results = {m.get("tool_call_id"): m for m in messages if m.get("role") == "tool"}
    items: list[_Item] = []
    for m in messages:
        role = str(m.get("role", ""))
        if role in ("user", "assistant"):
            items.extend(_sentence_items(role, _text(m), len(items), item_chars))
        for call in m.get("tool_calls") or ():
            result = results.get(call.get("id"))
            line = tool_line(call, _text(result) if result else None, item_chars)
            items.append(_Item(0, len(items), "tool_results", line))
    return _select(items, max_chars)


def _text(m: dict[str, Any]) -> str:
    content = m.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") if isinstance(p, dict) and "text" in p else "[image]"
                         for p in content)
    return ""


def _sentence_items(role: str, text: str, start: int, item_chars: int) -> list[_Item]:
    """Kept sentences of one message, each prefixed with its speaker (a ``Name:`` label
    opening the message, as in transcripts) or else its role. Only the first
    ``MAX_ANALYSED_CHARS`` are read: beyond them a message is opaque to the summary."""
    lines = text[:MAX_ANALYSED_CHARS].split("\n")
    first = next((i for i, ln in enumerate(lines) if ln.strip() and not ln.startswith("[")), 0)
    label = SPEAKER.match(lines[first].lstrip()) if lines else None
    who = label.group(1) if label else role
    if label:
        lines[first] = lines[first].lstrip()[label.end():].lstrip()
    out: list[_Item] = []
    for raw in _SPLIT.split("\n".join(lines)):
        sentence = raw.strip()
        if not sentence:
            continue
        slot, priority = _classify(role, sentence)
        if priority <= 0:
            continue
        text_ = sentence if sentence.startswith("[") else f"{who}: {sentence}"
        out.append(_Item(priority, start + len(out), slot, clip(text_, item_chars)))
    return out


def _classify(role: str, sentence: str) -> tuple[str, int]:
    """The slot of one sentence and its rank; rank 0 = not worth keeping."""
    score = 2 * len(_STRONG.findall(sentence)) + len(_NAME.findall(sentence))
    if len(sentence.split()) < 6 and not re.search(r"[\u4e00-\u9fff]", sentence):
        score //= 2
    for slot, pattern in _CUES:
        if slot == "pending_tasks" and role != "user":
            continue
        if pattern.search(sentence) or (slot == "pending_tasks" and _help_me(sentence)):
            return slot, score + _CUE_BONUS
    return "confirmed_facts", score


def _help_me(sentence: str) -> bool:
    return "帮我" in sentence and not _DONE.search(sentence)


def _select(items: list[_Item], max_chars: int) -> Slots:
    """Always-kept items, and the best-ranked others within ``max_chars``; in original order."""
    ranked = sorted(items, key=lambda it: (it.slot not in _ALWAYS, -it.priority, it.order))
    kept: list[_Item] = []
    seen: set[str] = set()
    used = 0
    for it in ranked:
        key = it.text.lower()
        if key in seen:
            continue
        budgeted = it.slot not in _ALWAYS
        if budgeted and used + len(it.text) > max_chars:
            continue
        seen.add(key)
        kept.append(it)
        used += len(it.text) if budgeted else 0
    by_slot: dict[str, list[str]] = {s: [] for s in SLOTS}
    for it in sorted(kept, key=lambda it: it.order):
        by_slot[it.slot].append(it.text)
    return Slots(**{s: tuple(v) for s, v in by_slot.items()})


def tool_line(call: dict[str, Any], result: str | None, item_chars: int) -> str:
    """``tool(key=value, …) → outcome [orig:id]`` for one tool call and its output."""
    fn = call.get("function") or {}
    name = str(fn.get("name") or "tool")
    args = _args_text(str(fn.get("arguments") or ""))
    if result is None:
        return clip(f"{name}({args}) → (no result)", item_chars)
    outcome = clip(_outcome(result), max(40, item_chars - len(name) - len(args) - 30))
    ids = [i for i in _ids_in(result) if i not in outcome]
    more = "; ids: " + clip(", ".join(ids), 2 * item_chars) if ids else ""
    ref = f" [{cited_id(result)}]" if len(result) > item_chars else ""
    return f"{clip(f'{name}({args})', item_chars // 2)} → {outcome}{more}{ref}"


_ID = re.compile(r"^(?=[^\s]*\d)(?=[^\s]*[A-Za-z_@])[\w@.:/+-]{4,48}$")


def _ids_in(result: str) -> list[str]:
    """Id-like keys and values (letters and digits: HAT069, credit_card_4421486) of a JSON
    tool output, in document order, each once; none for non-JSON output."""
    try:
        parsed = json.loads(result)
    except (ValueError, RecursionError):
        return []
    found: dict[str, None] = {}
    stack = [parsed]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key in node:
                if _ID.match(key):
                    found.setdefault(key)
            stack.extend(reversed(list(node.values())))
        elif isinstance(node, list):
            stack.extend(reversed(node))
        elif isinstance(node, str) and _ID.match(node):
            found.setdefault(node)
    return list(found)


def _args_text(arguments: str) -> str:
    try:
        parsed = json.loads(arguments) if arguments else {}
    except (ValueError, RecursionError):
        return clip(arguments, 60)
    if not isinstance(parsed, dict):
        return clip(json.dumps(parsed, ensure_ascii=False), 60)
    pairs = [f"{k}={_scalar(v)}" for k, v in parsed.items() if not isinstance(v, (dict, list))]
    nested = [k for k, v in parsed.items() if isinstance(v, (dict, list))]
    return ", ".join(pairs[:4] + [f"{k}=…" for k in nested[:2]])


def _scalar(v: Any) -> str:
    return clip(v if isinstance(v, str) else json.dumps(v), 40)


_KEY_HINTS = ("error", "status", "id", "name", "total", "amount", "price", "message", "result")


def _outcome(result: str, nested: bool = False) -> str:
    """The gist of a tool output: first line, or telling fields (one list level deep)."""
    text = result.strip()
    if not text:
        return "(empty)"
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return next((ln for ln in text.splitlines() if ln.strip()), text)
    if isinstance(parsed, list):
        first = parsed[0] if parsed else None
        if isinstance(first, (dict, list)) and not nested:
            return f"{len(parsed)} items: {_outcome(json.dumps(first), nested=True)}"
        shown = json.dumps(first) if isinstance(first, (dict, list)) else str(first)
        return f"{len(parsed)} items" + (f": {shown}" if parsed else "")
    if not isinstance(parsed, dict):
        return str(parsed)
    scalars = [(k, v) for k, v in parsed.items() if not isinstance(v, (dict, list))]
    hinted = [kv for kv in scalars if any(h in kv[0].lower() for h in _KEY_HINTS)]
    chosen = (hinted + [kv for kv in scalars if kv not in hinted])[:4]
    deeper = [k for k, v in parsed.items() if isinstance(v, (dict, list))][:4 - len(chosen)]
    parts = [f"{k}={_scalar(v)}" for k, v in chosen] + [f"{k}=…" for k in deeper]
    others = len(parsed) - len(parts)
    return ", ".join(parts) + (f" (+{others} fields)" if others > 0 else "") or "{}"
