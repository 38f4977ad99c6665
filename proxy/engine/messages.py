"""What a conversation looks like to the engine and the rules: the text of a message,
units and blocks, the lines rules inject, and media references. One home for each."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from context_engine.proxy.engine.types import Message


def text_of(m: Message | dict[str, Any]) -> str:
    """The visible text of a message: string content or the text parts of a list."""
    content = m.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] if isinstance(p.get("text"), str) else ""
                         for p in content if isinstance(p, dict))
    return ""


def last_user_index(messages: list[Any]) -> int:
    """Index of the last ``user`` message, or -1."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return -1


INSTRUCTION_ROLES = ("system", "developer")  # Chat's two names for the client's instructions


def is_instruction(m: Any) -> bool:
    """Whether ``m`` is a system or developer prompt (the client's instructions)."""
    return isinstance(m, dict) and m.get("role") in INSTRUCTION_ROLES


def system_prefix_len(messages: list[Any]) -> int:
    """How many leading messages are system/developer prompts."""
    n = 0
    while n < len(messages) and is_instruction(messages[n]):
        n += 1
    return n


def calls_of(m: Message | dict[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """``(id, tool name, arguments as sent)`` of each tool call an assistant message makes."""
    for c in m.get("tool_calls") or ():
        if isinstance(c, dict):
            fn = c.get("function") or {}
            yield str(c.get("id", "")), str(fn.get("name", "")), fn.get("arguments")


def call_index(messages: Iterable[Any]) -> dict[str, tuple[str, Any]]:
    """The call index: tool_call id → (tool name, arguments); a later call wins."""
    return {cid: (name, args) for m in messages for cid, name, args in calls_of(m)}


def fingerprint(*parts: Any) -> str:
    """A short stable hash of JSON-able parts."""
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def made_of(text: str, phrases: frozenset[str], longest: int) -> bool:
    """True when ``text`` is one or more of ``phrases`` in a row, whitespace allowed after
    each ("ok thanks", "嗯嗯好的"). A word-break walk over positions: linear in the text
    times ``longest`` (the longest phrase), where a regex ``(?:a|aa)+`` backtracks
    exponentially."""
    n = len(text)
    if not n or text[0].isspace():
        return False
    reach = bytearray(n + 1)
    reach[0] = 1
    for i in range(n):
        if not reach[i]:
            continue
        for size in range(1, min(longest, n - i) + 1):
            if text[i:i + size] in phrases:
                j = i + size
                reach[j] = 1
                while j < n and text[j].isspace():
                    j += 1
                    reach[j] = 1
    return bool(reach[n])


# --- turns and blocks --------------------------------------------------------------
#
# A *unit* is the smallest piece of history a rule may drop, fold or summarize without
# breaking the request: a user message; an assistant message together with the tool
# results that answer its tool calls; any other single message. Units never split a
# tool-call/tool-result pair.
#
# Block alignment (shared by every rule whose decision depends on later turns): after
# the leading system prompts, units are grouped into blocks of ``block`` units counted
# from the start. A block is *closed* once all of its units are older than the recent
# window of ``window`` units, so the raw tail holds between ``window`` and
# ``window + block - 1`` units. Between two block boundaries a new request only appends
# to the raw tail; everything before it is byte-identical to the previous request's, and
# the provider's prompt cache keeps hitting.


def units(messages: list[Any], start: int = 0) -> list[tuple[int, int]]:
    """Half-open ``(begin, end)`` index spans of the units of ``messages[start:]``."""
    spans: list[tuple[int, int]] = []
    i, n = start, len(messages)
    while i < n:
        j = i + 1
        if messages[i].get("role") == "assistant" and messages[i].get("tool_calls"):
            while j < n and messages[j].get("role") == "tool":
                j += 1
        spans.append((i, j))
        i = j
    return spans


def closed_block_count(n_units: int, window: int, block: int) -> int:
    """How many whole blocks of ``block`` units lie before the recent ``window``."""
    if block <= 0:
        return 0
    return max(0, (n_units - window) // block)


def closed_prefix_end(messages: list[Any], window: int, block: int) -> int:
    """Message index where the closed blocks end and the raw tail begins."""
    head = system_prefix_len(messages)
    spans = units(messages, head)
    closed = closed_block_count(len(spans), window, block) * block
    return spans[closed - 1][1] if closed else head


# Messages that rules inject (summaries, retrieved memory) start with one of these header
# lines, so later rules (zones, budget) can recognise them without adding unknown keys
# to the message dicts, which strict providers would reject.
# A speaker label at the start of a turn ("Caroline: …", "Dr. Smith: …"), as transcripts
# and multi-party chats write them.
SPEAKER = re.compile(r"^([A-Z][\w.'-]{1,30}(?: [A-Z][\w.'-]{1,30})?):\s")
SUMMARY_HEADER = "[context-engine:summary]"
MEMORY_HEADER = "[context-engine:memory]"
REPEAT_REF = "[repeats the earlier "  # fold_duplicates: a user/assistant repeat names its first copy
# An injected message (a summary, retrieved memory) is a ``user`` message; when it meets
# another user message, this assistant line goes between them, so a rewrite never sends
# two user messages in a row that the client did not (strict chat templates reject that).
INJECTED_ACK = "Noted."


class ClientText(dict):  # type: ignore[type-arg]
    """A client's own message whose text opens like one the proxy injects (a user can type
    ``[context-engine:summary]``): the same JSON as the message, but no rule takes it for
    the proxy's. The engine marks them before the rules run (``mark_client_text``); a
    message a rule builds later is a plain dict, so only what the proxy wrote is its own."""


def mark_client_text(messages: list[Any]) -> list[Any]:
    """``messages`` with each user message that opens with a proxy header as ``ClientText``
    (the same list when none does: the common case costs one scan)."""
    def typed(m: Any) -> bool:
        return isinstance(m, dict) and m.get("role") == "user" and \
            text_of(m).lstrip().startswith((SUMMARY_HEADER, MEMORY_HEADER))

    if not any(typed(m) for m in messages):
        return messages
    return [ClientText(m) if typed(m) and not isinstance(m, ClientText) else m for m in messages]


def _proxy_user(m: Any) -> bool:
    return m.get("role") == "user" and not isinstance(m, ClientText)


def is_summary(m: Any) -> bool:
    """A summary ``summarize`` put in (a user message under its header); a tool result that
    happens to open with the header is the tool's own text, and a client's is the client's."""
    return _proxy_user(m) and text_of(m).startswith(SUMMARY_HEADER)


def is_memory(m: Any) -> bool:
    """A memory zone ``retrieve`` put in (never a client's look-alike)."""
    return _proxy_user(m) and text_of(m).startswith(MEMORY_HEADER)


def is_injected(m: Any) -> bool:
    return _proxy_user(m) and text_of(m).startswith((SUMMARY_HEADER, MEMORY_HEADER))


def is_injected_ack(messages: list[Any], i: int) -> bool:
    """Whether ``messages[i]`` is the line a rule put after (or before) an injected message."""
    m = messages[i]
    if m is None or m.get("role") != "assistant" or m.get("content") != INJECTED_ACK or len(m) != 2:
        return False
    return any(0 <= j < len(messages) and messages[j] is not None and is_injected(messages[j])
               for j in (i - 1, i + 1))


def separate_users(messages: list[Any], given: list[Any]) -> list[Any]:
    """``messages`` with ``INJECTED_ACK`` between two user messages that were not next to
    each other in ``given`` (the rule's input): an injected message, or turns that met
    because the ones between them left."""
    pairs = {(id(a), id(b)) for a, b in zip(given, given[1:])}
    out: list[Any] = []
    for m in messages:
        if out and m.get("role") == out[-1].get("role") == "user" and (id(out[-1]), id(m)) not in pairs:
            out.append({"role": "assistant", "content": INJECTED_ACK})
        out.append(m)
    return out


def keep_users_apart(messages: list[Any], out: list[Any]) -> int:
    """Put back (in ``out``, ``None`` = dropped) each dropped message of ``messages`` whose
    removal would join two user messages; how many were put back. Linear."""
    after: list[str | None] = [None] * (len(out) + 1)  # role of the next kept message
    for i in range(len(out) - 1, -1, -1):
        after[i] = out[i].get("role") if out[i] is not None else after[i + 1]
    before: str | None = None
    restored = 0
    for i in range(len(out)):
        if out[i] is None and messages[i].get("role") != "user" and before == after[i + 1] == "user":
            out[i] = messages[i]
            restored += 1
        if out[i] is not None:
            before = out[i].get("role")
    return restored


# --- media --------------------------------------------------------------------------------
#
# Images, audio and files are never silently lost: a rule keeps the message that holds
# them, or leaves a reference naming each one ("[image: https://… dropped]").


def media_refs(m: Any) -> list[str]:
    """``kind: key`` for each image, audio or file part of ``m``; the key is the URL or
    file id, or a hash of inline data."""
    content = m.get("content") if isinstance(m, dict) else None
    if not isinstance(content, list):
        return []
    refs = []
    for p in content:
        if not isinstance(p, dict) or p.get("type") in (None, "text", "opaque") \
                or isinstance(p.get("text"), str):
            continue  # text (any API's text part), or an opaque item (its own invariant)
        kind = str(p.get("type"))
        body = p.get(kind)
        named = body.get("url") or body.get("file_id") or body.get("filename") \
            if isinstance(body, dict) else body
        ref = named if isinstance(named, str) else json.dumps(body if body is not None else p,
                                                               sort_keys=True)
        if not isinstance(named, str) or ref.startswith("data:") or len(ref) > 200:
            ref = "sha256:" + hashlib.sha256(ref.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        refs.append(f"{kind.removeprefix('input_').removesuffix('_url')}: {ref}")
    return refs


def media_reference(ref: str) -> str:
    """The text that stands for a dropped media part."""
    return f"[{ref} dropped]"
