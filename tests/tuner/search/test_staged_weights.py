"""The staged search with settings of each stage's own (which weights its servers load): they go
with every trial of the stage, never with a winner, and a stage that loads other weights than
its carried-over winner was measured with re-measures that winner first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.tune.search import Searcher

from search_spaces.knobs import DUMMY, WEIGHTS
from search_spaces.space import SearchSpace, from_mapping
from tuner.search.build import build_search, proposals
from tuner.search.memory import FailureMemory
from tuner.search.space_searcher import SpaceSearcher
from tuner.search.staged import StagedSearcher
from tuner.spec import Objective
from tuner.weights import SEARCH, StageWeights, WeightPlan

SPACE: dict[str, Any] = {
    "name": "w", "knobs": {"NCCL_ALGO": ["allreduce:tree"], "NCCL_MAX_NCHANNELS": [4],
                           "--speculative-num-steps": [2]},
    "stages": [{"name": "algo", "knobs": ["NCCL_ALGO"]},
               {"name": "channels", "knobs": ["NCCL_MAX_NCHANNELS"]},
               {"name": "speculative", "knobs": ["--speculative-num-steps"]}]}
DUMMY_PINS = {WEIGHTS: DUMMY}
REAL_PINS = {WEIGHTS: None}
PINS = {"baseline": DUMMY_PINS, "algo": DUMMY_PINS, "channels": DUMMY_PINS,
        "speculative": REAL_PINS}


def _space() -> SearchSpace:
    return from_mapping(SPACE, "test")


def _score(config: dict[str, Any], dummy_offset: float = 1.0) -> float:
    """Lower is better; random weights shift every config by ``dummy_offset`` ms (a stand-in
    for a measurement that does not compare across weights)."""
    ms = 10.0 - (3.0 if config["NCCL_ALGO"] == "allreduce:tree" else 0.0) \
        - (1.0 if config["NCCL_MAX_NCHANNELS"] == 4 else 0.0) \
        - (0.5 if config["--speculative-num-steps"] == 2 else 0.0)
    return ms + (dummy_offset if config.get(WEIGHTS) == DUMMY else 0.0)


def _run(searcher: Searcher, dummy_offset: float = 1.0) -> list[tuple[str, dict[str, Any]]]:
    launched = []
    for i in range(100):
        tid = f"t{i}"
        point = searcher.suggest(tid)
        if point == Searcher.FINISHED or point is None:
            break
        assert isinstance(point, dict)
        launched.append((tid, point))
        ms = _score(point, dummy_offset)
        for r in (1, 2):
            searcher.on_trial_result(tid, {"ms": ms, "round": r})
        searcher.on_trial_complete(tid, {"ms": ms})
    return launched


def _staged(pins: dict[str, dict[str, Any]] | None = PINS) -> StagedSearcher:
    return StagedSearcher(_space(), total_samples=7, rounds=2,
                          make_inner=lambda s, seed, kind: SpaceSearcher(s, "grid", seed),
                          metric="ms", mode="min", stage_pins=pins)


def test_each_stage_adds_its_own_weights_and_no_winner_carries_them() -> None:
    searcher = _staged()
    launched = _run(searcher)
    stages = [searcher.stage_of[tid] for tid, _ in launched]
    # The winner carried into a stage on the same weights is answered from its measurement;
    # the speculative stage (the checkpoint's weights) launches it again first. The later
    # stages moved the best point, so the first pass is followed by another over "algo",
    # which launches the winner again on its own (random) weights first.
    assert stages == ["baseline", "algo", "channels", "speculative", "speculative", "algo",
                      "algo"]
    for (tid, point), stage in zip(launched, stages, strict=True):
        assert point[WEIGHTS] == PINS[stage][WEIGHTS], (tid, stage, point)
    assert WEIGHTS not in searcher.winners
    assert searcher.winners == {"NCCL_ALGO": "allreduce:tree", "NCCL_MAX_NCHANNELS": 4,
                                "--speculative-num-steps": 2}
    assert [h.pins for h in searcher.history] == [DUMMY_PINS] * 3 + [REAL_PINS] \
        + [DUMMY_PINS]
    assert [h.pass_ for h in searcher.history] == [1, 1, 1, 1, 2]


def test_a_stage_on_other_weights_remeasures_the_winner_it_carries_over(tmp_path: Path
                                                                       ) -> None:
    """Through the whole stack (the filtering searcher answers repeats from what was measured):
    the first trial of the speculative stage is launched, not answered from the channels
    winner's measurement on random weights."""
    weights = WeightPlan("auto", tuple(StageWeights(n, p[WEIGHTS] == DUMMY, "x")
                                       for n, p in PINS.items()))
    stack = build_search(_space(), Objective("ms", "min", 2), search="staged",
                         stage_search="grid", samples=7, seed=0, failure_aware=True,
                         max_concurrent=1, out_dir=tmp_path, weights=weights)
    launched = _run(stack.filtering)
    staged = stack.staged
    assert staged is not None
    real = [p for t, p in launched if staged.stage_of.get(t) == "speculative"]
    # The carried-over winner (tree, 4 channels), its stage's knob at the default, real weights.
    assert real[0] == {"NCCL_ALGO": "allreduce:tree", "NCCL_MAX_NCHANNELS": 4,
                       "--speculative-num-steps": None, WEIGHTS: None}
    assert real[1]["--speculative-num-steps"] == 2
    assert staged.winners == {"NCCL_ALGO": "allreduce:tree", "NCCL_MAX_NCHANNELS": 4,
                              "--speculative-num-steps": 2}


