"""The bill of one ledger row: what it cost and what the original would have cost.

Costs (litellm's price map): the *actual* cost is what the upstream billed (``usage``:
prompt, cache reads, cache writes, completion). The *original* cost is what the
client's original request would have been billed sent directly:

- ``estimate``: rewritten rows. Its input is the billed prompt plus the tokens the
  rules removed; its cache reads and writes are the counterfactual ones
  (``proxy/billing/estimate.py``: what the provider would have cached from the session's
  earlier original requests), not the rewrite's.
- ``billed``: rows that sent the original (passthrough and shadow arms, ``bypass``:
  ``X-Context-Engine-Rules: off``, failed open):
  the original's cost is the bill. Where these rows also carry an estimate, the two
  are compared (``check_*``): that is the estimate's error on real traffic.
- ``assumed``: rows from before the estimate existed: the original is priced with the
  rewrite's cached tokens (this overstates the saving where caching works).

Rows without upstream usage fall back to the proxy's own counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from context_engine.proxy.billing.pricing import Price, price_for

BASES = ("estimate", "billed", "assumed")


@dataclass(frozen=True)
class RowBill:
    original: float
    actual: float
    basis: str  # one of BASES
    original_estimate: float | None = None  # the estimate where the original was sent


def _input_cost(price: Price, prompt: int, cached: int, write: int) -> float:
    cached = max(0, min(cached, prompt))
    write = max(0, min(write, prompt - cached))
    return (prompt - cached - write) * price.input + cached * price.cached_input + write * price.cache_write


def row_bill(row: dict[str, Any]) -> RowBill | None:
    """The original and actual cost of one ledger row, or None if the model has no price."""
    price = price_for(row.get("model") or "")
    if price is None:
        return None
    prompt = row.get("prompt_tokens")
    if prompt is None:
        prompt = row.get("tokens_sent") or 0
    cached, write = row.get("cached_tokens") or 0, row.get("cache_write_tokens") or 0
    out = (row.get("completion_tokens") or 0) * price.output
    actual = _input_cost(price, prompt, cached, write) + out
    # the recall rounds' follow-ups (their input and output are in the billed usage) are the
    # rewrite's own cost: the original, sent direct, would have had none of them
    recall_in = min(prompt, row.get("recall_prompt_tokens") or 0)
    first = prompt - recall_in
    out_first = max(0, (row.get("completion_tokens") or 0)
                    - (row.get("recall_completion_tokens") or 0)) * price.output
    # the estimate counts with the proxy's tokenizer; the bill with the provider's
    sent, original = row.get("tokens_sent") or 0, row.get("tokens_original") or 0
    scale = first / sent if sent and row.get("prompt_tokens") is not None else 1.0
    est_read, est_write = row.get("est_cached_original"), row.get("est_write_original") or 0
    billed = row.get("arm") in ("shadow", "passthrough", "bypass") or row.get("failed_open")
    # What the rules removed is message text. Where the proxy counts with the model's own
    # encoding it counted that text exactly, and the request's provider/proxy ratio
    # (scale) would overstate it: that ratio also carries the provider's framing of what
    # stayed (roles, tool calls), which compaction keeps while it removes text. The
    # original's own ratio then converts its cache estimate.
    exact = not row.get("encoding_fallback") and not billed and original > sent > 0
    saved = round((original - sent) * (1.0 if exact else scale))
    ratio = (first + saved) / original if exact else scale
    if est_read is not None:
        est_read, est_write = round(est_read * ratio), round(est_write * ratio)
    if billed:
        estimate = None if est_read is None else _input_cost(price, prompt, est_read, est_write) + out
        return RowBill(actual, actual, "billed", estimate)
    if est_read is None:
        cached = min(cached, first)
        return RowBill((first + saved - cached) * price.input + cached * price.cached_input + out_first,
                       actual, "assumed")
    return RowBill(_input_cost(price, first + saved, est_read, est_write) + out_first, actual,
                   "estimate")


def row_costs(row: dict[str, Any]) -> tuple[float, float] | None:
    """(original, actual) cost of one ledger row, or None if the model has no price."""
    bill = row_bill(row)
    return None if bill is None else (bill.original, bill.actual)
