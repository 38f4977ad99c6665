"""Memory zones committed to the store (``retrieve:zone:<key>``): a user turn's zone is
decided once, "none" included, and every later request on any replica sends that
decision, whatever the background has embedded since (the cached prefix and the
replicas agree)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from context_engine.proxy.store.stores import Store, StoreUnavailable
from context_engine.rules.retrieve.search import Hit, render

ZONE_PREFIX = "retrieve:zone:"


@dataclass(frozen=True)
class Zone:
    """One user turn's memory zone as committed to the store: its text and what it cites."""

    text: str
    injected: tuple[str, ...] = ()
    scores: tuple[float, ...] = ()

    @classmethod
    def of(cls, hits: list[Hit]) -> Zone:
        return cls(render(hits), tuple(f"{h.chunk.header}#{h.chunk.index}" for h in hits),
                   tuple(h.score for h in hits))


def committed(store: Store, key: str) -> tuple[bool, Zone | None]:
    """(found, zone) of a committed decision; not found when the store is down."""
    try:
        raw = store.get(key)
    except StoreUnavailable:
        return False, None
    if raw is None:
        return False, None
    try:
        data = json.loads(raw)
        return True, (Zone(str(data["text"]), tuple(data["injected"]), tuple(data["scores"]))
                      if data else None)
    except (ValueError, KeyError, TypeError):  # unreadable: decide again
        return False, None


def commit(store: Store, key: str, zone: Zone | None) -> Zone | None:
    """Commit ``zone`` unless another request did first; the committed one."""
    try:
        found, earlier = committed(store, key)
        if found:
            return earlier
        store.set(key, json.dumps(asdict(zone) if zone else {}).encode())
    except StoreUnavailable:
        pass
    return zone
