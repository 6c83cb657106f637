"""The screen's promotion and its correlation: the top of the proxy's ranking plus settings
spread down to its bottom; Spearman's rho with its n and a 95% interval."""

from __future__ import annotations

import pytest

from tuner.run.screen import correlation_text, promoted, spearman_interval


def test_promoted_takes_the_top_then_the_middle_and_the_bottom() -> None:
    ranked = [{"NCCL_PROTO": p} for p in "abcdefghij"]  # best first
    picked = promoted(ranked, top=3, spread=2)
    assert [(role, s["NCCL_PROTO"]) for role, s in picked] == [
        ("top", "a"), ("top", "b"), ("top", "c"), ("spread", "g"), ("spread", "j")]
    assert promoted(ranked[:2], top=3, spread=2) == [("top", ranked[0]), ("top", ranked[1])]
    assert [s for _, s in promoted(ranked, top=1, spread=0)] == ranked[:1]


def test_the_interval_narrows_with_n_and_needs_four_pairs() -> None:
    assert spearman_interval(0.8, 3) is None
    low6, high6 = spearman_interval(0.8, 6)  # type: ignore[misc]
    low30, high30 = spearman_interval(0.8, 30)  # type: ignore[misc]
    assert low6 < low30 < 0.8 < high30 < high6 <= 1.0
    assert low6 == pytest.approx(-0.067, abs=0.002)  # 6 pairs say little, even at rho 0.8
    assert spearman_interval(1.0, 5) == (1.0, 1.0)


def test_the_text_names_n_and_the_interval() -> None:
    text = correlation_text({"spearman": 0.5, "n": 7, "interval": [-0.4, 0.91]})
    assert text == ("proxy vs server ranking: Spearman 0.50 over n=7 settings, 95% interval "
                    "[-0.40, 0.91]")
    assert "too few" in correlation_text({"spearman": None, "n": 2})