def test_a_winner_measured_on_other_weights_is_not_compared() -> None:
    """Random weights read 2 ms faster here: the channels winner (4 ms on random weights) would
    beat every trial of the speculative stage (6 and 5.5 ms on the checkpoint's weights) if it
    were compared; it is not, so the stage's best shape wins."""
    searcher = _staged()
    _run(searcher, dummy_offset=-2.0)
    winner = searcher.history[3].winner
    assert searcher.stage_of[winner] == "speculative"
    assert searcher.winners["--speculative-num-steps"] == 2
    alike = _staged({**PINS, "speculative": DUMMY_PINS})  # measured alike: compared
    _run(alike, dummy_offset=-2.0)
    assert alike.winners["--speculative-num-steps"] == 2


def test_without_stage_pins_nothing_changes() -> None:
    searcher = _staged(None)
    launched = _run(searcher)
    assert all(WEIGHTS not in p for _, p in launched)
    # the baseline, each stage's one new value (its winner so far is answered, not run), then
    # a second pass that tries the first stages' other values around the new winners
    assert [searcher.stage_of[t] for t, _ in launched] == [
        "baseline", "algo", "channels", "speculative", "algo", "channels", "all"]
    assert len({str(sorted(p.items())) for _, p in launched}) == 7


def test_build_search_pins_the_weights_of_a_search_that_is_not_staged(tmp_path: Path) -> None:
    weights = WeightPlan("auto", (StageWeights("baseline", True, "x"),
                                  StageWeights(SEARCH, True, "x")))
    stack = build_search(_space(), Objective("ms", "min", 2), search="random",
                         stage_search="random", samples=4, seed=0, failure_aware=True,
                         max_concurrent=1, out_dir=None, weights=weights)
    configs = [c for _, c in proposals(stack, 4)]
    assert len(configs) == 4 and all(c[WEIGHTS] == DUMMY for c in configs)
    staged = build_search(_space(), Objective("ms", "min", 2), search="staged",
                          stage_search="grid", samples=7, seed=0, failure_aware=True,
                          max_concurrent=1, out_dir=tmp_path, weights=weights)
    assert staged.staged is not None and staged.staged.stage_pins["baseline"] == DUMMY_PINS


def test_failure_memory_never_blames_the_weights() -> None:
    base = _space().baseline()
    memory = FailureMemory(base)
    for i in range(3):
        memory.record({**base, WEIGHTS: DUMMY, "NCCL_ALGO": "Tree"}, f"t{i}", "graph_capture")
    assert memory.ruled_out({**base, WEIGHTS: DUMMY}) == []
    assert memory.ruled_out({**base, "NCCL_ALGO": "Tree"})


def test_the_round_that_ends_a_trial_counts() -> None:
    """Ray hands a trial's last round (or the one ASHA stops it at) to on_trial_complete only:
    with one round per trial the stages still find their winners, and a trial stopped early
    never beats one that ran every round."""
    one = StagedSearcher(_space(), total_samples=7, rounds=1,
                         make_inner=lambda s, seed, kind: SpaceSearcher(s, "grid", seed),
                         metric="ms", mode="min")
    for i in range(20):
        point = one.suggest(f"t{i}")
        if point == Searcher.FINISHED or point is None:
            break
        assert isinstance(point, dict)
        one.on_trial_complete(f"t{i}", {"ms": _score(point), "round": 1})
    assert one.winners["NCCL_ALGO"] == "allreduce:tree"
    assert one.winners["NCCL_MAX_NCHANNELS"] == 4

    wider = from_mapping({**SPACE, "knobs": {**SPACE["knobs"],
                                             "NCCL_ALGO": ["allreduce:ring", "allreduce:tree"]}},
                         "test")
    two = StagedSearcher(wider, total_samples=7, rounds=2,
                         make_inner=lambda s, seed, kind: SpaceSearcher(s, "grid", seed),
                         metric="ms", mode="min")
    assert two.suggest("base") is not None
    two.on_trial_result("base", {"ms": 10.0, "round": 1})
    two.on_trial_complete("base", {"ms": 10.0, "round": 2})
    first, second = two.suggest("a"), two.suggest("b")
    assert isinstance(first, dict) and isinstance(second, dict)
    two.on_trial_complete("a", {"ms": 9.0, "round": 1})  # stopped after one round
    two.on_trial_result("b", {"ms": 9.5, "round": 1})
    two.on_trial_complete("b", {"ms": 9.5, "round": 2})
    assert two.values["b"] == [9.5, 9.5] and two.values["a"] == [9.0]
    two.suggest("c")  # the stage's budget is spent: its winner is picked
    assert two.history[1].winner == "b"
