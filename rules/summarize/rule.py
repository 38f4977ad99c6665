"""summarize: turns older than the recent window become one structured summary per block.

What it does
    After the system prompt(s) and the task (the first user message, pinned), the
    history is cut into units (a user message; an
    assistant message with the tool results answering it; any other message) and the
    units into blocks of ``block`` units counted from the start. Every block wholly older
    than the last ``window`` units is *closed* and replaced by one ``user`` message that
    starts with ``[context-engine:summary]`` and lists six slots: confirmed_facts,
    preferences, decisions, pending_tasks, revocations, tool_results (tool, key
    arguments, outcome, and the id the original is stored under). Extraction is
    rule-based by default; with ``summary_model`` set, an LLM fills the text slots as
    JSON once per new block, and a failure or timeout falls back to the rules.
    A summary that meets a user message gets an assistant line ``Noted.`` between them
    (never two user messages in a row). A block holding a system/developer message or
    an image, audio or file part stays raw.

Why
    Clients resend the whole history on every call. A closed block's summary is stored
    under the hash of the block's content and never regenerated, and later blocks only
    append their own summary message, so between two block boundaries the rewritten
    request is the previous one plus the new turns: the provider's prompt cache keeps
    hitting. Extraction (or the LLM call) happens once per block; a request only hashes
    its blocks and reads their summaries from the store. Below ``min_tokens`` nothing is
    summarized: in a short session, re-sending the raw tail uncached at each block
    boundary costs more than the summaries save at cached prices.

Example
    [system, u1, a1, u2, a2, u3, a3, u4, a4, u5, a5, u6]  (window=6, block=4, min_tokens=0)
    → [system, "[context-engine:summary]\\nconfirmed_facts:\\n- …", u3, a3, …, u6]

Options
    min_tokens, window, block, max_ratio, min_chars, item_chars, summary_model,
    summary_api_base, summary_timeout, summary_max_calls (see ``SummarizeConfig``).

Risks
    Lossy: the raw wording of old turns is gone (``retrieve`` brings relevant turns
    back); rule-based extraction keeps sentences with entities, numbers, dates, ids and
    cue words, within ``max_ratio`` of the block, plus every pending task, revocation and
    tool call. The last user turn, system prompts and tool-call pairs are never
    summarized; a block holding a mid-conversation system message, or whose summary would
    not be smaller than the block, stays raw. Tool originals are stored under
    ``orig:<id>``, so nothing is lost from the store.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from context_engine.proxy.engine.context import RequestContext
from context_engine.proxy.engine.contract import RuleDeps, Summarizer, option
from context_engine.proxy.engine.messages import (
    INJECTED_ACK,
    SUMMARY_HEADER,
    closed_block_count,
    fingerprint,
    is_injected_ack,
    is_instruction,
    is_summary,
    last_user_index,
    media_refs,
    separate_users,
    system_prefix_len,
    text_of,
    units,
)
from context_engine.proxy.engine.originals import cites_original, keep_original
from context_engine.proxy.engine.sessions import AGENT, first_user_index, pinned_prefix_len
from context_engine.proxy.engine.tokens import REPLY_PRIMING, TokenCounter
from context_engine.rules.summarize.llm import LiteLLMSummarizer, transcript
from context_engine.rules.summarize.slots import Slots, extract_slots

VERSION = "summarize/1"
EMPTY = "(no facts, tasks or decisions)"
RAW = b""  # stored for a block that stays raw (its summary would not be smaller)


@dataclass(frozen=True)
class SummarizeConfig:
    min_tokens: int = option(8000, "summarize only requests of at least this many message "
                                   "tokens: below it, re-sending the raw tail uncached at each "
                                   "block boundary costs more than the summaries save")
    window: int = option(6, "recent units kept raw (a unit: a user message, or an assistant "
                            "message with its tool results); the raw tail holds window to "
                            "window+block-1 units")
    block: int = option(8, "units per summarized block; a block closes once it is wholly "
                           "older than the window, and its summary never changes")
    max_ratio: float = option(0.3, "rule-based summaries: facts, preferences and decisions fill "
                                   "at most this share of the block's characters (pending "
                                   "tasks, revocations and tool results are always kept)")
    min_chars: int = option(200, "rule-based summaries: the share above is at least this many "
                                 "characters")
    item_chars: int = option(200, "longest slot item, in characters")
    summary_model: str = option("", "litellm model name for LLM summaries; empty = "
                                    "rule-based only")
    summary_api_base: str = option("", "api_base for summary_model; empty = litellm's default")
    summary_timeout: float = option(20.0, "seconds per LLM summary call before falling back "
                                          "to the rule-based slots")
    summary_max_calls: int = option(4, "LLM calls per request at most (newest blocks first); "
                                       "other new blocks get rule-based summaries")

    def __post_init__(self) -> None:
        if self.window < 1 or self.block < 1:
            raise ValueError("window and block must be at least 1")


class Summarize:
    name = "summarize"
    Config = SummarizeConfig

    def __init__(self, config: SummarizeConfig, deps: RuleDeps) -> None:
        self.config = config
        self.store = deps.store
        summarizer = deps.summarizer
        if summarizer is None and config.summary_model:
            summarizer = LiteLLMSummarizer(config.summary_model, config.summary_api_base,
                                           config.summary_timeout, config.item_chars)
        self.summarizer: Summarizer | None = summarizer
        kind = summarizer.kind if summarizer is not None else "rules"
        self._salt = fingerprint(VERSION, kind, config.max_ratio, config.min_chars,
                                 config.item_chars)

    async def apply(self, ctx: RequestContext) -> RequestContext:
        if ctx.kind == AGENT:
            return ctx  # an agent works from its own steps: compact plans its session
        msgs = ctx.messages
        start, blocks = self._closed_blocks(msgs)
        if not blocks or not _at_least(TokenCounter(ctx.encoding), msgs, self.config.min_tokens):
            return ctx
        keys = [self._key(msgs[s:e], ctx.encoding) for s, e in blocks]
        found = {k: self.store.get(k) for k in keys}
        missing = [i for i, k in enumerate(keys) if found[k] is None]
        llm_used = 0
        if missing:
            fresh, llm_used = await self._summarize(msgs, blocks, keys, missing, ctx.encoding,
                                                    ctx.caller)
            found.update(fresh)
        out: list[Any] = list(msgs[:start])
        raw_blocks = 0
        for (s, e), k in zip(blocks, keys):
            value = found[k] or RAW
            raw_blocks += value == RAW
            out.extend(_block_output(msgs[s:e], value.decode()))
        out.extend(msgs[blocks[-1][1]:])
        out = separate_users(out, msgs)
        counter = TokenCounter(ctx.encoding)
        if counter.messages(out) > counter.messages(msgs):
            return ctx  # the lines between user messages cost more than the summaries saved
        note = {"blocks": len(blocks), "new_blocks": len(missing), "llm_blocks": llm_used,
                "raw_blocks": raw_blocks, "raw_from": blocks[-1][1]}
        return ctx.replace(messages=out).with_note(self.name, note)

    def _closed_blocks(self, msgs: list[Any]) -> tuple[int, list[tuple[int, int]]]:
        """Where this pass starts, and the closed blocks after it as message spans.

        A pass starts after the last summary message already present, so applying the rule
        to its own output changes nothing. No block may reach the last user turn.
        """
        last_user = last_user_index(msgs)
        start = pinned_prefix_len(msgs) if 0 <= first_user_index(msgs) < last_user \
            else system_prefix_len(msgs)  # the task stays
        for i in range(start, max(last_user, start)):
            if is_summary(msgs[i]) and isinstance(msgs[i].get("content"), str):
                start = i + 1  # a user message is a unit of its own
        if start < len(msgs) and is_injected_ack(msgs, start):
            start += 1
        spans = units(msgs, start)
        k = self.config.block
        n = closed_block_count(len(spans), self.config.window, k)
        while n and spans[n * k - 1][1] > last_user:
            n -= 1
        return start, [(spans[b * k][0], spans[b * k + k - 1][1]) for b in range(n)]

    def _key(self, block: list[Any], encoding: str) -> str:
        parts = [self._salt, encoding]
        for m in block:
            content, role = m.get("content"), m.get("role")
            if len(m) == 2 and isinstance(content, str) and isinstance(role, str):
                parts.append(role + "\x1f" + content)
            else:
                parts.append("\x1d" + json.dumps(m, sort_keys=True, ensure_ascii=False))
        return "sum:" + hashlib.sha256("\x1e".join(parts).encode()).hexdigest()[:32]

    async def _summarize(self, msgs: list[Any], blocks: list[tuple[int, int]],
                         keys: list[str], missing: list[int],
                         encoding: str, caller: str) -> tuple[dict[str, bytes], int]:
        """Summaries of the blocks not in the store yet; the first one stored wins. The
        blocks' tool results are kept for ``caller`` (a summary line cites them)."""
        llm: dict[int, Slots | None] = {}
        if self.summarizer is not None and self.config.summary_max_calls > 0:
            chosen = missing[-self.config.summary_max_calls:]
            replies = await asyncio.gather(*(
                self.summarizer.summarize(transcript(msgs[blocks[i][0]:blocks[i][1]]))
                for i in chosen))
            llm = dict(zip(chosen, replies))
        counter = TokenCounter(encoding)
        fresh: dict[str, bytes] = {}
        for i in missing:
            block = msgs[blocks[i][0]:blocks[i][1]]
            self._keep_originals(block, caller)
            value = self._summary_bytes(block, llm.get(i), counter)
            earlier = self.store.get(keys[i])  # a concurrent request may have stored one
            if earlier is None:
                self.store.set(keys[i], value)
            fresh[keys[i]] = value if earlier is None else earlier
        return fresh, sum(1 for s in llm.values() if s is not None)

    def _summary_bytes(self, block: list[Any], llm: Slots | None,
                       counter: TokenCounter) -> bytes:
        if any(is_instruction(m) or media_refs(m) for m in block):
            return RAW  # an instruction, or an image/audio/file: the block is kept as sent
        chars = sum(len(text_of(m)) for m in block)
        budget = max(self.config.min_chars, int(chars * self.config.max_ratio))
        slots = extract_slots(block, budget, self.config.item_chars)
        if llm is not None:
            slots = dataclasses.replace(llm, tool_results=slots.tool_results)
        content = SUMMARY_HEADER + "\n" + (slots.render() or EMPTY)
        summary_tokens = counter.message({"role": "user", "content": content}) + counter.message(
            {"role": "assistant", "content": INJECTED_ACK})  # the line that keeps users apart
        block_tokens = sum(counter.message(m) for m in block)
        return content.encode() if summary_tokens < block_tokens else RAW

    def _keep_originals(self, block: list[Any], caller: str) -> None:
        for m in block:
            content = m.get("content")
            if m.get("role") == "tool" and isinstance(content, str) and content:
                if not cites_original(content):  # a marker's original is stored already
                    keep_original(self.store, content, scope=caller)


def _at_least(counter: TokenCounter, msgs: list[Any], tokens: int) -> bool:
    """Whether ``counter.messages(msgs) >= tokens``; counting stops once it is."""
    total = REPLY_PRIMING
    for m in reversed(msgs):
        if total >= tokens:
            return True
        total += counter.message(m)
    return total >= tokens


def _block_output(block: list[Any], summary: str) -> list[Any]:
    """A closed block as sent: raw, or one summary message."""
    return [{"role": "user", "content": summary}] if summary else list(block)
