"""How the default search refines what it found (tuner/search/refine.py, pairs.py): reverts
after a model-phase move, repeat passes made stale by several small gains and ordered by what
the values measured, the combined point of the run's one-lever pairs, and joint draws that
complete a value with the partner it needs."""

from __future__ import annotations

import math
import random
from typing import Any

from search_spaces.knobs import Value
from search_spaces.space import SearchSpace, from_mapping
from tuner.search.auto import MODEL, SWEEP, AutoSearcher
from tuner.search.levers import joint_draw
from tuner.search.pairs import combined_point, local_shortfall, pooled_effects
from tuner.search.refine import CONSENSUS, REVERTS

QPS, SPLIT, PEER = ("NCCL_IB_QPS_PER_CONNECTION", "NCCL_IB_SPLIT_DATA_ON_QPS",
                    "NCCL_NCHANNELS_PER_NET_PEER")


def _space() -> SearchSpace:
    return from_mapping({"name": "r", "knobs": {
        "NCCL_PROTO": ["LL", "Simple"], "NCCL_MAX_NCHANNELS": [8, 16], QPS: [1, 2, 4],
        SPLIT: [0, 1], PEER: [1, 2, 4]}}, "test")


def _tell(searcher: AutoSearcher, trial_id: str, value: float) -> None:
    for r in (1, 2):
        searcher.on_trial_result(trial_id, {"tok_s": value, "round": r})
    searcher.on_trial_complete(trial_id, {"tok_s": value, "round": 2})


def test_pooled_effects_read_each_lever_from_pairs_one_lever_apart() -> None:
    base = {"a": 1, "b": 1}
    measured = [(base, 100.0), ({"a": 2, "b": 1}, 103.0),  # a=2: +3% beside b=1
                ({"a": 1, "b": 2}, 99.0), ({"a": 2, "b": 2}, 102.0),  # and beside b=2
                ({"a": 3, "b": 3}, 200.0)]  # two levers apart from every other: no pair
    effects = pooled_effects(["a", "b"], measured, 1.0, ridge=1e-6)
    assert set(effects["a"]) == {1, 2} and set(effects["b"]) == {1, 2}
    assert math.isclose(effects["a"][2] - effects["a"][1], math.log(1.03), rel_tol=0.02)
    assert effects["b"][2] < effects["b"][1]
    smaller = pooled_effects(["a", "b"], measured, -1.0, ridge=1e-6)  # verify ms: smaller wins
    assert smaller["a"][2] < smaller["a"][1]


def test_the_combined_point_sets_small_gains_together_and_keeps_the_rules() -> None:
    """Two levers each measured 1% better alone (below the noise): tried together. The
    split over queue pairs, measured better, is not set beside one queue pair (a rule)."""
    space = _space()
    best = space.complete({"NCCL_PROTO": "LL", "NCCL_MAX_NCHANNELS": 8, QPS: 1, SPLIT: 0})
    measured = [(best, 100.0), ({**best, "NCCL_MAX_NCHANNELS": 16}, 101.0),
                ({**best, PEER: 2}, 101.0), ({**best, "NCCL_PROTO": "Simple"}, 90.0),
                ({**best, QPS: 2, SPLIT: 1}, 99.0), ({**best, QPS: 2}, 98.0)]
    point = combined_point(space, best, measured, 1.0)
    assert point is not None and not space.validate(point)
    assert point["NCCL_MAX_NCHANNELS"] == 16 and point[PEER] == 2
    assert point["NCCL_PROTO"] == "LL"
    assert (point[QPS], point[SPLIT]) != (1, 1)
    assert combined_point(space, best, [(best, 100.0)], 1.0) is None  # nothing to change


