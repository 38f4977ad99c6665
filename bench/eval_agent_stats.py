"""Paired statistics of an agent A/B: McNemar, TOST, bootstrap intervals.

Each task runs in both arms, so every comparison here is *paired* (task ``i`` of one arm
against task ``i`` of the other):

- ``mcnemar_exact(b, c)``: are the solve rates different? The exact two-sided binomial
  test on the discordant pairs (``b``: solved only in arm A, ``c``: only in arm B);
- ``tost_paired_proportions(a, b, margin)``: are the solve rates *equivalent* within
  ``margin``? Two one-sided tests on the paired difference of proportions (Agresti-Min
  interval, normal); equivalent when ``p < alpha``, i.e. the ``1 - 2*alpha`` interval
  lies inside ``(-margin, margin)``. ``tost_paired`` is the same on any paired values
  (t-tests on the per-task differences: turns, cost);
- ``bootstrap``: a percentile interval of any statistic of resampled task indexes, with
  ``mean_interval``, ``paired_difference`` and ``ratio_interval`` (``sum(num)/sum(den)``,
  e.g. cost per solved task) built on it.

Every resampling uses its own ``random.Random(seed)``: the same inputs give the same
intervals (the report is deterministic). Pure Python: no SciPy at run time.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Interval = tuple[float, float]
RESAMPLES = 2000


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p: twice the binomial(b + c, 1/2) tail of ``min(b, c)``."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / float(2 ** n)
    return min(1.0, 2 * tail)


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta (Lentz's method)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                   -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


@dataclass(frozen=True)
class Tost:
    difference: float  # mean of b_i - a_i
    margin: float
    p: float  # the larger of the two one-sided p values
    interval: Interval  # the 1 - 2*alpha interval of the difference
    alpha: float

    @property
    def equivalent(self) -> bool:
        return self.p < self.alpha


def tost_paired(a: Sequence[float], b: Sequence[float], margin: float,
                alpha: float = 0.05) -> Tost:
    """TOST of the paired mean difference ``b - a`` against ``(-margin, margin)``."""
    if len(a) != len(b) or not a:
        raise ValueError("tost_paired needs two equally long, non-empty sequences")
    if margin <= 0:
        raise ValueError("the equivalence margin must be positive")
    diffs = [y - x for x, y in zip(a, b)]
    n = len(diffs)
    mean = sum(diffs) / n
    var = sum((d - mean) ** 2 for d in diffs) / (n - 1) if n > 1 else 0.0
    se = math.sqrt(var / n)
    if se == 0.0:  # every task moved the same way: the difference is known exactly
        p = 0.0 if abs(mean) < margin else 1.0
        return Tost(mean, margin, p, (mean, mean), alpha)
    df = n - 1
    p_low = 1.0 - t_cdf((mean + margin) / se, df)  # H0: difference <= -margin
    p_high = t_cdf((mean - margin) / se, df)  # H0: difference >= margin
    q = _t_quantile(1.0 - alpha, df)
    return Tost(mean, margin, max(p_low, p_high), (mean - q * se, mean + q * se), alpha)


def normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def tost_paired_proportions(a: Sequence[bool | float], b: Sequence[bool | float], margin: float,
                            alpha: float = 0.05) -> Tost:
    """TOST of the paired difference of proportions ``P(b) - P(a)`` (0/1 outcomes per
    task) against ``(-margin, margin)``, on the Agresti-Min interval: half a count is
    added to each cell of the 2x2 table, so a table with no discordant pair still has a
    variance (six tasks all solved twice do not prove equivalence; five hundred do)."""
    if len(a) != len(b) or not a:
        raise ValueError("tost_paired_proportions needs two equally long, non-empty sequences")
    if margin <= 0:
        raise ValueError("the equivalence margin must be positive")
    only_a = sum(1 for x, y in zip(a, b) if x and not y)
    only_b = sum(1 for x, y in zip(a, b) if y and not x)
    n = len(a) + 2.0
    p_a, p_b = (only_a + 0.5) / n, (only_b + 0.5) / n
    diff = p_b - p_a
    se = math.sqrt(max((p_a + p_b) - diff * diff, 0.0) / n)
    p_low = 1.0 - normal_cdf((diff + margin) / se)  # H0: difference <= -margin
    p_high = normal_cdf((diff - margin) / se)  # H0: difference >= margin
    z = _quantile(normal_cdf, 1.0 - alpha)
    return Tost((only_b - only_a) / len(a), margin, max(p_low, p_high), (diff - z * se, diff + z * se), alpha)


def _t_quantile(p: float, df: float) -> float:
    return _quantile(lambda t: t_cdf(t, df), p)


def _quantile(cdf: Callable[[float], float], p: float) -> float:
    """The ``p`` quantile of a continuous distribution (bisection on its ``cdf``)."""
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2
        if cdf(mid) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def bootstrap(n: int, statistic: Callable[[list[int]], float | None], seed: int = 0,
              resamples: int = RESAMPLES, level: float = 0.95) -> Interval | None:
    """Percentile interval of ``statistic`` over resamples of the indexes ``0..n-1``
    (with replacement; a resample the statistic cannot take, ``None``, is left out)."""
    if n == 0:
        return None
    rng = random.Random(seed)
    values = sorted(v for v in (statistic([rng.randrange(n) for _ in range(n)])
                                for _ in range(resamples)) if v is not None)
    if not values:
        return None
    lo = values[int((1 - level) / 2 * (len(values) - 1))]
    hi = values[int((1 + level) / 2 * (len(values) - 1) + 0.5)]
    return (lo, hi)


def mean_interval(values: Sequence[float], seed: int = 0) -> Interval | None:
    """Bootstrap interval of the mean of per-task values."""
    return bootstrap(len(values), lambda ix: sum(values[i] for i in ix) / len(ix), seed)


def paired_difference(a: Sequence[float], b: Sequence[float], seed: int = 0) -> Interval | None:
    """Bootstrap interval of ``mean(b) - mean(a)``, resampling tasks (pairs) together."""
    if len(a) != len(b):
        raise ValueError("paired values must be equally many")
    return bootstrap(len(a), lambda ix: sum(b[i] - a[i] for i in ix) / len(ix), seed)


def ratio(num: Sequence[float], den: Sequence[float], ix: Sequence[int] | None = None) -> float | None:
    """``sum(num) / sum(den)`` over ``ix`` (all when None); None when the sum of ``den`` is 0."""
    picks = range(len(num)) if ix is None else ix
    d = sum(den[i] for i in picks)
    return None if d == 0 else sum(num[i] for i in picks) / d


def ratio_interval(num: Sequence[float], den: Sequence[float], seed: int = 0) -> Interval | None:
    """Bootstrap interval of ``sum(num) / sum(den)`` over tasks (cost per solved task)."""
    return bootstrap(len(num), lambda ix: ratio(num, den, ix), seed)


def paired_ratio_interval(num_a: Sequence[float], den_a: Sequence[float],
                          num_b: Sequence[float], den_b: Sequence[float],
                          seed: int = 0) -> Interval | None:
    """Bootstrap interval of ``ratio(b) / ratio(a)`` (e.g. the proxy arm's cost per solved
    task over the direct arm's), resampling tasks in both arms together."""
    def stat(ix: list[int]) -> float | None:
        ra, rb = ratio(num_a, den_a, ix), ratio(num_b, den_b, ix)
        return None if ra is None or rb is None or ra == 0 else rb / ra
    return bootstrap(len(num_a), stat, seed)
