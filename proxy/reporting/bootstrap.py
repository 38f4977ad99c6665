"""Bootstrap intervals over sessions, for the A/B arms (two independent samples).

Sessions are the unit of assignment (``mode: ab`` hashes the session id), so each arm is
resampled by session, with replacement, ``RESAMPLES`` times from a fixed seed (numpy's
generator): the same ledger always gives the same interval. Percentile intervals at 95%.
Vectorised: ``/stats`` (the dashboard) computes them on every refresh.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

RESAMPLES = 1000
BLOCK = 1_000_000  # draws per block of resamples
LEVEL = 0.95
SEED = 47

Interval = tuple[float, float]


def _percentiles(values: Any) -> Interval | None:
    values = np.sort(values[np.isfinite(values)])
    if not len(values):
        return None
    lo = values[int((1 - LEVEL) / 2 * (len(values) - 1))]
    hi = values[int((1 + LEVEL) / 2 * (len(values) - 1) + 0.5)]
    return float(lo), float(hi)


def _means(rng: Any, xs: Sequence[float]) -> Any:
    """``RESAMPLES`` means of ``xs`` resampled with replacement, in blocks of at most
    ``BLOCK`` draws (memory stays flat however many sessions there are)."""
    arr = np.asarray(xs, dtype=float)
    n = len(arr)
    rows = max(1, BLOCK // n)
    out = [arr[rng.integers(0, n, size=(min(rows, RESAMPLES - k), n))].mean(axis=1)
           for k in range(0, RESAMPLES, rows)]
    return np.concatenate(out)


def diff_interval(a: Sequence[float], b: Sequence[float], seed: int = SEED) -> Interval | None:
    """Interval of ``mean(a) - mean(b)``; None when an arm has fewer than 2 sessions."""
    if len(a) < 2 or len(b) < 2:
        return None
    rng = np.random.default_rng(seed)
    return _percentiles(_means(rng, a) - _means(rng, b))


def ratio_interval(a: Sequence[float], b: Sequence[float], seed: int = SEED) -> Interval | None:
    """Interval of ``mean(a) / mean(b)`` (resamples whose ``b`` mean is 0 left out)."""
    if len(a) < 2 or len(b) < 2:
        return None
    rng = np.random.default_rng(seed)
    x, y = _means(rng, a), _means(rng, b)
    keep = y != 0
    return _percentiles(x[keep] / y[keep])


def mean(xs: Sequence[float]) -> float | None:
    return statistics.fmean(xs) if xs else None
