"""launchers.stats: the percentile both launchers use."""

from __future__ import annotations

import pytest

from launchers.stats import percentile


def test_percentile_matches_numpy_linear() -> None:
    assert percentile([], 50) is None
    assert percentile([7.0], 99) == 7.0
    assert percentile([4, 1, 3, 2], 50) == 2.5  # unsorted input
    assert percentile([10, 20, 30, 40, 50], 90) == pytest.approx(46.0)
    assert percentile(iter([1.0, 2.0, 3.0]), 0) == 1.0 and percentile([1.0, 2.0, 3.0], 100) == 3.0
