"""What the engine and a rule agree on: the ``Rule`` and ``Prefetching`` protocols, the
effects a rule may use (``RuleDeps``) and the option helpers.

A rule is a class with a ``name``, a frozen dataclass ``Config`` whose fields carry
``metadata={"help": ...}``, a constructor ``(config, deps)`` and an async
``apply(ctx) -> ctx``. Rules are pure over the context: effects (the store, a
summarizer, an embedder) come in through ``RuleDeps``. A rule never mutates the
messages it is given; it returns new lists and new dicts.

What the core needs back from a rule travels in typed ``RequestContext`` fields
(``system_line``, ``memory``), never in another rule's private notes. What a rule offers
beyond ``apply`` is a capability protocol, checked once at start-up, never a rule name:

- ``Prefetching``: work between requests (the background lane);
- ``Fencing``: fences text the proxy adds after the rules (a recalled original);
- ``ClosedBlocks``: the block layout of the stable prefix (``cache.auto_breakpoints``);
- ``Lossless``: the options under which the rule belongs to the lossless profile;
- ``Embedding``: how many texts the rule sent to an embedder (``/healthz``).

The core imports no rule module: rules plug in through the registry
(``context_engine.rules.REGISTRY``), which only the composition root (settings) reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from context_engine.proxy.engine.context import RequestContext
from context_engine.proxy.store.stores import MemoryStore, Store


class Embedder(Protocol):
    """Sentence vectors for long memory (``retrieve``); rows are L2-normalised."""

    name: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray: ...


class Summarizer(Protocol):
    """Fills the text slots of one block (``summarize``); ``None`` means "use the
    rule-based slots". The value is the summarize rule's ``Slots``."""

    @property
    def kind(self) -> str: ...

    async def summarize(self, transcript: str) -> Any: ...


@dataclass(frozen=True)
class RuleDeps:
    """Effects a rule may use; tests pass in-memory ones. ``embedder``/``summarizer``
    left ``None`` mean "build the one the rule's options name"."""

    store: Store = field(default_factory=MemoryStore)
    embedder: Embedder | None = None
    summarizer: Summarizer | None = None
    zone_secret: str = ""  # the salt of zones' per-session marker


class Rule(Protocol):
    name: str  # a class attribute: the registry's key
    Config: type[Any]  # the frozen dataclass of its options

    def __init__(self, config: Any, deps: RuleDeps) -> None: ...

    async def apply(self, ctx: RequestContext) -> RequestContext: ...


Registry = Mapping[str, type[Rule]]  # rule name → class (``context_engine.rules.REGISTRY``)


@runtime_checkable
class Prefetching(Protocol):
    """A rule with work to do between requests (the background lane): ``prefetch`` does
    one bounded slice, calling ``pause`` between items so requests go first, and says
    how many items it did (0: nothing left)."""

    def prefetch(self, pause: Callable[[], None] | None = None) -> int: ...


@runtime_checkable
class Forgetting(Protocol):
    """A rule that queues background work per session (``Prefetching``): ``forget``
    drops what a session's last request queued, when the upstream refused that request
    (``proxy/engine/commits.py``): a refused request leaves nothing to do behind."""

    def forget(self, session: str) -> None: ...


@runtime_checkable
class Fencing(Protocol):
    """A rule that fences data: ``fence(session_id, text)`` is ``text`` fenced as it would
    fence a tool result of the session. When the rule ran on a request (its journal note
    is in ``ctx.notes``), the text ``context_recall`` returns is fenced with it."""

    name: str

    def fence(self, session_id: str, text: str) -> str: ...


@runtime_checkable
class ClosedBlocks(Protocol):
    """A rule that moves older turns out in closed blocks: ``blocks()`` is its
    ``(window, block)`` (the last ``window`` units stay raw; older ones leave ``block``
    units at a time). ``cache.auto_breakpoints`` marks where the closed blocks end."""

    def blocks(self) -> tuple[int, int]: ...


@runtime_checkable
class Lossless(Protocol):
    """A rule of the lossless profile (``X-Context-Engine-Rules: lossless``): it runs there
    with ``lossless`` over its configured options, the options under which it changes the
    form of the context, never its facts. A rule without it is left out of that profile."""

    lossless: ClassVar[Mapping[str, Any]]


@runtime_checkable
class Embedding(Protocol):
    """A rule that sends texts to an embedder: ``embedded()`` is how many this process sent."""

    def embedded(self) -> int: ...


def lossless_options(cls: type[Any]) -> Mapping[str, Any] | None:
    """The options a rule class declares for the lossless profile; None: not in it."""
    return cls.lossless if isinstance(cls, Lossless) else None


def option(default: Any, help: str) -> Any:
    """A typed rule option with a help line (shown by ``context-engine rules``)."""
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def config_help(config_cls: type[Any]) -> list[tuple[str, str, Any, str]]:
    """(name, type, default, help) for each option of a rule's config dataclass."""
    rows = []
    for f in dataclasses.fields(config_cls):
        factory = f.default_factory
        default = factory() if callable(factory) else f.default
        rows.append((f.name, str(f.type), default, f.metadata.get("help", "")))
    return rows
