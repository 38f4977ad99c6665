"""The systems a bench run compares, behind one interface.

A system opens a fresh *session* per case (per replay sequence), so nothing leaks from
one case into another; within a replay sequence the session keeps its state, as the
proxy keeps its store across one agent's requests. The project's systems run through
``context_engine.proxy.engine.engine.Engine``, the code the server runs, with a ``memory://`` store.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import yaml

from context_engine.bench import baselines
from context_engine.proxy.dialects.chat.recall import TOOL as RECALL_TOOL
from context_engine.proxy.dialects.chat.recall import can_offer
from context_engine.proxy.engine.context import JournalEntry
from context_engine.proxy.engine.contract import Embedder, Registry
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.engine.invariants import rewrite_problems
from context_engine.proxy.settings import Settings, load_settings
from context_engine.proxy.store.stores import MemoryStore, Store
from context_engine.rules import REGISTRY

Messages = list[dict[str, Any]]


@dataclass
class Outcome:
    """One rewritten request, as the bench sees it."""

    messages: Messages
    ms: float
    journal: list[JournalEntry] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    failed_open: bool = False
    reverted_because: list[str] = field(default_factory=list)  # the pipeline's invariant check
    background_ms: float = 0.0  # work done after the request, while the model would reply
    over_deadline: bool = False  # the rewrite took longer than rules_deadline_ms (the server sends the original)
    recall: Any = None  # the engine's recall state (markers made, tool offered)
    epoch: bool = False  # compact fired a compaction epoch on this request

    def tools_sent(self, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        """The ``tools`` the proxy sends upstream (every API): the client's, plus
        ``context_recall`` from the session's first lossy rewrite on. Adding it changes the
        request's first segment, so the provider's cache misses the whole prefix once. A
        client that sent no tools gets it only where the bench offers it anyway
        (``--recall``): then it goes out as the request's only tool, billed as such."""
        if getattr(self.recall, "offer", False):
            return [*(tools or []), RECALL_TOOL]
        return tools


def fired(ctx: Any) -> bool:
    """Whether ``compact`` fired an epoch on the request of ``ctx``."""
    return bool(ctx.compaction is not None and ctx.compaction.fired)


class Session(Protocol):
    async def rewrite(self, messages: Messages, tools: list[dict[str, Any]] | None) -> Outcome: ...


class System(Protocol):
    name: str

    def open(self, session_id: str, model: str | None = None) -> Session: ...


@dataclass
class _FunctionSession:
    fn: Callable[[Messages], Messages]

    async def rewrite(self, messages: Messages, tools: list[dict[str, Any]] | None) -> Outcome:
        start = time.perf_counter()
        out = self.fn(messages)
        ms = (time.perf_counter() - start) * 1000
        return Outcome(out, ms, problems=rewrite_problems(messages, out, pins=False))


@dataclass
class BaselineSystem:
    name: str
    fn: Callable[[Messages], Messages]

    def open(self, session_id: str, model: str | None = None) -> Session:
        return _FunctionSession(self.fn)


def _size(body: dict[str, Any]) -> int:
    """The body's size on the wire (what the server's deadline scales with)."""
    return len(json.dumps(body, ensure_ascii=False).encode())


@dataclass
class _EngineSession:
    engine: Engine
    session_id: str
    model: str
    recall: bool = False  # offer context_recall as if the client had tools (bench --recall)
    cold: bool = False

    async def rewrite(self, messages: Messages, tools: list[dict[str, Any]] | None) -> Outcome:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            body["tools"] = tools
        start = time.perf_counter()
        rw = await self.engine.rewrite(body, self.session_id,
                                       can_offer=self.recall or can_offer(body))
        ms = (time.perf_counter() - start) * 1000
        start = time.perf_counter()
        if not self.cold:  # a cold session's store is thrown away after its one request
            self.engine.prefetch()  # the server runs this while the upstream replies
        background = (time.perf_counter() - start) * 1000
        ctx = rw.result.ctx
        out: list[dict[str, Any]] = list(ctx.messages)  # type: ignore[arg-type]  # Message is a TypedDict
        return Outcome(out, ms, journal=list(rw.result.journal),
                       problems=rewrite_problems(messages, out, ctx.system_line, ctx.kind),
                       failed_open=rw.result.failed_open,
                       reverted_because=list(rw.result.problems), background_ms=background,
                       over_deadline=ms > 1000 * (self.engine.deadline_for(_size(body)) or float("inf")),
                       recall=rw.recall, epoch=fired(ctx))


