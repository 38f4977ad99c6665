"""Prices and context windows from litellm's bundled map, read offline and lazily.

The JSON file ships inside the litellm wheel; reading it directly costs a few ms and
no network, where ``import litellm`` costs seconds and tries to fetch a fresh map.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from dataclasses import dataclass
from typing import Any

MAP_FILE = "model_prices_and_context_window_backup.json"


@functools.lru_cache(maxsize=1)
def price_map() -> dict[str, Any]:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = os.path.join(list(spec.submodule_search_locations)[0], MAP_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def model_info(model: str) -> dict[str, Any] | None:
    table = price_map()
    for key in (model, model.rsplit("/", 1)[-1]):
        if key in table and isinstance(table[key], dict):
            return table[key]  # type: ignore[no-any-return]
    return None


@dataclass(frozen=True)
class Price:
    input: float
    cached_input: float
    output: float
    cache_write: float = 0.0  # per cache-write token (Anthropic: 1.25x input); input if unknown
    provider: str = ""  # litellm_provider: "openai", "anthropic", …

    @property
    def caching(self) -> str:
        """The caching model of the provider: ``anthropic`` (explicit breakpoints, paid
        writes) or ``openai`` (automatic prefix caching, free writes)."""
        return "anthropic" if self.provider in ANTHROPIC_PROVIDERS else "openai"


ANTHROPIC_PROVIDERS = frozenset({"anthropic", "bedrock_converse", "vertex_ai-anthropic_models"})


def price_for(model: str) -> Price | None:
    """Per-token prices, or None when the map does not know the model."""
    info = model_info(model)
    if not info or "input_cost_per_token" not in info:
        return None
    inp = float(info.get("input_cost_per_token") or 0.0)
    cached = info.get("cache_read_input_token_cost")
    write = info.get("cache_creation_input_token_cost")
    provider = str(info.get("litellm_provider") or "")
    if provider == "bedrock" and "claude" in model:
        provider = "bedrock_converse"
    return Price(inp, float(cached) if cached is not None else inp,
                 float(info.get("output_cost_per_token") or 0.0),
                 float(write) if write is not None else inp, provider)


def context_window(model: str) -> int:
    """The model's input window, ``max_input_tokens`` (the exact name, then without its
    provider prefixes), or 0 when the map does not say."""
    table = price_map()
    for name in (model, model.split("/", 1)[-1], model.rsplit("/", 1)[-1]):
        info = table.get(name)
        value = info.get("max_input_tokens") if isinstance(info, dict) else None
        if isinstance(value, (int, float)) and value:
            return int(value)
    return 0