def test_the_local_shortfall_is_what_a_change_cost_beside_the_best_point() -> None:
    best = {"a": 1, "b": 1}
    measured = [(best, 100.0), ({"a": 2, "b": 1}, 80.0), ({"a": 2, "b": 2}, 120.0)]
    assert math.isclose(local_shortfall(["a", "b"], measured, 1.0, best, "a", 2),
                        math.log(100 / 80))
    # a value not measured beside it: the least any other value of the lever cost there
    assert local_shortfall(["a", "b"], measured, 1.0, best, "a", 3) == \
        local_shortfall(["a", "b"], measured, 1.0, best, "a", 2)
    assert local_shortfall(["a", "b"], measured, 1.0, best, "b", 2) is None  # two apart
    assert local_shortfall(["a", "b"], measured, 1.0, {"a": 9, "b": 9}, "a", 2) is None


def test_a_joint_draw_completes_a_value_with_the_partner_it_needs() -> None:
    """The split over queue pairs needs two or more: drawn beside one queue pair, the draw
    takes the first partner value that lets it run instead of being thrown away."""
    space = _space()
    best = space.complete({QPS: 1})
    choices: dict[str, list[Value]] = {SPLIT: [1], QPS: [1]}
    draws = [joint_draw(space, best, choices, random.Random(seed)) for seed in range(5)]
    assert all(d is not None and d[SPLIT] == 1 and d[QPS] in (2, 4) for d in draws)


def test_a_model_move_sets_each_lever_it_changed_back_one_at_a_time() -> None:
    space = _space()
    searcher = AutoSearcher(space, 2, 0, "tok_s", "max")
    searcher.set_search_properties("tok_s", "max", {})
    old = searcher.suggest("t0")
    _tell(searcher, "t0", 100.0)
    jump = {**old, "NCCL_PROTO": "Simple", QPS: 2, SPLIT: 1}
    searcher._launch("t1", jump, MODEL)
    _tell(searcher, "t1", 130.0)  # far beyond the noise
    reverts = []
    for i in range(2, 6):
        point = searcher.suggest(f"t{i}")
        if searcher.refined.get(f"t{i}") is None:
            break
        reverts.append({n: v for n, v in point.items() if v != jump.get(n)})
        assert searcher.phase_of[f"t{i}"] == SWEEP
        _tell(searcher, f"t{i}", 120.0)
    # each changed lever back at the old value alone; the split cannot go back beside two
    # queue pairs without them, so it is not reverted on the baseline instead
    assert {"NCCL_PROTO": None} in reverts and {QPS: None} not in reverts
    assert all(len(r) == 1 for r in reverts)
    # a probe of an ordinary sweep moving the best point queues none
    searcher.revert = []
    searcher.probed["t9"] = ("NCCL_PROTO", "LL")
    searcher._launch("t9", {**jump, "NCCL_PROTO": "LL"}, SWEEP)
    _tell(searcher, "t9", 200.0)
    assert searcher.revert == []


def test_reverts_that_tie_the_model_move_are_set_back_together() -> None:
    """The model's point was measured high (the best of many): two of its reverts tie it,
    one costs much; once the chain is done, the two go back together, the third stays."""
    space = _space()
    searcher = AutoSearcher(space, 2, 0, "tok_s", "max")
    searcher.set_search_properties("tok_s", "max", {})
    searcher._noise = lambda: 0.02  # type: ignore[method-assign]
    old = searcher.suggest("t0")
    _tell(searcher, "t0", 100.0)
    jump = {**old, "NCCL_PROTO": "Simple", "NCCL_MAX_NCHANNELS": 16, PEER: 4}
    searcher._launch("t1", jump, MODEL)
    _tell(searcher, "t1", 130.0)
    measured = {"NCCL_PROTO": 129.0, "NCCL_MAX_NCHANNELS": 131.0, PEER: 110.0}
    together = None
    for i in range(2, 8):
        point = searcher.suggest(f"t{i}")
        lever = searcher.refined.get(f"t{i}")
        if lever == REVERTS:
            together = point
            break
        assert lever in measured
        _tell(searcher, f"t{i}", measured[lever])
    assert together is not None and searcher.phase_of[f"t{i}"] == MODEL
    assert together["NCCL_PROTO"] == old["NCCL_PROTO"]
    assert together["NCCL_MAX_NCHANNELS"] == old["NCCL_MAX_NCHANNELS"]
    assert together[PEER] == 4  # its revert cost far more than the noise: it stays


