"""Helpers for rule tests: build a context, run one rule with options, check invariants."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from context_engine.proxy.engine.context import RequestContext
from context_engine.proxy.engine.contract import RuleDeps
from context_engine.proxy.engine.invariants import rewrite_problems
from context_engine.proxy.engine.sessions import session_kind
from context_engine.proxy.store.stores import MemoryStore


def make_ctx(messages: list[Any], **kw: Any) -> RequestContext:
    kw.setdefault("model", "gpt-4o")
    kw.setdefault("session_id", "test-session")
    kw.setdefault("kind", session_kind(messages))
    return RequestContext(messages=messages, **kw)


def make_deps(**kw: Any) -> RuleDeps:
    kw.setdefault("store", MemoryStore())
    return RuleDeps(**kw)


def run_rule(cls: type[Any], messages: list[Any], deps: RuleDeps | None = None,
             ctx_kw: dict[str, Any] | None = None, **options: Any) -> RequestContext:
    """Apply one rule with ``options`` and return the resulting context.

    The input messages are checked to be left unmutated.
    """
    frozen = json.dumps(messages, sort_keys=True)
    rule = cls(cls.Config(**options), deps or make_deps())
    out = asyncio.run(rule.apply(make_ctx(messages, **(ctx_kw or {}))))
    assert json.dumps(messages, sort_keys=True) == frozen, "the rule mutated its input"
    return out


def content(m: Any) -> str:
    """A message's content, checked to be a plain string."""
    assert isinstance(m["content"], str), m
    return m["content"]


def assert_valid_rewrite(original: list[dict[str, Any]], ctx: RequestContext) -> None:
    found = rewrite_problems(original, ctx.messages, ctx.system_line, ctx.kind)
    assert not found, found
