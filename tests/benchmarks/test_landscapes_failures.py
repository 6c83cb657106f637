"""The failure landscapes of issue 31: no search rules out a value of the optimum's, and on
the real-SGLang speculative spaces (SGLang 0.5.16's refusal of steps without topk) fewer than
10% of the default search's proposals are refused: a lever refused alone is completed with
the partners SGLang resolved for the baseline."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import pytest

from benchmarks.landscapes import Landscape, valid_points
from benchmarks.landscapes_failures import (
    BASELINE_SHAPE,
    NAMES,
    failure_landscape,
    refusal_0516,
    resolved_shape,
    spec_tok_s,
)
from benchmarks.search_efficiency import _noise
from search_spaces.constraints import SHAPE
from search_spaces.knobs import Value
from search_spaces.space import SearchSpace, load
from tuner.search.budget import sized_budget
from tuner.search.build import build_search
from tuner.search.filtering import FilteringSearcher
from tuner.spec import Objective

SEEDS = range(4)


def _search(landscape: Landscape, search: str, seed: int) -> FilteringSearcher:
    """One search at the sized budget, driven as Ray drives it (4 rounds, 2% noise)."""
    metric, mode = landscape.metric, landscape.mode
    budget = sized_budget(landscape.space).trials
    stack = build_search(landscape.space, Objective(metric, mode, 4), search=search,
                         stage_search="random", samples=budget, seed=seed, failure_aware=True,
                         max_concurrent=1, out_dir=None,
                         refusal=getattr(landscape, "refusal", None),
                         resolved=getattr(landscape, "resolved", None))
    alg, filtering = stack.search_alg, stack.filtering
    alg.set_search_properties(metric, mode, {})
    for trial in range(budget):
        trial_id = f"t{trial}"
        config = alg.suggest(trial_id)
        if not isinstance(config, dict):
            break
        truth = landscape.evaluate(config)
        if truth is None:
            alg.on_trial_complete(trial_id, error=True)
            filtering.record_outcome(trial_id, config, landscape.failure(config))
            continue
        for index in range(4):
            result = {metric: truth * _noise(seed, trial, index, 0.02), "round": index + 1}
            alg.on_trial_result(trial_id, result)
        alg.on_trial_complete(trial_id, result=result)
        filtering.record_outcome(trial_id, config, None)
    return filtering


def _optimum(landscape: Landscape) -> dict[str, Value]:
    sign = 1.0 if landscape.mode == "max" else -1.0
    scored = ((sign * v, i, p) for i, p in enumerate(valid_points(landscape.space))
              if (v := landscape.evaluate(p)) is not None)
    return max(scored, key=lambda s: (s[0], -s[1]))[2]


def test_the_patterns_hold_in_the_landscapes() -> None:
    oom = failure_landscape("conditional-oom")
    best = _optimum(oom)
    assert best["--cuda-graph-max-bs-decode"] == 64 and best["--mem-fraction-static"] == "0.8"
    assert oom.evaluate({**oom.space.baseline(), "--cuda-graph-max-bs-decode": 64}) is None
    spec = failure_landscape("refused-alone")
    best = _optimum(spec)
    assert (best["--speculative-num-steps"], best["--speculative-eagle-topk"]) == (3, 4)
    steps_alone = {**spec.space.baseline(), "--speculative-num-steps": 3}
    assert refusal_0516(steps_alone) and spec.evaluate(steps_alone) is None


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("search", ["auto", "random"])
def test_no_run_rules_out_a_value_of_the_optimum(name: str, search: str) -> None:
    landscape = failure_landscape(name)
    best = _optimum(landscape)
    for seed in SEEDS:
        memory = _search(landscape, search, seed).memory
        assert memory is not None
        ruled = {(e["knob"], repr(e["value"])) for e in memory.evidence()}
        assert not ruled & {(n, repr(v)) for n, v in best.items()}, (seed, ruled)


def _speculative(space: SearchSpace) -> Landscape:
    """A real-SGLang speculative space on SGLang 0.5.16, its baseline resolved to
    BASELINE_SHAPE; a knob the model does not price is neutral, fa3 a missing module."""
    def evaluate(config: Mapping[str, Value]) -> float | None:
        if config.get("--decode-attention-backend") == "fa3":
            return None
        return spec_tok_s({**config, "NCCL_PROTO": None})

    from benchmarks.landscapes_failures import WorkloadLandscape

    return WorkloadLandscape(space.name, space, evaluate, "speculative on 0.5.16",
                             failure=lambda c: "missing_module", refusal=refusal_0516,
                             resolved=resolved_shape)


@pytest.mark.parametrize("space", ["speculative", "benchmarks/sglang-h200-tiny.yaml",
                                   "refused-alone"])
def test_refused_proposals_stay_under_a_tenth_of_the_defaults(space: str) -> None:
    landscape = failure_landscape(space) if space in NAMES else _speculative(load(space))
    for seed in SEEDS:
        counts = _search(landscape, "auto", seed).counts()
        assert counts["refused"] < 0.1 * counts["proposals"], (seed, counts)


def test_every_speculative_point_the_landscape_prices_has_a_shape() -> None:
    space = load("speculative")
    for point in itertools.islice(valid_points(space), 200):
        if not refusal_0516(point):
            assert spec_tok_s({**point, "NCCL_PROTO": None}) is not None
    assert resolved_shape(space.baseline()) == dict(zip(SHAPE, BASELINE_SHAPE, strict=True))
