"""Staged search spends its whole budget: stages get budgets in proportion to their size and
effect, earlier stages are searched again while a later one moves the best point, then every
knob at once."""

from __future__ import annotations

from typing import Any

from ray.tune.search import Searcher

from search_spaces.space import SearchSpace, from_mapping
from tuner.search.space_searcher import SpaceSearcher
from tuner.search.staged import JOINT, StagedSearcher

DRAFTS = "--speculative-num-draft-tokens"


def _space() -> SearchSpace:
    return from_mapping({"name": "s", "knobs": {
        "NCCL_PROTO": ["LL", "LL128", "Simple"], "NCCL_MAX_NCHANNELS": [4, 16],
        DRAFTS: [3, 6, 8]},
        "pins": {"--speculative-num-steps": 7},  # draft tokens alone: a partial shape
        "stages": [{"name": "protocol", "knobs": ["NCCL_PROTO"]},
                   {"name": "channels", "knobs": ["NCCL_MAX_NCHANNELS"]},
                   {"name": "speculative", "knobs": [DRAFTS]}]}, "test")


def _wrong_order(point: dict[str, Any]) -> float:
    """Draft tokens matter most and decide the best protocol: LL below 8 tokens, Simple at 8."""
    drafts = point[DRAFTS] or 4
    value = {None: 1.0, 3: 0.8, 6: 1.2, 8: 1.5}[point[DRAFTS]]
    best = "Simple" if drafts >= 8 else "LL"
    value *= 1.1 if point["NCCL_PROTO"] == best else 1.0
    return value * (1.02 if point["NCCL_MAX_NCHANNELS"] == 4 else 1.0)


def _run(searcher: StagedSearcher, budget: int) -> list[dict[str, Any]]:
    launched = []
    for i in range(budget + 5):
        point = searcher.suggest(f"t{i}")
        if point is None or point == Searcher.FINISHED:
            break
        assert isinstance(point, dict)
        launched.append(point)
        for r in (1, 2):
            searcher.on_trial_result(f"t{i}", {"tok_s": _wrong_order(point), "round": r})
        searcher.on_trial_complete(f"t{i}", {"tok_s": _wrong_order(point), "round": 2})
    return launched


def _staged(total: int) -> StagedSearcher:
    return StagedSearcher(_space(), total_samples=total, rounds=2,
                          make_inner=lambda s, seed, kind: SpaceSearcher(s, "grid", seed),
                          metric="tok_s", mode="max")


def test_a_later_stage_that_moves_the_best_point_sends_the_search_back() -> None:
    searcher = _staged(14)
    launched = _run(searcher, 14)
    assert len(launched) == 14  # the whole budget, not one pass and out
    passes = [(h.stage, h.pass_) for h in searcher.history]
    assert passes[:4] == [("baseline", 1), ("protocol", 1), ("channels", 1),
                          ("speculative", 1)]
    assert ("protocol", 2) in passes  # 8 draft tokens moved the best: protocol again
    assert searcher.winners == {"NCCL_PROTO": "Simple", "NCCL_MAX_NCHANNELS": 4, DRAFTS: 8,
                                "--speculative-num-steps": 7}


def test_budgets_follow_size_and_effect_and_never_exceed_a_stage() -> None:
    searcher = _staged(40)
    launched = _run(searcher, 40)
    first = [searcher.stage_of[f"t{i}"] for i in range(1, 9)]
    # each stage of the first pass runs every point of its sub-space, no more
    assert first == ["protocol"] * 3 + ["channels"] * 2 + ["speculative"] * 3, first
    keys = [str(sorted(p.items(), key=lambda kv: kv[0])) for p in launched]
    assert len(keys) == len(set(keys))  # no point launched twice
    # the passes end where nothing moves; the rest of the budget goes to every knob at once,
    # until the space (4 x 3 x 4 = 48 points) or the budget runs out
    assert JOINT in searcher.stage_of.values()
    assert len(launched) == 40
