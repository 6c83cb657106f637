"""Mean and 95% Student-t interval of a few repeats, and when one interval clears another."""

from __future__ import annotations

import itertools
import math

import pytest

from tuner.stats import Interval, clears, finite, interval, t975


def test_finite_turns_missing_and_text_into_none() -> None:
    assert finite("3.5") == 3.5 and finite(None) is None and finite("x") is None
    assert finite(float("inf")) is None and finite(float("nan")) is None


@pytest.mark.parametrize(("df", "expected"), [
    (1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (29, 2.045), (30, 2.042),
    (40, 2.021), (60, 2.000), (120, 1.980), (10_000, 1.960)])
def test_t975_matches_the_published_table(df: int, expected: float) -> None:
    assert t975(df) == pytest.approx(expected, abs=1.5e-3)


def test_t975_is_monotone_across_the_table_edge() -> None:
    values = [t975(df) for df in range(1, 200)]
    assert all(a > b for a, b in itertools.pairwise(values))
    with pytest.raises(ValueError):
        t975(0)


def test_interval_of_three_repeats() -> None:
    iv = interval([10.0, 12.0, 14.0])
    half = 4.3027 * 2.0 / math.sqrt(3)
    assert (iv.n, iv.mean, iv.sd) == (3, 12.0, 2.0)
    assert iv.low == pytest.approx(12.0 - half) and iv.high == pytest.approx(12.0 + half)
    assert "± 4.97 (n=3)" in iv.text()


def test_interval_needs_two_samples_and_skips_missing_values() -> None:
    assert interval([]).mean is None
    one = interval([5.0, None, float("nan")])
    assert (one.n, one.mean, one.low, one.high) == (1, 5.0, None, None)
    assert one.text() == "5 (n=1)"


def test_clears_needs_the_whole_interval_beyond_the_baseline() -> None:
    base = Interval(3, 100.0, 1.0, 98.0, 102.0)
    assert clears(Interval(3, 110.0, 1.0, 103.0, 117.0), base, "max")
    assert not clears(Interval(3, 110.0, 1.0, 101.0, 119.0), base, "max")  # overlaps
    assert clears(Interval(3, 90.0, 1.0, 85.0, 97.0), base, "min")
    assert not clears(Interval(3, 90.0, 1.0, 85.0, 97.0), base, "max")
    assert not clears(Interval(1, 200.0, None, None, None), base, "max")  # no interval


