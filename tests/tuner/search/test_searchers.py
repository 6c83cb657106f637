"""Searchers driven by hand, the way Ray drives them (suggest / on_trial_result / complete)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from ray.tune.search import Searcher

from search_spaces.space import SearchSpace, from_mapping, load_preset
from tuner.search.auto import AutoSearcher
from tuner.search.build import build_search, optuna_searcher
from tuner.search.filtering import FilteringSearcher
from tuner.search.memory import FailureMemory
from tuner.search.space_searcher import SpaceSearcher
from tuner.search.staged import StagedSearcher
from tuner.spec import Objective


def _small() -> SearchSpace:
    return from_mapping({"name": "t", "knobs": {
        "NCCL_ALGO": ["allreduce:ring", "allreduce:tree", "Tree"],
        "NCCL_MIN_NCHANNELS": [2, 8], "NCCL_MAX_NCHANNELS": [4, 16]}}, "test")


def test_random_starts_with_baseline_and_never_repeats_or_suggests_invalid() -> None:
    space = _small()
    searcher = SpaceSearcher(space, "random", seed=1)
    seen = []
    while True:
        point = searcher.suggest(f"t{len(seen)}")
        if point == Searcher.FINISHED:
            break
        assert isinstance(point, dict)
        seen.append(point)
    assert seen[0] == space.baseline()
    keys = [tuple(sorted(p.items(), key=lambda kv: kv[0])) for p in seen]
    assert len(keys) == len(set(keys))
    assert all(not space.validate(p) for p in seen)
    assert len(seen) == space.valid_size()


def test_grid_enumerates_every_point_including_invalid_ones() -> None:
    space = _small()
    searcher = SpaceSearcher(space, "grid")
    points = []
    while (p := searcher.suggest(str(len(points)))) != Searcher.FINISHED:
        points.append(p)
    assert points[0] == space.baseline()
    assert len(points) == space.size
    assert any(space.validate(p) for p in points)  # recorded by the trial as invalid_config


def test_filtering_optuna_rejects_invalid_as_failures_and_answers_repeats() -> None:
    space = _small()
    objective = Objective("tok_s", "max", 1)
    rejected: list[dict[str, Any]] = []
    inner = optuna_searcher(space, objective, seed=0)
    searcher = FilteringSearcher(inner, space, on_reject=rejected.append)
    searcher.set_search_properties("tok_s", "max", {})
    launched = []
    for i in range(12):
        point = searcher.suggest(f"t{i}")
        if not isinstance(point, dict):
            break
        assert not space.validate(point)
        launched.append(point)
        searcher.on_trial_complete(f"t{i}", {"tok_s": 100.0 + i})
    assert launched[0] == space.baseline()
    keys = [str(sorted(p.items(), key=lambda kv: kv[0])) for p in launched]
    assert len(keys) == len(set(keys)), "an already-measured config was launched again"
    study = inner._ot_study  # type: ignore[attr-defined]
    states = {t.state.name for t in study.trials}
    assert "FAIL" in states and rejected
    assert all(r["invalid"] or r.get("repeat_of") for r in rejected)


def _crash_launches(inner: Searcher, memory: FailureMemory, space: SearchSpace) -> int:
    searcher = FilteringSearcher(inner, space, memory=memory)
    searcher.set_search_properties("tok_s", "max", {})
    tree_launches = 0
    for i in range(40):
        point = searcher.suggest(f"t{i}")
        if not isinstance(point, dict):
            break
        crashed = point["NCCL_ALGO"] == "Tree"
        tree_launches += crashed
        searcher.on_trial_complete(f"t{i}", None if crashed else {"tok_s": 1.0}, error=crashed)
        searcher.record_outcome(f"t{i}", point, "graph_capture" if crashed else None)
    assert [e["value"] for e in memory.evidence()] == ["Tree"]
    return tree_launches


def test_failure_aware_wrapper_stops_launching_a_crashing_value() -> None:
    """Random search convicts once the crashes have nothing else in common (a few launches);
    the default search tries each value alone on the baseline first: one launch."""
    space = _small()
    launches = []
    for seed in range(5):
        memory = FailureMemory(space.baseline())
        launches.append(_crash_launches(SpaceSearcher(space, "random", seed=seed), memory,
                                        space))
    assert max(launches) <= 3
    memory = FailureMemory(space.baseline())
    assert _crash_launches(AutoSearcher(space, 1, 0, "tok_s", "max", memory), memory, space) == 1


def test_staged_search_pins_each_stage_winner() -> None:
    space = load_preset("verify-campaign")
    objective = Objective("tok_s", "max", 2)
    searcher = StagedSearcher(space, total_samples=40, rounds=2,
                              make_inner=lambda s, seed, kind: SpaceSearcher(s, "grid", seed),
                              metric="tok_s", mode="max")

    def score(cfg: dict[str, Any]) -> float:
        return (2.0 if cfg["NCCL_ALGO"] == "allreduce:tree" else 1.0) + random.random() * 0.01

    stages_seen = []
    i = 0
    while True:
        point = searcher.suggest(f"t{i}")
        if point == Searcher.FINISHED:
            break
        assert isinstance(point, dict)
        stages_seen.append(searcher.stage_of[f"t{i}"])
        for r in (1, 2):
            searcher.on_trial_result(f"t{i}", {"tok_s": score(point), "round": r})
        searcher.on_trial_complete(f"t{i}", {"tok_s": score(point)})
        if stages_seen[-1] not in ("baseline", "allreduce"):
            assert point["NCCL_ALGO"] == searcher.winners["NCCL_ALGO"]
        i += 1
    assert stages_seen[0] == "baseline"
    assert [h.stage for h in searcher.history][:2] == ["baseline", "allreduce"]
    assert searcher.winners["NCCL_ALGO"] == "allreduce:tree"
    assert objective.metric == "tok_s"


def test_build_search_wraps_everything_once(tmp_path: Path) -> None:
    space = _small()
    stack = build_search(space, Objective("tok_s", "max", 2), search="grid",
                         stage_search="random", samples=100, seed=0, failure_aware=True,
                         max_concurrent=1, out_dir=tmp_path)
    assert stack.num_samples == space.size
    assert stack.filtering.pass_invalid


def test_optuna_stuck_on_a_crashing_value_falls_back_to_random_points() -> None:
    space = _small()
    inner = optuna_searcher(space, Objective("tok_s", "max", 1), seed=0)
    memory = FailureMemory(space.baseline())
    searcher = FilteringSearcher(inner, space, memory=memory, max_attempts=5)
    searcher.set_search_properties("tok_s", "max", {})
    launched = 0
    for i in range(12):
        point = searcher.suggest(f"t{i}")
        if not isinstance(point, dict):
            break
        launched += 1
        crashed = point["NCCL_ALGO"] == "Tree"
        searcher.record_outcome(f"t{i}", point, "graph_capture" if crashed else None)
        searcher.on_trial_complete(f"t{i}", None if crashed else {"tok_s": 1.0 + i},
                                   error=crashed)
    assert launched == min(12, space.valid_size() or 0)


def _shape_space() -> SearchSpace:
    return from_mapping({"name": "s", "knobs": {
        "--speculative-num-steps": [3], "--speculative-eagle-topk": [1],
        "--speculative-num-draft-tokens": [3, 4]}}, "test")


def _launched(searcher: FilteringSearcher) -> list[dict[str, Any]]:
    out = []
    while (point := searcher.suggest(f"t{len(out)}")) not in (None, Searcher.FINISHED):
        assert isinstance(point, dict)
        out.append(point)
        searcher.on_trial_complete(f"t{len(out) - 1}", result={"verify_ms": 1.0})
    return out


def test_configurations_sglang_resolves_alike_are_one_point() -> None:
    """With topk 1 SGLang sets the draft tokens to steps + 1: (3, 1, 3) and (3, 1, 4) run
    the same shape, so the second is answered from the first and logged as its repeat, never
    launched; the partial shapes (topk or draft tokens without steps) are never proposed."""
    space = _shape_space()
    repeats: list[dict[str, Any]] = []
    searcher = FilteringSearcher(SpaceSearcher(space, "grid"), space,
                                 on_reject=repeats.append)
    searcher.set_search_properties("verify_ms", "min", {})
    shapes = [tuple(p[k] for k in space.domains) for p in _launched(searcher)]
    assert (3, 1, 3) in shapes and (3, 1, 4) not in shapes
    assert all(s[0] is not None or s == (None, None, None) for s in shapes)
    repeat = [r for r in repeats if r.get("repeat_of")]
    assert [r["config"]["--speculative-num-draft-tokens"] for r in repeat] == [4]


def test_the_workloads_own_identity_decides_when_it_can() -> None:
    """Where SGLang's resolution runs (the workload's identity), it says which configurations
    are one point; where it cannot (None), SGLang's known rules do."""
    space = _shape_space()
    one_point = FilteringSearcher(SpaceSearcher(space, "grid"), space,
                                  identity=lambda c: "same" if c.get(
                                      "--speculative-num-steps") else None)
    one_point.set_search_properties("verify_ms", "min", {})
    steps = [p["--speculative-num-steps"] for p in _launched(one_point)]
    assert steps == [None, 3]


