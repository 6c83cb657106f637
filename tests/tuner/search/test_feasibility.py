"""A failure beside the baseline makes a value suspect, not guilty: it is retried beside the
levers that matter for its kind and ruled out only when it failed where they differ; a
suggestion the workload refuses alone is completed with the baseline's resolved partners."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from search_spaces.constraints import DRAFTS, STEPS, TOPK
from search_spaces.knobs import Value
from search_spaces.space import SearchSpace, from_mapping
from tuner.search import failure_levers, partners
from tuner.search.feasibility import Feasibility
from tuner.search.filtering import FilteringSearcher
from tuner.search.memory import FailureMemory
from tuner.search.space_searcher import SpaceSearcher

MEM, BS = "--mem-fraction-static", "--cuda-graph-max-bs-decode"


def _space() -> SearchSpace:
    return from_mapping({"name": "oom", "knobs": {
        BS: [16, 64], MEM: {"flag": "str", "values": ["0.85", "0.8", "0.7"]},
        "NCCL_PROTO": ["LL", "Simple"]}}, "test")


BASE: dict[str, Any] = _space().baseline()


def _ruled(memory: FailureMemory) -> list[tuple[str, Any]]:
    return sorted((e["knob"], e["value"]) for e in memory.evidence())


def test_the_table_names_the_levers_of_a_kind_in_the_space() -> None:
    names = list(BASE)
    assert failure_levers.relevant("cuda_oom", BS, names) == (MEM,)
    assert failure_levers.relevant("graph_capture", "NCCL_PROTO", names) == (BS, MEM)
    assert failure_levers.relevant("nccl_error", BS, names) == ("NCCL_PROTO",)
    assert failure_levers.relevant("crashed", BS, names) == ()
    assert failure_levers.relevant("invalid_config", STEPS, [STEPS, TOPK, "NCCL_PROTO"]) \
        == (TOPK,)
    failure_levers.register("my_kind", failure_levers.Levers(names=frozenset({"NCCL_PROTO"})))
    try:
        assert failure_levers.relevant("my_kind", BS, names) == ("NCCL_PROTO",)
    finally:
        del failure_levers.LEVERS["my_kind"]


def test_an_oom_beside_the_baseline_is_suspect_until_it_fails_beside_another_memory_value(
        ) -> None:
    memory = FailureMemory(BASE, _space().domains)
    memory.record(BASE, "t0", None)
    memory.record({**BASE, BS: 64}, "t1", "cuda_oom")
    assert _ruled(memory) == [] and memory.ruled_out({**BASE, BS: 64}) == []
    [suspect] = memory.suspects()
    assert (suspect.knob, suspect.value, suspect.levers) == (BS, 64, (MEM,))
    # a larger fraction differs, but torch's OOM points to the smallest: still suspect
    memory.record({**BASE, MEM: "0.85"}, "t1b", None)
    memory.record({**BASE, BS: 64, MEM: "0.85"}, "t2", "cuda_oom")
    assert _ruled(memory) == [] and len(memory.suspects()) == 1
    memory.record({**BASE, MEM: "0.7"}, "t3", None)
    memory.record({**BASE, BS: 64, MEM: "0.7"}, "t4", "cuda_oom")
    assert _ruled(memory) == [(BS, 64)]
    [entry] = memory.evidence()
    assert entry["levers"] == [MEM]
    assert entry["where"] == [{MEM: None}, {MEM: "0.85"}, {MEM: "0.7"}]
    assert f"beside {MEM}=unset and beside {MEM}=0.85 and beside {MEM}=0.7" in entry["why"]
    assert any(line.startswith(f"{BS}=64: cuda_oom in t1, t2, t4") for line in memory.lines())
    # without the values (a replay given none), two contexts that differ are enough
    assert _ruled(FailureMemory.replay(BASE, [("t0", BASE, None),
                                              ("t1", {**BASE, BS: 64}, "cuda_oom"),
                                              ("t1b", {**BASE, MEM: "0.85"}, None),
                                              ("t2", {**BASE, BS: 64, MEM: "0.85"}, "cuda_oom")]
                                       )) == [(BS, 64)]


def test_a_value_that_runs_beside_another_memory_value_is_cleared() -> None:
    memory = FailureMemory(BASE)
    memory.record(BASE, "t0", None)
    memory.record({**BASE, BS: 64}, "t1", "cuda_oom")
    memory.record({**BASE, BS: 64, MEM: "0.8"}, "t2", None)
    assert memory.suspects() == [] and _ruled(memory) == []


def test_the_retry_moves_the_memory_lever_the_table_points_to_within_its_share() -> None:
    space = _space()
    memory = FailureMemory(BASE)
    feasibility = Feasibility(space, memory, budget=10)
    memory.record(BASE, "t0", None)
    memory.record({**BASE, BS: 64}, "t1", "cuda_oom")
    # the failing context again is not worth launching; beside another fraction it is
    assert feasibility.blocked({**BASE, BS: 64, "NCCL_PROTO": "LL"})
    assert feasibility.blocked({**BASE, BS: 64, MEM: "0.8"}) is None
    retry = feasibility.retry(lambda c: True)
    assert retry == {**BASE, BS: 64, MEM: "0.7"}  # torch's OOM: the smallest fraction first
    assert feasibility.retry(lambda c: True) is None  # 15% of 10 trials: one retry
    assert feasibility.retries[0]["beside"] == {MEM: "0.7"}


def test_the_learned_record_outranks_the_tables_way_when_a_value_failed() -> None:
    space = _space()
    memory = FailureMemory(BASE)
    feasibility = Feasibility(space, memory)
    memory.record(BASE, "t0", None)
    memory.record({**BASE, MEM: "0.7", "NCCL_PROTO": "LL"}, "t1", "crashed")
    memory.record({**BASE, MEM: "0.7", "NCCL_PROTO": "Simple"}, "t2", "crashed")
    memory.record({**BASE, BS: 64}, "t3", "cuda_oom")
    assert feasibility.p_ok((MEM, "0.7")) < feasibility.p_ok((MEM, "0.8")) == 0.5
    retry = feasibility.retry(lambda c: True)
    assert retry is not None and retry[MEM] == "0.8"


def _drive(searcher: FilteringSearcher, evaluate: Any, kind: str, trials: int
           ) -> list[dict[str, Value]]:
    searcher.set_search_properties("tok_s", "max", {})
    launched = []
    for i in range(trials):
        point = searcher.suggest(f"t{i}")
        if not isinstance(point, dict):
            break
        launched.append(point)
        value = evaluate(point)
        searcher.on_trial_complete(f"t{i}", None if value is None else {"tok_s": value},
                                   error=value is None)
        searcher.record_outcome(f"t{i}", point, None if value is not None else kind)
    return launched


def test_the_filter_retries_a_suspect_and_tells_the_inner_searcher() -> None:
    space = _space()

    def evaluate(config: Mapping[str, Value]) -> float | None:
        if config[BS] == 64 and config[MEM] not in ("0.8", "0.7"):
            return None
        return 100.0 + (20.0 if config[BS] == 64 else 0.0)

    for seed in range(5):
        memory = FailureMemory(space.baseline())
        searcher = FilteringSearcher(SpaceSearcher(space, "random", seed), space,
                                     memory=memory, budget=20)
        launched = _drive(searcher, evaluate, "cuda_oom", 20)
        assert (BS, 64) not in [(e["knob"], e["value"]) for e in memory.evidence()]
        assert any(p[BS] == 64 and evaluate(p) for p in launched)
        assert searcher.counts()["retries"] <= 3


# ---------------------------------------------------------------- partners


def _spec_space() -> SearchSpace:
    return from_mapping({"name": "spec", "knobs": {STEPS: [1, 3], TOPK: [1, 4],
                                                   DRAFTS: [2, 4, 8]}}, "test")


RESOLVED = {STEPS: 5, TOPK: 4, DRAFTS: 8}


def _refusal(config: Mapping[str, Value]) -> str | None:
    """SGLang 0.5.16: steps without topk is a TypeError in its resolution."""
    if config.get(STEPS) is not None and config.get(TOPK) is None:
        return "TypeError: '>' not supported between instances of 'NoneType' and 'int'"
    return None


def test_knob_values_read_a_servers_resolved_arguments() -> None:
    resolved = {"speculative_num_steps": 5, "speculative_eagle_topk": 4,
                "mem_fraction_static": 0.88, "speculative_num_draft_tokens": None}
    assert partners.knob_values(resolved, [STEPS, TOPK, DRAFTS, MEM, "NCCL_PROTO"]) == {
        STEPS: 5, TOPK: 4, MEM: "0.88"}


def test_a_lever_refused_alone_is_completed_with_the_baselines_partners() -> None:
    space = _spec_space()

    def refused(config: dict[str, Value]) -> list[str]:
        return [*space.validate(config), *filter(None, [_refusal(config)])]

    steps = space.complete({STEPS: 3})
    assert partners.complete(space, steps, refused(steps), RESOLVED, refused) == (
        {**steps, TOPK: 4}, [TOPK])
    # draft tokens alone: SGLang asserts (the space's rule names the steps); steps need topk
    drafts = space.complete({DRAFTS: 4})
    done = partners.complete(space, drafts, refused(drafts), RESOLVED, refused)
    assert done is not None and done[0] == {**drafts, STEPS: 5, TOPK: 4}
    # nothing the baseline resolved makes (3, -, 8) with topk 1 valid: left refused
    assert partners.complete(space, space.complete({STEPS: 1, DRAFTS: 8}), ["x"], RESOLVED,
                             refused) is None


def test_the_filter_launches_completed_partners_and_counts_what_it_refused() -> None:
    space = _spec_space()
    told: list[dict[str, Any]] = []
    searcher = FilteringSearcher(SpaceSearcher(space, "grid"), space, refusal=_refusal,
                                 resolved=lambda c: RESOLVED, on_complete=told.append)
    launched = _drive(searcher, lambda c: 1.0, "invalid_config", 30)
    assert all(_refusal(p) is None and not space.validate(p) for p in launched)
    assert {STEPS: 3, TOPK: 4} in [{k: v for k, v in p.items() if v is not None and k != DRAFTS}
                                   for p in launched]
    counts = searcher.counts()
    assert counts["completed"] >= 1 and counts["refused"] < counts["proposals"]
    # completed.jsonl's entries: the configuration that ran, its partners, the refusal
    assert len(told) == counts["completed"] and all(e["config"] in launched for e in told)
    assert {STEPS: 3, TOPK: 4} in [{k: v for k, v in e["config"].items()
                                    if v is not None and k != DRAFTS} for e in told]
    assert all(e["partners"] and all(RESOLVED[n] == v for n, v in e["partners"].items())
               and e["refused"] for e in told)
