"""The default search, driven by hand as Ray drives it: the baseline, each lever's values one
at a time in order of expected effect on the best point so far, sweeps again where a later
lever moved the best point, then the model (Optuna's multivariate TPE); and the budget sized
from the space."""

from __future__ import annotations

import json
import math
import pickle
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ray.tune.search import Searcher

from search_spaces import knobs
from search_spaces.knobs import Value
from search_spaces.space import SearchSpace, from_mapping
from tuner.record.files import JOURNAL, append_jsonl
from tuner.run.replay import replay, search_state
from tuner.search.auto import BASELINE, MODEL, SWEEP, AutoSearcher
from tuner.search.auto_model import TURNS
from tuner.search.budget import MODEL_TURNS, estimate, sized_budget, sweep_size
from tuner.search.build import build_search
from tuner.search.filtering import FilteringSearcher
from tuner.search.levers import joint_draw, lever_order, newest, probe, ties, value_order
from tuner.search.memory import FailureMemory
from tuner.search.model import TPEModel
from tuner.spec import Objective

BACKEND = "allreduce-backend"
DRAFTS = "--speculative-num-draft-tokens"
STEPS = "--speculative-num-steps"


def _space(**extra: Any) -> SearchSpace:
    return from_mapping({"name": "a", "knobs": {
        "NCCL_MAX_NCHANNELS": [4, 16], "NCCL_PROTO": ["LL", "Simple"],
        BACKEND: ["nccl", "pcie-ipc", "torch-symm-mem"], DRAFTS: [2, 6], **extra},
        "pins": {STEPS: 7}}, "test")  # draft tokens alone would be a partial shape


def _drive(searcher: Searcher, score: Callable[[dict[str, Any]], float | None],
           budget: int, memory: FailureMemory | None = None) -> list[dict[str, Any]]:
    """Ray's loop, one trial at a time; ``score`` None: the trial fails (graph_capture)."""
    searcher.set_search_properties("tok_s", "max", {})
    launched = []
    for i in range(budget):
        point = searcher.suggest(f"t{i}")
        if point is None or point == Searcher.FINISHED:
            break
        assert isinstance(point, dict)
        launched.append(point)
        value = score(point)
        if value is None:
            searcher.on_trial_complete(f"t{i}", error=True)
        else:
            for r in (1, 2):
                searcher.on_trial_result(f"t{i}", {"tok_s": value, "round": r})
            searcher.on_trial_complete(f"t{i}", {"tok_s": value, "round": 2})
        if isinstance(searcher, FilteringSearcher):
            searcher.record_outcome(f"t{i}", point, None if value is not None else "graph_capture")
    return launched


def _separable(point: dict[str, Any]) -> float | None:
    """pcie-ipc triples the metric, torch-symm-mem crashes; the rest a few percent each."""
    if point[BACKEND] == "torch-symm-mem":
        return None
    value = 100.0 * (3.0 if point[BACKEND] == "pcie-ipc" else 1.0)
    value *= {None: 1.0, 4: 1.04, 16: 0.98}[point["NCCL_MAX_NCHANNELS"]]
    value *= {None: 1.0, "LL": 1.06, "Simple": 0.95}[point["NCCL_PROTO"]]
    return value * {None: 1.0, 2: 0.8, 6: 1.1}[point[DRAFTS]]


def test_levers_come_largest_effect_first_and_nccls_shrink_off_its_path() -> None:
    space = _space()
    assert lever_order(space) == [BACKEND, "NCCL_PROTO", DRAFTS, "NCCL_MAX_NCHANNELS"]
    # with PCIe-IPC serving the allreduces, NCCL's own knobs move little
    assert lever_order(space, {**space.baseline(), BACKEND: "pcie-ipc"}) == [
        BACKEND, DRAFTS, "NCCL_MAX_NCHANNELS", "NCCL_PROTO"]
    assert knobs.effect("NCCL_PROTO") == pytest.approx(1.1)
    assert knobs.effect("NCCL_PROTO", {BACKEND: "pcie-ipc"}) == pytest.approx(1.01)
    assert knobs.effect("NCCL_PROTO", {BACKEND: "nccl"}) == pytest.approx(1.1)
    assert knobs.effect("a-knob-the-catalogue-lacks") == pytest.approx(1.1)
    assert knobs.joint("NCCL_PROTO", "NCCL_MAX_NCHANNELS") and knobs.joint(BACKEND, "NCCL_ALGO")
    assert not knobs.joint(DRAFTS, "NCCL_PROTO")


