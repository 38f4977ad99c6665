"""Rules read a content of one text part as the string it holds, on every API.

A message's content is a string or a list of parts. The Messages and Responses adapters
hand a list of exactly one text part to the rules as its string (``plain_text`` in
``proxy/dialects/base.py``); a Chat Completions body *is* the neutral form, so a chat
client that sends ``[{"type": "text", "text": ...}]`` (SDKs and agent frameworks do, for
tool results too) reached the rules as a list, and the rules that rewrite strings
(``tool_json``, ``fold_duplicates``, ``compact``) passed it by. The same conversation
then lost fewer tokens on Chat Completions than on the other two APIs.

``PlainView.of`` gives a rule such a message as a copy whose content is the string, and
``PlainView.back`` puts every message the rule returns back in the client's form: an
untouched copy becomes the client's own message object again; a changed one gets its
new text in the same one part. Only a part with no key besides ``type`` and ``text``
qualifies (a ``cache_control`` mark, an image, several parts: the list stays a list), as
in ``plain_text``. One view serves one request: a message shared by two lists (a rule's
``ctx.messages`` and ``ctx.original``) maps to one copy, so identity checks still hold.
``on_plain`` runs a rule's pass so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from context_engine.proxy.engine.context import RequestContext
from context_engine.proxy.engine.prefix import turn_key

KINDS = ("text", "input_text", "output_text")  # the text part types of the three APIs
TAG = "_ce_part"  # on a copy: the type of the one text part its content came from


def one_text_part(content: Any) -> str | None:
    """The text of ``content`` when it is a list of exactly one plain text part, else None."""
    if not isinstance(content, list) or len(content) != 1:
        return None
    part = content[0]
    if isinstance(part, dict) and len(part) == 2 and part.get("type") in KINDS \
            and isinstance(part.get("text"), str):
        return str(part["text"])
    return None


class PlainView:
    """The messages of one request as the rules read them, and back (see the module)."""

    def __init__(self) -> None:
        self._copies: dict[int, dict[str, Any]] = {}  # id(client's message) -> its copy
        self._origin: dict[int, dict[str, Any]] = {}  # id(copy) -> the client's message

    @property
    def active(self) -> bool:
        """Whether any message was read as a string (else the rule can run on the client's)."""
        return bool(self._copies)

    def of(self, messages: list[Any]) -> list[Any]:
        """``messages`` with each one-text-part content as its string (others as they are)."""
        return [self._one(m) for m in messages]

    def _one(self, m: Any) -> Any:
        if not isinstance(m, dict):
            return m
        copy = self._copies.get(id(m))
        if copy is not None:
            return copy
        text = one_text_part(m.get("content"))
        if text is None:
            return m
        copy = {**m, "content": text, TAG: m["content"][0]["type"]}
        self._copies[id(m)] = copy
        self._origin[id(copy)] = m  # both stay referenced by these maps: ids stay unique
        return copy

    def back(self, messages: list[Any]) -> list[Any]:
        """A rule's output in the client's form (``TAG`` never leaves the rule)."""
        if not self.active:
            return messages
        return [self._back(m) for m in messages]

    def _back(self, m: Any) -> Any:
        if not isinstance(m, dict) or TAG not in m:
            return m
        origin = self._origin.get(id(m))
        if origin is not None:
            return origin
        out = {k: v for k, v in m.items() if k != TAG}
        if isinstance(out.get("content"), str):
            out["content"] = [{"type": m[TAG], "text": out["content"]}]
        return out


async def on_plain(ctx: RequestContext,
                   apply: Callable[[RequestContext], Awaitable[RequestContext]]) -> RequestContext:
    """``apply`` (a rule's pass) run on ``ctx`` with its messages and original viewed plain;
    its result in the client's form, ``ctx.original`` the client's own list again."""
    view = PlainView()
    original = None if ctx.original is None else view.of(list(ctx.original))
    seen = ctx.replace(messages=view.of(list(ctx.messages)), original=original)
    if not view.active:
        return await apply(ctx)
    done = await apply(seen)
    if done is seen:
        return ctx
    # the same list: the pass left every message alone (``PipelineResult.changed`` is identity)
    messages = ctx.messages if done.messages is seen.messages else view.back(list(done.messages))
    end = done.stable_end
    if end is not None and end is not seen.stable_end and end[0] is not None:
        end = (end[0], turn_key(messages[end[0]]))  # the turn as it goes out
    return done.replace(messages=messages, original=ctx.original, stable_end=end)