def _refused_without_topk(config: Any) -> str | None:
    """SGLang 0.5.16's own resolution on the H200: steps without topk is a TypeError."""
    if config.get("--speculative-num-steps") and config.get("--speculative-eagle-topk") is None:
        return "SGLang's checks rejected the command: TypeError: '>' not supported"
    return None


def _run(searcher: FilteringSearcher, refusal: Any) -> list[dict[str, Any]]:
    """Launch until the searcher ends; a refused config fails as its preflight would."""
    out: list[dict[str, Any]] = []
    while (point := searcher.suggest(f"t{len(out)}")) not in (None, Searcher.FINISHED):
        assert isinstance(point, dict)
        trial, out = f"t{len(out)}", [*out, point]
        kind = "invalid_config" if refusal(point) else None
        searcher.record_outcome(trial, point, kind)
        searcher.on_trial_complete(trial, None if kind else {"verify_ms": 1.0}, error=bool(kind))
    return out


def test_a_combination_sglang_refuses_convicts_no_value() -> None:
    """The H200 campaign's grid: ``--speculative-num-steps 3`` alone failed SGLang's checks
    (no topk), the baseline ran, and the memory ruled out steps 3 for good, so (3, 1, 4),
    which SGLang accepts, never ran. A refusal the workload's checks name is a fact about that
    configuration: grid still launches it to record it, and nothing is ruled out."""
    space = from_mapping({"name": "s", "knobs": {
        "--speculative-num-steps": [3], "--speculative-eagle-topk": [1],
        "--speculative-num-draft-tokens": [4]}}, "test")
    memory = FailureMemory(space.baseline())
    rejected: list[dict[str, Any]] = []
    searcher = FilteringSearcher(SpaceSearcher(space, "grid"), space, memory=memory,
                                 pass_invalid=True, on_reject=rejected.append,
                                 refusal=_refused_without_topk)
    searcher.set_search_properties("verify_ms", "min", {})
    shapes = [tuple(p[k] for k in space.domains) for p in _run(searcher, _refused_without_topk)]
    assert (3, None, None) in shapes and (3, 1, 4) in shapes, shapes
    assert memory.evidence() == [] and not [r for r in rejected if r["ruled_out"]]


def test_a_configuration_sglang_refuses_on_the_driver_is_never_launched() -> None:
    """Any search but grid: what the workload's checks refuse on the driver is logged with
    SGLang's reason and never launched (an always-invalid value costs no launch)."""
    space = from_mapping({"name": "s", "knobs": {
        "--speculative-num-steps": [2, 3], "--speculative-eagle-topk": [1],
        "NCCL_PROTO": ["LL", "Simple"]}}, "test")
    rejected: list[dict[str, Any]] = []
    searcher = FilteringSearcher(SpaceSearcher(space, "random", seed=3), space,
                                 memory=FailureMemory(space.baseline()),
                                 on_reject=rejected.append, refusal=_refused_without_topk)
    searcher.set_search_properties("verify_ms", "min", {})
    launched = _run(searcher, _refused_without_topk)
    assert launched and not [p for p in launched if _refused_without_topk(p)]
    refused = [r for r in rejected if r["invalid"]]
    assert refused and all("TypeError" in r["invalid"][0] for r in refused)
    assert len(launched) == sum(1 for p in space.grid() if not _refused_without_topk(p)
                                and not space.validate(p))