def test_numeric_values_from_the_ends_inwards() -> None:
    assert value_order((None, 2, 4, 8, 16)) == [None, 16, 2, 8, 4]
    assert value_order((None, "LL", "Simple")) == [None, "LL", "Simple"]
    steps_topk = from_mapping({"name": "s", "knobs": {
        "--speculative-num-steps": [1], "--speculative-eagle-topk": [1],
        DRAFTS: [4]}}, "test")
    around = {**steps_topk.baseline(), "--speculative-num-steps": 1,
              "--speculative-eagle-topk": 1}
    # 1 * 1 + 1 < 4 draft tokens, and on the baseline 4 draft tokens alone are a partial
    # shape SGLang asserts on: no point to try the value on
    assert probe(steps_topk, around, DRAFTS, 4) is None
    shaped = from_mapping({"name": "s", "knobs": {"--speculative-eagle-topk": [1], DRAFTS: [4]},
                           "pins": {"--speculative-num-steps": 1}}, "test")
    around = {**shaped.baseline(), "--speculative-eagle-topk": 1}
    # 1 * 1 + 1 < 4 draft tokens: the value is tried on the baseline (steps pinned) instead
    assert probe(shaped, around, DRAFTS, 4) == {**shaped.baseline(), DRAFTS: 4}


def test_the_sweep_builds_on_the_best_and_reaches_a_separable_optimum() -> None:
    space = _space()
    memory = FailureMemory(space.baseline())
    searcher = AutoSearcher(space, 2, 0, "tok_s", "max", memory)
    launched = _drive(FilteringSearcher(searcher, space, memory=memory), _separable,
                      budget=sweep_size(space) + 3)
    assert launched[0] == space.baseline()
    assert [searcher.phase_of[f"t{i}"] for i in range(2)] == [BASELINE, SWEEP]
    # pcie-ipc beat everything any lever was expected to do: it is built on at once (drafts
    # next, NCCL's knobs last, as they act off its path), and the backend's last value waits
    # for the end of the pass
    assert [p[BACKEND] for p in launched[1:3]] == ["nccl", "pcie-ipc"]
    assert [p[DRAFTS] for p in launched[3:5]] == [6, 2]
    assert all(p[BACKEND] == "pcie-ipc" for p in launched[3:8])
    best = searcher.best()
    assert (best[BACKEND], best["NCCL_PROTO"], best["NCCL_MAX_NCHANNELS"], best[DRAFTS]) == (
        "pcie-ipc", "LL", 4, 6)
    # torch-symm-mem crashed beside the best point, then alone on the baseline: ruled out
    crashes = [p for p in launched if p[BACKEND] == "torch-symm-mem"]
    assert len(crashes) == 2 and crashes[1] == {**space.baseline(), BACKEND: "torch-symm-mem"}
    assert [e["value"] for e in memory.evidence()] == ["torch-symm-mem"]


def test_a_value_failing_beside_others_is_tried_alone_on_the_baseline() -> None:
    space = _space()
    memory = FailureMemory(space.baseline())
    searcher = AutoSearcher(space, 2, 0, "tok_s", "max", memory)

    def long_drafts_crash(point: dict[str, Any]) -> float | None:
        return None if point[DRAFTS] == 2 else _separable(point)

    launched = _drive(FilteringSearcher(searcher, space, memory=memory), long_drafts_crash, 12)
    twos = [p for p in launched if p[DRAFTS] == 2]
    assert len(twos) == 2 and twos[1] == {**space.baseline(), DRAFTS: 2}
    assert {str(e["value"]) for e in memory.evidence()} >= {"2"}


