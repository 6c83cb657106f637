"""Mean and 95% confidence interval of a few repeats (Student's t), without scipy."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

CONFIDENCE = 0.95
# Two-sided 95% quantiles of Student's t, t_{0.975, df}, for df = 1..30 (standard tables).
_T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
         2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
         2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)


def finite(value: Any) -> float | None:
    """A finite float, or None (missing, NaN, text)."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def t975(df: int) -> float:
    """t_{0.975, df}: the table up to 30 degrees of freedom, then the Cornish-Fisher
    expansion around the normal quantile (error below 1e-4 from df 30 on)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = statistics.NormalDist().inv_cdf(0.975)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


@dataclass(frozen=True)
class Interval:
    """n samples: their mean and a 95% confidence interval for it (None below 2 samples)."""

    n: int
    mean: float | None
    sd: float | None
    low: float | None
    high: float | None

    @property
    def half_width(self) -> float | None:
        return None if self.low is None or self.high is None else (self.high - self.low) / 2

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def text(self, digits: int = 4) -> str:
        if self.mean is None:
            return "-"
        if self.half_width is None:
            return f"{self.mean:.{digits}g} (n={self.n})"
        return f"{self.mean:.{digits}g} ± {self.half_width:.{digits - 1}g} (n={self.n})"


def interval(values: Iterable[float | None]) -> Interval:
    nums = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not nums:
        return Interval(0, None, None, None, None)
    mean = statistics.fmean(nums)
    if len(nums) < 2:
        return Interval(1, mean, None, None, None)
    sd = statistics.stdev(nums)
    half = t975(len(nums) - 1) * sd / math.sqrt(len(nums))
    return Interval(len(nums), mean, sd, mean - half, mean + half)


def clears(candidate: Interval, baseline: Interval, mode: str) -> bool:
    """True when the candidate's whole interval is better than the baseline's whole interval
    (``mode`` "max": higher is better). No interval (fewer than 2 samples) never clears."""
    if None in (candidate.low, candidate.high, baseline.low, baseline.high):
        return False
    assert candidate.low is not None and candidate.high is not None
    assert baseline.low is not None and baseline.high is not None
    if mode == "max":
        return candidate.low > baseline.high
    return candidate.high < baseline.low


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with integer ``df`` (the closed forms for odd and even df)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    theta = math.atan(abs(t) / math.sqrt(df))
    cos2, sin = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:  # odd: 2/pi (theta + sin cos (1 + 2/3 cos^2 + ...))
        term, total = math.cos(theta), 0.0
        if df > 1:
            total = term
            for k in range(3, df - 1, 2):
                term *= cos2 * (k - 1) / k
                total += term
        inside = 2 / math.pi * (theta + sin * total)
    else:  # even: sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)
        term = total = 1.0
        for k in range(2, df - 1, 2):
            term *= cos2 * (k - 1) / k
            total += term
        inside = sin * total
    return 0.5 + 0.5 * inside if t >= 0 else 0.5 - 0.5 * inside


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with integer ``df`` (bisection on ``t_cdf``)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-10 * max(1.0, high):
            break
    return (low + high) / 2