def test_small_gains_by_other_levers_add_up_to_a_stale_lever() -> None:
    searcher = AutoSearcher(_space(), 2, 0, "tok_s", "max")
    searcher.started = {"NCCL_PROTO": 0, PEER: 5}
    searcher._noise = lambda: 0.02  # type: ignore[method-assign]
    searcher.gains = [(3, PEER, 0.012)]
    assert "NCCL_PROTO" not in searcher.stale()  # one gain below the noise
    searcher.gains.append((6, "NCCL_MAX_NCHANNELS", 0.012))
    assert "NCCL_PROTO" in searcher.stale()  # two of them add up beyond it
    assert PEER not in searcher.stale()  # its own gain and one after its start: not enough
    searcher.gains.append((4, "NCCL_PROTO", 0.5))  # before the peer sweep started
    assert PEER not in searcher.stale()


def test_a_repeat_pass_tries_the_values_closest_to_their_best_first() -> None:
    """Channels' 16 measured 1% below 8 in its sweep, the protocol's Simple 20% below LL:
    16 comes first; a value that cannot run beside the best point is not tried alone."""
    space = _space()
    searcher = AutoSearcher(space, 2, 0, "tok_s", "max")
    searcher.set_search_properties("tok_s", "max", {})
    best = space.complete({"NCCL_PROTO": "LL", "NCCL_MAX_NCHANNELS": 8, QPS: 2, SPLIT: 1})
    searcher._launch("t0", best, MODEL)
    _tell(searcher, "t0", 100.0)
    searcher.swept = {"NCCL_PROTO": {"LL": 100.0, "Simple": 80.0, None: 90.0},
                      "NCCL_MAX_NCHANNELS": {8: 100.0, 16: 99.0, None: 95.0},
                      QPS: {2: 100.0, 1: 97.0}}
    searcher.gains = [(0, "elsewhere", 1.0)]  # every lever stale
    searcher.plan, searcher.early, searcher.early_done = [], 1, 1
    searcher._repeat_pass()
    assert searcher.queue[0] == ("NCCL_MAX_NCHANNELS", 16)
    order = [entry for entry in searcher.queue if entry[0] == "NCCL_PROTO"]
    assert order == [("NCCL_PROTO", None), ("NCCL_PROTO", "Simple")]
    tried: list[dict[str, Any]] = []
    for i in range(1, 12):
        point = searcher.suggest(f"t{i}")
        if searcher.phase_of.get(f"t{i}") != SWEEP or f"t{i}" not in searcher.probed:
            break
        tried.append(point)
        _tell(searcher, f"t{i}", 90.0)
    assert tried[0]["NCCL_MAX_NCHANNELS"] == 16
    # each a one-lever change of the best point: QPS=1 beside the split cannot run and is
    # skipped, not tried on the baseline instead
    assert all(sum(p[n] != best[n] for n in space.domains) == 1 for p in tried)
    assert not any(p[QPS] == 1 for p in tried)


def test_the_combined_point_is_tried_when_the_sweeps_end() -> None:
    space = _space()
    searcher = AutoSearcher(space, 2, 0, "tok_s", "max")
    searcher.set_search_properties("tok_s", "max", {})
    best = space.complete({"NCCL_PROTO": "LL"})
    for i, (point, value) in enumerate([(best, 100.0), ({**best, PEER: 2}, 101.0),
                                        ({**best, "NCCL_MAX_NCHANNELS": 16}, 101.0)]):
        searcher._launch(f"t{i}", point, SWEEP)
        _tell(searcher, f"t{i}", value)
    searcher.plan, searcher.early, searcher.early_done = [], 1, 1
    point = searcher.suggest("t3")
    assert searcher.refined.get("t3") == CONSENSUS
    assert point[PEER] == 2 and point["NCCL_MAX_NCHANNELS"] == 16
