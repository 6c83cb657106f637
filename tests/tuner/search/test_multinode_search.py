"""Searching the nccl-multinode space: no search launches the split over one queue pair (grid
proposes it marked invalid, recorded without a server); an inner searcher that asks for it is
refused. The time estimate waits for the slowest node of a trial across nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from search_spaces.space import load_preset
from tuner.search.budget import estimate, slowest_start
from tuner.search.build import build_search, proposals
from tuner.search.filtering import FilteringSearcher
from tuner.search.fixed import FixedPoints
from tuner.search.levers import probe
from tuner.spec import Objective

SPLIT, QPS = "NCCL_IB_SPLIT_DATA_ON_QPS", "NCCL_IB_QPS_PER_CONNECTION"


def one_queue_pair_split(point: dict[str, object]) -> bool:
    return point[SPLIT] == 1 and point[QPS] in (None, 1)


@pytest.mark.parametrize("search", ["auto", "random", "staged", "grid"])
def test_no_search_launches_the_split_over_one_queue_pair(tmp_path: Path, search: str) -> None:
    space = load_preset("nccl-multinode")
    stack = build_search(space, Objective("tok_s", "max", 2), search=search,
                         stage_search="random", samples=None if search != "grid" else 400,
                         seed=0, failure_aware=True, max_concurrent=1, out_dir=tmp_path,
                         workload="sglang", nodes=2)
    planned = [config for _, config in proposals(stack, stack.num_samples)]
    assert len(planned) == stack.num_samples
    if search == "grid":  # every point, shown invalid: the trial records it, no server starts
        split = [p for p in planned if one_queue_pair_split(p)]
        assert split and all("no effect with one queue pair" in space.validate(p)[0]
                             for p in split)
    else:
        assert not any(one_queue_pair_split(p) for p in planned)
    if search == "auto":  # still swept, beside a point with more queue pairs
        assert any(p[SPLIT] == 1 for p in planned)


def test_a_suggested_split_over_one_queue_pair_is_refused_not_launched() -> None:
    space = load_preset("nccl-multinode")
    base = space.baseline()
    asked = [{**base, SPLIT: 1}, {**base, SPLIT: 1, QPS: 1}, {**base, SPLIT: 1, QPS: 2}]
    rejected: list[dict[str, object]] = []
    searcher = FilteringSearcher(FixedPoints(asked, ["a", "b", "c"]), space,
                                 on_reject=rejected.append)
    searcher.set_search_properties("tok_s", "max", {})
    assert searcher.suggest("t0") == {**base, SPLIT: 1, QPS: 2}  # the one that can run
    assert [r["config"][QPS] for r in rejected] == [None, 1]
    assert all("one queue pair" in r["invalid"][0] for r in rejected)


def test_a_trial_across_nodes_starts_with_its_slowest_node() -> None:
    assert slowest_start(60.0, 1) == 60.0
    two, four = slowest_start(60.0, 2), slowest_start(60.0, 4)
    assert 60.0 < two < four < 60.0 * 1.11  # the slowest of N starts within the spread
    one = estimate(10, 6, "sglang")
    across = estimate(10, 6, "sglang", nodes=2)
    assert one is not None and across is not None and "nodes" not in one
    assert "62 s to ready for the slowest of 2 nodes, 6 rounds" in across


def test_the_sweep_tries_the_split_beside_its_first_partner_that_lets_it_run() -> None:
    space = load_preset("nccl-multinode")
    base = space.baseline()
    assert probe(space, base, SPLIT, 1) == {**base, SPLIT: 1, QPS: 2}
    assert probe(space, {**base, QPS: 4}, SPLIT, 1) == {**base, SPLIT: 1, QPS: 4}
    assert probe(space.with_pins({QPS: 1}), base, SPLIT, 1) is None  # no partner left