def test_a_lever_swept_before_a_later_one_moved_the_best_is_swept_again() -> None:
    space = _space()

    def protocol_follows_drafts(point: dict[str, Any]) -> float | None:
        value = _separable(point)
        if value is not None and point[DRAFTS] == 6:  # long drafts want Simple, not LL
            value *= {None: 1.0, "LL": 0.9, "Simple": 1.2}[point["NCCL_PROTO"]]
        return value

    searcher = AutoSearcher(space, 2, 0, "tok_s", "max")
    launched = _drive(searcher, protocol_follows_drafts, budget=16)
    protocols = [(p["NCCL_PROTO"], p[DRAFTS]) for p in launched]
    assert ("Simple", 6) in protocols  # only a second sweep of NCCL_PROTO tries it
    assert searcher.best()["NCCL_PROTO"] == "Simple"


def test_then_the_model_never_repeats_and_the_search_ends_with_the_space() -> None:
    space = _space()
    searcher = AutoSearcher(space, 2, 0, "tok_s", "max")
    launched = _drive(searcher, lambda p: _separable(p) or 1.0, budget=200)
    keys = [str(sorted(p.items(), key=lambda kv: kv[0])) for p in launched]
    assert len(keys) == len(set(keys)) == space.valid_size()
    assert MODEL in searcher.phase_of.values()


def test_the_searcher_is_rebuilt_from_its_journal(tmp_path: Path) -> None:
    """No pickle: Ray's checkpoint is a marker, and a fresh searcher told the journal's trials
    (as a resume replays them) is where the first one was."""
    space = _space()
    first = AutoSearcher(space, 2, 0, "tok_s", "max")
    for i, point in enumerate(_drive(first, _separable, budget=7)):
        value, tid = _separable(point), f"t{i}"
        events: list[dict[str, Any]] = [{"event": "start", "trial_id": tid, "config": point}]
        events += [{"event": "end", "trial_id": tid, "status": "failed",
                    "failure": {"kind": "graph_capture"}}] if value is None else [
            *({"event": "result", "trial_id": tid, "tok_s": value, "round": r} for r in (1, 2)),
            {"event": "end", "trial_id": tid, "status": "ok"}]
        for event in events:
            append_jsonl(tmp_path / JOURNAL, event)
    first.save(str(tmp_path / "ckpt"))
    assert json.loads((tmp_path / "ckpt").read_text())["searcher"] == "AutoSearcher"
    again = AutoSearcher(space, 2, 0, "tok_s", "max")
    assert replay(search_state(tmp_path), again) == []
    assert again.best() == first.best() and again.launched == first.launched
    assert pickle.loads(pickle.dumps(again)).suggest("t7") == first.suggest("t7")


def test_the_model_finds_two_settings_that_pay_only_together() -> None:
    space = _space()
    model = TPEModel(space, "max", 0)
    base = space.baseline()

    def needle(point: dict[str, Any]) -> float:
        return 112.0 if point["NCCL_PROTO"] == "Simple" and point[DRAFTS] == 2 else 100.0

    seen: set[str] = set()
    for name, values in space.domains.items():  # a flat one-at-a-time sweep
        for value in values:
            point = {**base, name: value}
            if str(point) not in seen:
                model.add(point, needle(point))
                seen.add(str(point))
    model.add({**base, BACKEND: "torch-symm-mem", "NCCL_PROTO": "LL"}, None)  # a failure
    found = None
    for _ in range(20):
        drawn = model.propose(lambda p: str(p) not in seen)
        assert drawn is not None and not space.validate(drawn)
        seen.add(str(drawn))
        model.add(drawn, needle(drawn))
        if needle(drawn) > 100.0:
            found = drawn
            break
    assert found is not None
    again = pickle.loads(pickle.dumps(model))  # rebuilt from its points
    assert again.propose(lambda p: str(p) not in seen) is not None


