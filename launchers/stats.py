"""Small statistics shared by the launchers (no numpy needed)."""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100), linearly interpolated as numpy's default method does;
    None for no values."""
    data = sorted(float(v) for v in values)
    if not data:
        return None
    pos = (len(data) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (pos - low)