@dataclass
class EngineSystem:
    """The project's pipeline with ``settings.rules``: a fresh Engine per session.

    Sessions share one in-memory store and one embedder, as the sessions of one
    long-running proxy do: content-addressed caches (embeddings, block summaries, tool
    originals) are shared, per-session state (memory indexes) is not.
    """

    name: str
    settings: Settings
    model: str = "gpt-4o"
    store: Store = field(default_factory=MemoryStore)
    embedder: Embedder | None = None
    recall: bool = False
    registry: Registry = field(default_factory=lambda: REGISTRY)
    cold: bool = False  # every session on a fresh, empty store (bench --cold)

    def open(self, session_id: str, model: str | None = None) -> Session:
        """A session sending ``model`` (default: the system's; a replay sends the model
        it bills, so price-aware rules plan with that model's prices). ``cold``: on a
        store of its own, as a resumed chat or a stateless client's first request meets
        a proxy that never saw the conversation (no vector, no index, no summary)."""
        store = MemoryStore() if self.cold else self.store
        engine = Engine(self.settings, store=store, embedder=self.shared_embedder(),
                        registry=self.registry)
        return _EngineSession(engine, session_id, model or self.model, self.recall, self.cold)

    def shared_embedder(self) -> Embedder | None:
        """The one embedder every session (and variant) of this system uses."""
        if "retrieve" in self.settings.rules and self.embedder is None:
            from context_engine.rules.retrieve.embedders import make_embedder

            name = self.settings.rule_options.get("retrieve", {}).get("embedder", "auto")
            self.embedder = make_embedder(str(name))
        return self.embedder


def parse_variant(spec: str, settings: Settings) -> tuple[str, Settings]:
    """``NAME:RULE.OPTION=VALUE[,RULE.OPTION=VALUE…]`` → the engine's settings with those
    options changed (values read as YAML scalars, checked like config.yaml's)."""
    from context_engine.proxy.settings import ConfigError, build_rule_config

    name, sep, body = spec.partition(":")
    if not sep or not name.strip() or not body.strip():
        raise ConfigError(f"--variant {spec!r}: expected NAME:RULE.OPTION=VALUE[,…]")
    options = {k: dict(v) for k, v in settings.rule_options.items()}
    for item in body.split(","):
        key, eq, raw = item.strip().partition("=")
        rule, dot, opt = key.partition(".")
        if not eq or not dot or not opt:
            raise ConfigError(f"--variant {spec!r}: {item.strip()!r} is not RULE.OPTION=VALUE")
        if rule not in settings.rules:
            raise ConfigError(f"--variant {spec!r}: rule {rule!r} is not in the engine's rules "
                              f"({', '.join(settings.rules)})")
        options.setdefault(rule, {})[opt] = yaml.safe_load(raw)
        build_rule_config(rule, options[rule])
    return name.strip(), dataclasses.replace(settings, rule_options=options)


def engine_settings(rules: str | None, config: str | None = None,
                    registry: Registry = REGISTRY) -> Settings:
    """Settings for the bench: the given rules (or the configured ones), a memory store."""
    return load_settings(flags={"rules": rules, "store": "memory://", "config": config},
                         registry=registry)


SYSTEM_KINDS = ("none", "last_n", "mask_observations", "engine", "alone")


def build_systems(settings: Settings, last_n: int = 12, mask_keep: int = 3,
                  model: str = "gpt-4o", kinds: tuple[str, ...] = SYSTEM_KINDS,
                  variants: Sequence[tuple[str, Settings]] = (),
                  registry: Registry = REGISTRY) -> list[Any]:
    """none, last_n, mask_observations, the project (``engine``: all of ``settings.rules``),
    each of its rules alone (``<rule> alone``) and the engine with changed options
    (``variants``; they share the engine's store and embedder, so a chunk is embedded
    once for all of them).

    ``none`` is always included: the other systems are measured against it. ``registry``
    is where the rule names are looked up (tests pass their own rules).
    """
    systems: list[Any] = [BaselineSystem("none", baselines.none)]
    if "last_n" in kinds:
        systems.append(BaselineSystem(f"last_n({last_n})", lambda m: baselines.last_n(m, last_n)))
    if "mask_observations" in kinds:
        systems.append(BaselineSystem(f"mask_observations({mask_keep})",
                                      lambda m: baselines.mask_observations(m, mask_keep)))
    if "engine" in kinds or variants:
        engine = EngineSystem("engine", settings, model, registry=registry)
        systems += [engine] * ("engine" in kinds)
        systems += [EngineSystem(name, changed, model, engine.store, engine.shared_embedder(),
                                 registry=registry) for name, changed in variants]
    if "alone" in kinds and len(settings.rules) > 1:
        for rule in settings.rules:
            solo = dataclasses.replace(settings, rules=(rule,))
            systems.append(EngineSystem(f"{rule} alone", solo, model, registry=registry))
    return systems