def test_the_budget_is_sized_from_the_space_and_said_with_its_time(tmp_path: Path) -> None:
    space = _space()
    sized = sized_budget(space)
    # the baseline, one sweep, a repeat sweep and one round of the model phase's turns
    assert sized.sweep == 2 + 2 + 3 + 2 and sized.trials == 1 + 9 + 9 + len(TURNS)
    assert len(TURNS) == MODEL_TURNS
    assert "9 values of 4 knobs one at a time" in sized.why
    text = estimate(22, 6, "sglang")
    assert text is not None and text.startswith("about 44 min")
    assert estimate(22, 6, "something-else") is None
    stack = build_search(space, Objective("tok_s", "max", 6), search="auto",
                         stage_search="random", samples=None, seed=0, failure_aware=True,
                         max_concurrent=1, out_dir=tmp_path, workload="proxy")
    assert stack.num_samples == 25
    assert stack.notes[0].startswith("budget: 25 trials, sized from the space (the baseline, 9 ")
    assert "about 5 min 0 s at a typical proxy trial's 12 s" in stack.notes[0]
    given = build_search(space, Objective("tok_s", "max", 6), search="auto",
                         stage_search="random", samples=5, seed=0, failure_aware=True,
                         max_concurrent=1, out_dir=tmp_path)
    assert given.num_samples == 5 and not any(n.startswith("budget") for n in given.notes)
    small = from_mapping({"name": "s", "knobs": {"NCCL_PROTO": ["LL"]}}, "test")
    assert sized_budget(small).trials == 2  # never more than the valid points
    assert math.isclose(sum(1 for _ in small.grid()), 2)


NETWORK = ("NCCL_IB_SPLIT_DATA_ON_QPS", "NCCL_NET_GDR_LEVEL")  # the catalogue rates neither


def test_unrated_levers_get_a_middle_rating_and_keep_the_spaces_order() -> None:
    space = from_mapping({"name": "n", "knobs": {
        "NCCL_MAX_NCHANNELS": [2, 4, 8, 16, 32], NETWORK[0]: [0, 1], "NCCL_PROTO": ["LL"],
        NETWORK[1]: ["LOC", "PIX", "PXB", "PHB", "SYS"]}}, "test")
    assert [knobs.effect(n) for n in NETWORK] == [knobs.effect("NCCL_PROTO")] * 2
    # three middle ones in the space's order (not the most values first), the small one last
    assert lever_order(space) == [NETWORK[0], "NCCL_PROTO", NETWORK[1], "NCCL_MAX_NCHANNELS"]
    # a sweep that measured channels moving the metric by 15% puts them first
    assert lever_order(space, measured={"NCCL_MAX_NCHANNELS": 1.15})[0] == "NCCL_MAX_NCHANNELS"


def test_every_lever_is_swept_within_the_sized_budget() -> None:
    """A catalogue that rates a lever small cannot keep it out: with a value that wins more
    than anything was expected to (the cut) and values that fail (their rechecks), the first
    pass still sweeps every lever before the sized budget ends."""
    space = from_mapping({"name": "n", "knobs": {
        BACKEND: ["nccl", "pcie-ipc", "torch-symm-mem"], "NCCL_PROTO": ["LL", "Simple"],
        NETWORK[0]: [0, 1], NETWORK[1]: ["PIX", "PHB", "SYS"], "NCCL_BUFFSIZE": [262144, 1048576],
        "NCCL_MAX_NCHANNELS": [4, 16]}}, "test")

    def score(point: dict[str, Any]) -> float | None:
        if point[BACKEND] == "torch-symm-mem" or point[NETWORK[1]] == "SYS":
            return None
        value = 300.0 if point[BACKEND] == "pcie-ipc" else 100.0
        return value * (1.15 if point["NCCL_BUFFSIZE"] == 1048576 else 1.0)  # rated small

    memory = FailureMemory(space.baseline())
    searcher = AutoSearcher(space, 2, 0, "tok_s", "max", memory)
    budget = sized_budget(space).trials
    launched = _drive(FilteringSearcher(searcher, space, memory=memory), score, budget)
    assert len(launched) == budget
    assert {lever for lever, _ in searcher.probed.values()} == set(space.domains)
    assert searcher.best()["NCCL_BUFFSIZE"] == 1048576


def test_ties_are_the_values_within_the_noise_of_the_best() -> None:
    measured: dict[Value, float | None] = {None: 100.0, "LL": 101.5, "Simple": 90.0,
                                           "LL128": None}
    assert ties(measured, 0.02) == [None, "LL"]  # a failure ties with nothing
    assert ties(measured, 0.2) == [None, "LL", "Simple"]
    smaller: dict[Value, float | None] = {None: 10.0, 4: 9.9, 8: 12.0}
    assert ties(smaller, 0.02, sign=-1.0) == [None, 4]  # smaller wins
    assert ties({}, 0.02) == []


