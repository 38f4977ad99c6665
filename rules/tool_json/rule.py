"""tool_json: compress tool results; keep every original in the store under a short id.

## What it does

Rewrites the content of ``tool`` messages (the tool is the one whose call, in the
nearest earlier assistant message, has the result's ``tool_call_id``):

1. **Schema templates.** When a template names the tool (YAML in ``rules/tool_json/templates/``
   unless ``templates`` is off, plus ``template_paths``), only the fields it keeps are
   sent, with its aliases and per-field clipping, then a marker line
   ``[tool_json: template cut; original: orig:<id>]``.
2. **Lossless compaction** of every JSON object/array result (``rules/json_compact``):
   ``key:value`` lines and ``{key:value}`` inside, strings unquoted where unambiguous,
   null and empty fields dropped, arrays of objects as a title line plus CSV header and
   rows (nested keys flattened with dots), columns holding one value in every row
   factored into the title. No marker: no fact is lost.
3. **Learned templates** (``learned_templates``, off). In closed blocks only, a result
   keeps the fields whose values later turns used (assistant text or tool-call
   arguments), plus identifier-like strings (``learned_keep_ids``); the rest is cut,
   with a marker. Used paths are stored per tool as ``tool_json:learned:<tool>``.
   With ``stub_unused``, a closed-block result none of whose values a later turn used
   becomes ``[tool_json: unused <tool> result; original: orig:<id>]``.
4. **Restated records** (``diff_repeats``, on; ``rules/tool_json/repeats.py``). A JSON
   object result whose first field (``reservation_id: HATHAU``) matches that of an
   earlier object result shown in full goes out as the fields that differ from the
   latest one, after ``[changed fields of the result of tool call <id> above …]``.
   **Repeated lines** (``line_repeats``, on; ``rules/tool_json/line_repeats.py``). In a
   result as it goes out (text, or JSON after the steps above), a run of
   ``line_repeats_min_lines`` or more lines equal to a run of an earlier result as sent
   becomes ``[24 lines: lines 3-26 of the result of tool call <id> above]`` when that
   saves ``line_repeats_min_saving`` tokens. Both are decided when the result arrives,
   from earlier messages only (prefix stable), lose nothing while the result referred
   to is in the request, and are off while learned templates or stubs are on.
5. **Numbered lines** (``number_padding``, on; ``rules/tool_json/numbered.py``). A file
   view's line numbers lose the spaces that right-align them (``cat -n``, ``nl -ba``,
   Claude Code's Read: ``    62<tab>def f():`` → ``62<tab>def f():``), where at least 3
   lines are numbered so. Lossless: no marker.
6. **Oversized output.** Text (JSON after compaction, or logs and listings) longer than
   ``max_chars`` keeps whole lines of its head and tail around a marker; the result is
   then at most ``max_chars`` long, so a second pass leaves it alone.

Every rewritten original is stored under ``original_id(content)`` =
``orig:<first 12 hex of sha256>``, for the request's caller only; the note lists ``[tool_call_id, id]`` pairs. A result
is replaced only when the new text has strictly fewer tokens.

## Why

Tool output is about 38% of the message tokens of agent traces, and JSON spends much of
it on quotes, repeated keys and nulls: on the tau-bench airline traces the same facts
fit in about 60% of the tokens.

## Example

Before (``search_direct_flight``)::

    [{"flight_number": "HAT069", "origin": "JFK", "destination": "SEA", "status": "available",
      "prices": {"economy": 121, "business": 239}},
     {"flight_number": "HAT083", "origin": "JFK", "destination": "SEA", "status": "available",
      "prices": {"economy": 100, "business": 276}}]

After::

    (2 rows; all: origin=JFK, destination=SEA, status=available):
    flight_number,prices.economy,prices.business
    HAT069,121,239
    HAT083,100,276

## Options

``ToolJsonConfig`` below (``context-engine rules`` prints them with their help).

## Risks

Lossless compaction changes notation, not facts; a client that parses tool results as
JSON after the proxy would see another format (the model only reads them). Templates,
learned templates, stubs and head/tail cuts drop data the model may still need; the
marker's id lets it be fetched back from the store. Learned-template and stub decisions
read later turns, so they are taken only when a block closes and read a fixed span
(the rest of the block plus ``recent_turns`` units): a closed block's rewritten form
never changes afterwards, and prompt caching misses only at block boundaries.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from context_engine.proxy.engine.context import RequestContext
from context_engine.proxy.engine.contract import RuleDeps, option
from context_engine.proxy.engine.originals import keep_original, original_id
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.proxy.store.memo import BoundedCache
from context_engine.rules.text_parts import on_plain
from context_engine.rules.tool_json.clip import clip
from context_engine.rules.tool_json.compact import CompactOptions, compact, parse_container
from context_engine.rules.tool_json.line_repeats import LineRepeats
from context_engine.rules.tool_json.lookahead import later_texts, lookahead_ends, tool_names
from context_engine.rules.tool_json.numbered import unpad
from context_engine.rules.tool_json.repeats import Repeats
from context_engine.rules.tool_json.schema_templates import (
    Template,
    apply_template,
    keep_paths,
    learned_paths,
    load_templates,
    used_words,
)

BUILTIN_TEMPLATES = Path(__file__).parent / "templates"
LEARNED_PREFIX = "tool_json:learned:"


@dataclass(frozen=True)
class ToolJsonConfig:
    drop_empty: bool = option(True, "drop empty strings, arrays and objects from JSON objects "
                                    "(null fields are always dropped)")
    drop_defaults: bool = option(False, "also drop false and 0 fields (can lose facts)")
    tables: bool = option(True, "arrays of objects become one header line plus CSV rows")
    factor: bool = option(True, "a column with one value in every row moves to the table title")
    tight_keys: bool = option(True, "top-level fields as key:value lines (false: key: value)")
    templates: bool = option(False, "apply the schema templates shipped in rules/tool_json/templates/ "
                                    "(lossy: a session's first cut adds context_recall to its tools)")
    template_paths: tuple[str, ...] = option((), "more template YAML files or directories "
                                                 "(later ones win)")
    max_chars: int = option(16000, "results longer than this keep head and tail around a "
                                   "marker listing the cut middle's identifiers (0: never cut)")
    learned_templates: bool = option(False, "in closed blocks keep only the fields whose values "
                                            "later turns used")
    learned_keep_ids: bool = option(True, "learned templates always keep identifier-like strings "
                                          "(a digit, _ or @, no space, not a date/time)")
    stub_unused: bool = option(False, "in closed blocks, a result no later turn used becomes a "
                                      "one-line stub with its id")
    recent_turns: int = option(3, "units at the end never touched by learned templates/stubs")
    block_turns: int = option(4, "learned-template decisions are taken per block of this many "
                                 "units")
    diff_repeats: bool = option(True, "an object result whose first field matches an earlier one "
                                      "shown in full goes out as the fields that changed "
                                      "(off while learned templates or stubs are on)")
    line_repeats: bool = option(True, "a result's run of lines equal to a run of an earlier result "
                                      "goes out as a line naming that result and the range (off "
                                      "while learned templates or stubs are on)")
    line_repeats_min_lines: int = option(3, "shortest run of lines line_repeats folds")
    line_repeats_min_saving: int = option(8, "fold a run only if its reference is this many "
                                             "tokens shorter")
    number_padding: bool = option(True, "drop the spaces before the line numbers of a file view "
                                        "(cat -n, nl, Claude Code's Read: '    62<tab>' -> '62<tab>')")


class ToolJson:
    name = "tool_json"
    Config = ToolJsonConfig
    # the contract's ``Lossless``: notation only, no templates, stubs or clipping
    lossless = {"drop_defaults": False, "templates": False, "max_chars": 0,
                "learned_templates": False, "stub_unused": False}

    def __init__(self, config: ToolJsonConfig, deps: RuleDeps) -> None:
        self.config = config
        self.deps = deps
        paths = ([BUILTIN_TEMPLATES] if config.templates else []) + [
            Path(p) for p in config.template_paths]
        self.templates: dict[str, Template] = load_templates(paths)
        # clients resend their history: a result outside the lookahead (its rewrite reads
        # nothing but itself and the tool's name) is compacted once, then found by content
        self._done: BoundedCache[tuple[str, bytes], tuple[str, str] | None] = BoundedCache(
            4096, 32 * 1024 * 1024)
        self._objects: BoundedCache[bytes, Any] = BoundedCache(4096, 32 * 1024 * 1024)
        self._opts = CompactOptions(config.drop_empty, config.drop_defaults, config.tables,
                                    config.factor, tight_keys=config.tight_keys)

    async def apply(self, ctx: RequestContext) -> RequestContext:
        return await on_plain(ctx, self._apply)  # a result sent as one text part is read as its string

    async def _apply(self, ctx: RequestContext) -> RequestContext:
        messages = ctx.messages
        counter = TokenCounter(ctx.encoding)
        names = tool_names(messages)
        cfg = self.config
        lookahead = lookahead_ends(messages, cfg.block_turns, cfg.recent_turns) \
            if cfg.learned_templates or cfg.stub_unused else {}
        out = list(messages)
        kinds: dict[str, int] = {}
        originals: list[list[str]] = []  # [tool_call_id, store key] per rewritten result
        lossy_later = cfg.learned_templates or cfg.stub_unused  # they rewrite referents later
        repeats = Repeats(self._objects, self._opts) if cfg.diff_repeats and not lossy_later else None
        lines = LineRepeats(counter, cfg.line_repeats_min_lines, cfg.line_repeats_min_saving) \
            if cfg.line_repeats and not lossy_later else None
        for i, m in enumerate(messages):
            content = m.get("content")
            if m.get("role") != "tool" or not isinstance(content, str) or not content:
                continue
            later = later_texts(messages, i, lookahead[i]) if i in lookahead else None
            found = self._rewrite(content, names.get(i, "")) if later is None else \
                self._rewrite_fresh(content, names.get(i, ""), later)
            text, kind = found or (content, "lossless")
            call_id = str(m.get("tool_call_id", ""))
            if repeats is not None and kind == "lossless":
                text, kind = self._diff(repeats, counter, call_id, content, text)
            folded = lines.fold(text) if lines is not None else None
            if folded is not None:
                text, kind = folded, "lines"
            if text != content and counter.text(text) < counter.text(content):
                out[i] = {**m, "content": text}
                kinds[kind] = kinds.get(kind, 0) + 1
                originals.append([call_id, keep_original(self.deps.store, content, scope=ctx.caller)])
            if lines is not None:
                lines.shown(call_id, text if out[i] is not m else content)
        if not kinds:
            return ctx
        note: dict[str, Any] = dict(sorted(kinds.items()))
        note["originals"] = originals
        return ctx.replace(messages=out).with_note(self.name, note)

    # --- one result ------------------------------------------------------------------------

    def _diff(self, repeats: Repeats, counter: TokenCounter, call_id: str, content: str,
              text: str) -> tuple[str, str]:
        """A restated record as its changed fields, when shorter (``diff_repeats``)."""
        diff = repeats.diff(content)
        limit = self.config.max_chars
        if diff is not None and counter.text(diff) < counter.text(text) and \
                (limit <= 0 or len(diff) <= limit):
            return diff, "diff"
        repeats.shown(call_id, content)
        return text, "lossless"

    def _rewrite(self, text: str, tool: str) -> tuple[str, str] | None:
        """``_rewrite_fresh`` without lookahead, remembered by (tool, content)."""
        key = (tool, hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest())
        found = self._done.get(key, _MISSING)
        if found is _MISSING:
            found = self._rewrite_fresh(text, tool, None)
            self._done.put(key, found)
        return cast("tuple[str, str] | None", found)

    def _rewrite_fresh(self, text: str, tool: str, later: list[str] | None) -> tuple[str, str] | None:
        value = parse_container(text)
        if value is None:
            body = unpad(text) if self.config.number_padding else text
            clipped = self._clip(body, text)
            return None if clipped == text else (clipped, "clipped" if clipped != body else "numbers")
        kind, cuts = "lossless", []
        template = self.templates.get(tool)
        if template is not None:
            kept = apply_template(value, template)
            if kept != value:
                value, kind = kept, "template"
                cuts.append("template")
        if later is not None and (self.config.learned_templates or self.config.stub_unused):
            words, joined = used_words(later)
            used = learned_paths(value, words, joined)
            self._remember(tool, used)
            if not used and self.config.stub_unused:
                return self._marker(text, f"unused {tool or 'tool'} result"), "stub"
            paths = learned_paths(value, words, joined, self.config.learned_keep_ids)
            if paths and self.config.learned_templates:
                kept = keep_paths(value, paths)
                if kept != value:
                    value, kind = kept, "learned"
                    cuts.append("unused fields")
        opts = dataclasses.replace(self._opts, ascii_only=text.isascii())
        body = compact(value, opts) if value is not None else ""
        if cuts:
            body = (body + "\n" if body else "") + self._marker(text, " and ".join(cuts) + " cut")
        clipped = self._clip(body, text)
        return clipped, ("clipped" if clipped != body else kind)

    def _marker(self, original: str, what: str) -> str:
        return f"[tool_json: {what}; original: {original_id(original)}]"

    def _clip(self, body: str, original: str) -> str:
        """Head and tail of ``body`` around a marker, at most ``max_chars`` long in all."""
        limit = self.config.max_chars
        if limit <= 0 or len(body) <= limit:
            return body
        return clip(body, limit, lambda what: self._marker(original, what),
                    f"middle of {len(body)} chars cut")

    def _remember(self, tool: str, paths: list[tuple[str, ...]]) -> None:
        if not tool or not paths:
            return
        key = LEARNED_PREFIX + tool
        raw = self.deps.store.get(key)
        known = set(json.loads(raw)) if raw else set()
        merged = known | {".".join(p) for p in paths}
        if merged != known:
            self.deps.store.set(key, json.dumps(sorted(merged)).encode())


_MISSING: Any = object()