def test_a_joint_draw_sets_the_tied_levers_together_and_keeps_a_clear_best() -> None:
    space = _space()
    best = {**space.baseline(), BACKEND: "pcie-ipc"}
    choices: dict[str, list[Value]] = {BACKEND: ["pcie-ipc"], "NCCL_PROTO": [None, "LL", "Simple"],
               "NCCL_MAX_NCHANNELS": [None, 4, 16], DRAFTS: [None]}
    rng = random.Random(0)
    draws = [joint_draw(space, best, choices, rng) for _ in range(30)]
    assert all(d is not None and d[BACKEND] == "pcie-ipc" and d[DRAFTS] is None for d in draws)
    # the baseline's value is left out where a lever has others: set together, not unset
    assert {d["NCCL_PROTO"] for d in draws if d} == {"LL", "Simple"}
    assert {d["NCCL_MAX_NCHANNELS"] for d in draws if d} == {4, 16}


def test_the_model_phase_draws_levers_that_pay_only_together() -> None:
    """Three levers, each alone a little worse, the three together +15%: the one-at-a-time
    sweeps cannot see it; the model phase's joint draws set the tied levers together."""
    space = from_mapping({"name": "t", "knobs": {
        "NCCL_IB_QPS_PER_CONNECTION": [1, 2, 4], "NCCL_IB_SPLIT_DATA_ON_QPS": [0, 1],
        "NCCL_NCHANNELS_PER_NET_PEER": [1, 2, 4], "NCCL_PROTO": ["LL", "Simple"]}}, "test")

    def together(point: dict[str, Any]) -> float:
        value = {None: 100.0, "LL": 106.0, "Simple": 90.0}[point["NCCL_PROTO"]]
        on = [point["NCCL_IB_QPS_PER_CONNECTION"] in (2, 4),
              point["NCCL_IB_SPLIT_DATA_ON_QPS"] == 1,
              point["NCCL_NCHANNELS_PER_NET_PEER"] in (2, 4)]
        return value * (1.15 if all(on) else 0.99 if any(on) else 1.0)

    found = 0
    for seed in range(5):
        searcher = AutoSearcher(space, 2, seed, "tok_s", "max")
        launched = _drive(searcher, together, budget=36)
        model = [p for i, p in enumerate(launched) if searcher.phase_of[f"t{i}"] == MODEL]
        found += any(together(p) > 106.0 * 1.1 for p in model)
    assert found == 5


def test_a_suggestion_completed_with_partners_is_what_the_sweeps_build_on() -> None:
    """The filter completes a refused suggestion with partners and says so (``completed``):
    the searcher's best point is the configuration that ran, not the one it asked for; a
    completion with values outside the space is not adopted (the model knows none)."""
    space = _space()
    searcher = AutoSearcher(space, 2, 0, "tok_s", "max")
    searcher.set_search_properties("tok_s", "max", {})
    asked = searcher.suggest("t0")
    ran = {**asked, "NCCL_PROTO": "LL"}
    searcher.completed("t0", ran)
    searcher.on_trial_complete("t0", {"tok_s": 100.0, "round": 1})
    assert searcher.best() == ran
    searcher.suggest("t1")
    searcher.completed("t1", {**searcher.config_of["t1"], "NCCL_PROTO": "LL128"})
    assert searcher.config_of["t1"]["NCCL_PROTO"] != "LL128"


def test_of_the_draws_the_one_with_most_pairs_no_trial_had_together_is_taken() -> None:
    names = ["NCCL_PROTO", BACKEND, DRAFTS]
    launched = [{"NCCL_PROTO": "LL", BACKEND: "nccl", DRAFTS: 2},
                {"NCCL_PROTO": "Simple", BACKEND: "pcie-ipc", DRAFTS: 2}]
    seen_pair = {"NCCL_PROTO": "LL", BACKEND: "nccl", DRAFTS: 6}  # one new pair of three
    new_pairs = {"NCCL_PROTO": "LL", BACKEND: "pcie-ipc", DRAFTS: 6}  # three new pairs
    assert newest([seen_pair, new_pairs], launched, names) == new_pairs
    assert newest([], launched, names) is None
